"""What a client is built with: identity, security, timeouts, hedging, pools and the block cache."""

from __future__ import annotations

import dataclasses

from hdfsfuse.conf.mount_options import MountOptions
from hdfsfuse.datanode.connection import Timeouts
from hdfsfuse.security.credentials import SecurityOptions


@dataclasses.dataclass(frozen=True)
class ClientOptions:
    user: str | None = None
    security: SecurityOptions = dataclasses.field(default_factory=SecurityOptions)
    timeouts: Timeouts = dataclasses.field(default_factory=Timeouts)
    namenode_call_timeout: float = 20.0
    namenode_total_timeout: float = 60.0
    namenode_connect_timeout: float = 5.0
    connect_penalty_seconds: float = 3.0  # a DataNode that refused a connection is tried last this long
    hedge_after: float | None = -1.0  # seconds; -1 adapts to DataNode latency; None never hedges
    length_refresh_seconds: float = 0.5  # how often a file being written re-learns its readable length
    location_window_blocks: int = 10  # block locations fetched per getBlockLocations (as Java does)
    pool_idle_seconds: float = 3.0
    pool_capacity: int = 64
    cache_dir: str | None = None  # a persistent block cache here (off when None)
    cache_size: int = 10 * 1024**3
    cache_max_age: float = 1.0  # the cache answers for an open file's block described this recently
    cache_renewal_wait: float = 1.0  # how long a read waits for a renewed description, then asks DataNodes
    located_files: int = 100_000  # block locations of unchanged files kept across opens (`located`)
    short_circuit: bool = True  # read local replicas from their files when the configuration allows it
    kms_ca_file: str | None = None  # CA certificates for an https KMS (None: the system's)
    key_keep_seconds: float = 600.0  # an encrypted file's data key stays in memory this long after its last open


def from_mount_options(options: MountOptions) -> ClientOptions:
    """The client a mount (or the fsspec filesystem, from the same options) reads with."""
    return ClientOptions(
        user=options.user,
        security=SecurityOptions(keytab=options.keytab, principal=options.principal, token_file=options.token_file),
        timeouts=Timeouts(connect=options.connect_timeout, read=options.read_timeout, total=options.total_timeout),
        namenode_total_timeout=options.namenode_timeout,
        namenode_call_timeout=min(20.0, options.namenode_timeout),
        namenode_connect_timeout=options.connect_timeout,
        hedge_after=options.hedge_after,
        cache_dir=options.cache_dir,
        cache_size=options.cache_size,
        short_circuit=options.short_circuit,
        kms_ca_file=options.kms_ca_file,
        located_files=options.metadata_entries if options.identity == "mount" else 0,
    )
