"""Live counters of what hdfsfuse did, shared by the client and the mount. Pure data, no I/O."""

from __future__ import annotations

import collections
import dataclasses
import time


@dataclasses.dataclass
class Stats:
    started: float = dataclasses.field(default_factory=time.monotonic)
    app_bytes: int = 0  # bytes handed to applications (or library callers)
    fuse_reads: int = 0
    dn_payload_bytes: int = 0  # data bytes DataNodes sent us, chunk alignment included
    dtp_read_ops: int = 0
    dn_connects: int = 0
    dn_reuses: int = 0
    dn_stale_retries: int = 0
    checksum_failures: int = 0
    replica_failovers: int = 0
    bad_block_reports: int = 0
    cache_hits: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    cache_misses: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    @property
    def amplification(self) -> float:
        return self.dn_payload_bytes / self.app_bytes if self.app_bytes else 0.0

    @property
    def uptime(self) -> float:
        return time.monotonic() - self.started
