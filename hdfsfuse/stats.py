"""Live counters of what hdfsfuse did, shared by the client and the mount. Pure data, no I/O."""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Mapping


@dataclasses.dataclass
class Stats:
    started: float = dataclasses.field(default_factory=time.monotonic)
    app_bytes: int = 0  # bytes handed to applications (or library callers)
    fuse_reads: int = 0
    dn_payload_bytes: int = 0  # data bytes DataNodes sent us, chunk alignment included
    dtp_read_ops: int = 0
    dn_connects: int = 0
    # DataNode SASL handshakes by the layer they set up: "auth", "auth-int", "auth-conf/3des", "AES/CTR"
    dn_sasl: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    encryption_key_fetches: int = 0  # data-encryption keys fetched from the NameNode
    dn_reuses: int = 0
    dn_stale_retries: int = 0
    checksum_failures: int = 0
    replica_failovers: int = 0
    bad_block_reports: int = 0
    token_refreshes: int = 0  # block tokens refused by a DataNode and fetched again
    hedged_reads: int = 0  # reads that also asked a second replica after the hedging threshold
    hedge_wins: int = 0  # ...and got their bytes from it first
    ec_degraded_reads: int = 0  # erasure-coded unit ranges decoded from other units
    ec_decoded_bytes: int = 0
    block_cache_served_bytes: int = 0  # bytes read from the persistent block cache
    block_cache_stored_bytes: int = 0
    block_cache_evictions: int = 0
    block_cache_corrupt: int = 0  # cached blocks that failed verification (dropped, read from HDFS)
    block_cache_errors: int = 0
    block_cache_used_bytes: int = 0
    short_circuit_reads: int = 0  # reads served from a local DataNode's files (short-circuit)
    short_circuit_bytes: int = 0
    short_circuit_fallbacks: int = 0  # reads of a local replica that went over TCP instead
    short_circuit_invalidated: int = 0  # cached local files dropped: the replica was deleted, moved or changed
    short_circuit_fd_requests: int = 0
    short_circuit_by_datanode: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    short_circuit_segments: int = 0
    short_circuit_open_blocks: int = 0  # blocks whose local files are open now (a gauge)
    inotify_changes: int = 0  # changes the NameNode's edit stream reported (-o inotify)
    inotify_resyncs: int = 0  # times the edit stream was lost and every cached entry forgotten
    # local reads (block cache, short-circuit) not answered inline from memory, by how: "io_uring", "thread"
    local_disk_reads: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    files_changed: int = 0  # reads refused because an open file was replaced, truncated or deleted
    kms_key_requests: int = 0  # data keys of encrypted files asked of the KMS (one per EDEK and identity)
    kms_key_failures: int = 0  # ...that failed: refused, unreachable or in error
    data_keys_reused: int = 0  # encrypted-file opens served by a data key held in memory
    located_windows: int = 0  # located listing pages fetched to answer lookups and opens of their names
    name_windows: int = 0  # plain listing pages fetched to renew expired names whose files' locations are kept
    cache_hits: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    cache_misses: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)

    @property
    def amplification(self) -> float:
        return self.dn_payload_bytes / self.app_bytes if self.app_bytes else 0.0

    @property
    def uptime(self) -> float:
        return time.monotonic() - self.started


def snapshot(stats: Stats, rpc_calls: collections.Counter[str], namenode_failovers: int,
             datanode_latency_ms: dict[str, float] | None = None,
             rpcs_by_role: collections.Counter[str] | None = None) -> dict[str, object]:
    """Everything `hdfsfuse stats` shows, as plain JSON-able data."""
    return {
        "uptime_seconds": round(stats.uptime, 3),
        "app_bytes_read": stats.app_bytes,
        "datanode_payload_bytes": stats.dn_payload_bytes,
        "amplification": round(stats.amplification, 4),
        "fuse_reads": stats.fuse_reads,
        "dtp_read_ops": stats.dtp_read_ops,
        "datanode_connects": stats.dn_connects,
        "datanode_sasl_handshakes": dict(stats.dn_sasl),
        "encryption_key_fetches": stats.encryption_key_fetches,
        "datanode_reuses": stats.dn_reuses,
        "datanode_stale_retries": stats.dn_stale_retries,
        "checksum_failures": stats.checksum_failures,
        "replica_failovers": stats.replica_failovers,
        "bad_block_reports": stats.bad_block_reports,
        "token_refreshes": stats.token_refreshes,
        "hedged_reads": stats.hedged_reads,
        "hedge_wins": stats.hedge_wins,
        "ec_degraded_reads": stats.ec_degraded_reads,
        "ec_decoded_bytes": stats.ec_decoded_bytes,
        "block_cache_served_bytes": stats.block_cache_served_bytes,
        "block_cache_stored_bytes": stats.block_cache_stored_bytes,
        "block_cache_evictions": stats.block_cache_evictions,
        "block_cache_corrupt": stats.block_cache_corrupt,
        "block_cache_errors": stats.block_cache_errors,
        "block_cache_used_bytes": stats.block_cache_used_bytes,
        "short_circuit_reads": stats.short_circuit_reads,
        "short_circuit_bytes": stats.short_circuit_bytes,
        "short_circuit_fallbacks": stats.short_circuit_fallbacks,
        "short_circuit_invalidated": stats.short_circuit_invalidated,
        "short_circuit_fd_requests": stats.short_circuit_fd_requests,
        "short_circuit_by_datanode": dict(sorted(stats.short_circuit_by_datanode.items())),
        "short_circuit_segments": stats.short_circuit_segments,
        "short_circuit_open_blocks": stats.short_circuit_open_blocks,
        "inotify_changes": stats.inotify_changes,
        "inotify_resyncs": stats.inotify_resyncs,
        "local_disk_reads": dict(sorted(stats.local_disk_reads.items())),
        "files_changed": stats.files_changed,
        "kms_key_requests": stats.kms_key_requests,
        "kms_key_failures": stats.kms_key_failures,
        "data_keys_reused": stats.data_keys_reused,
        "located_windows": stats.located_windows,
        "name_windows": stats.name_windows,
        "namenode_failovers": namenode_failovers,
        "namenode_rpcs": dict(sorted(rpc_calls.items())),
        "namenode_rpcs_by_role": dict(sorted((rpcs_by_role or collections.Counter()).items())),
        "cache_hits": dict(sorted(stats.cache_hits.items())),
        "cache_misses": dict(sorted(stats.cache_misses.items())),
        "datanode_latency_ms": dict(datanode_latency_ms or {}),
    }


_HELP = {
    "uptime_seconds": "Seconds since the mount started.",
    "open_files": "Files open through the mount now.",
    "open_directories": "Directories open through the mount now.",
    "kept_names": "Names kept from listings and lookups (metadata_entries).",
    "kept_locations": "Files whose block locations are kept across opens (metadata_entries).",
    "app_bytes_read": "Bytes returned to applications.",
    "datanode_payload_bytes": "Data bytes received from DataNodes, chunk alignment included.",
    "amplification": "datanode_payload_bytes / app_bytes_read.",
    "fuse_reads": "FUSE read requests served.",
    "dtp_read_ops": "DataTransferProtocol READ_BLOCK operations sent.",
    "datanode_connects": "New TCP connections to DataNodes.",
    "datanode_sasl_handshakes": "SASL handshakes on new DataNode connections, by the layer they set up.",
    "encryption_key_fetches": "Data-encryption keys fetched from the NameNode (dfs.encrypt.data.transfer).",
    "datanode_reuses": "READ_BLOCK operations on a pooled connection.",
    "datanode_stale_retries": "Pooled connections found closed and retried.",
    "checksum_failures": "Checksum mismatches detected.",
    "replica_failovers": "Reads moved to another replica after a failure.",
    "bad_block_reports": "Corrupt replicas reported to the NameNode.",
    "token_refreshes": "Block tokens refused by a DataNode and fetched again.",
    "hedged_reads": "Reads that also asked a second replica after the hedging threshold.",
    "hedge_wins": "Hedged reads answered first by the second replica.",
    "ec_degraded_reads": "Erasure-coded ranges decoded from other units because a unit could not be read.",
    "ec_decoded_bytes": "Bytes rebuilt by erasure decoding.",
    "block_cache_served_bytes": "Bytes served from the persistent block cache (cache_dir).",
    "block_cache_stored_bytes": "Bytes written to the persistent block cache.",
    "block_cache_evictions": "Blocks dropped from the persistent block cache to stay within cache_size.",
    "block_cache_corrupt": "Cached blocks that failed verification, dropped and read from HDFS instead.",
    "block_cache_errors": "Block cache lookups or stores that failed with an I/O error (such as a full disk).",
    "block_cache_used_bytes": "Bytes the persistent block cache holds on disk.",
    "local_disk_reads": "Local reads (block cache, short-circuit) not answered inline from memory, by how they "
                        "were done: polled for inline (the mount's only read), io_uring, or a worker thread.",
    "short_circuit_reads": "Reads served from a local DataNode's block files (short-circuit), not over TCP.",
    "short_circuit_bytes": "Bytes read from local DataNodes' block files (short-circuit).",
    "short_circuit_fallbacks": "Reads of a local replica that went over TCP (short-circuit refused or failed).",
    "short_circuit_invalidated": "Cached local block files dropped because the replica was deleted, moved or changed.",
    "short_circuit_fd_requests": "Block and meta file descriptors asked of local DataNodes.",
    "short_circuit_by_datanode": "Short-circuit reads by the local DataNode whose files served them.",
    "short_circuit_segments": "Shared-memory slot segments asked of local DataNodes.",
    "short_circuit_open_blocks": "Blocks whose local files (block and meta) short-circuit reads keep open.",
    "inotify_changes": "Changes reported by the NameNode's edit stream (-o inotify) and invalidated.",
    "inotify_resyncs": "Times the edit stream was lost and every cached name and attribute forgotten.",
    "files_changed": "Reads refused because the open file was replaced, truncated or deleted.",
    "kms_key_requests": "Data keys of encrypted files asked of the KMS (one per EDEK and identity).",
    "kms_key_failures": "KMS key requests that failed: refused, unreachable or in error.",
    "data_keys_reused": "Opens of encrypted files whose data key was already held in memory.",
    "located_windows": "Located listing pages fetched to answer lookups and opens of the names in them.",
    "name_windows": "Listing pages without locations fetched to renew expired names whose files' locations are kept.",
    "namenode_failovers": "Switches to another NameNode.",
    "namenode_rpcs": "NameNode RPCs by method.",
    "namenode_rpcs_by_role": "NameNode RPCs answered by the active NameNode and by observers.",
    "cache_hits": "Cache hits by cache.",
    "cache_misses": "Cache misses by cache.",
    "datanode_latency_ms": "Each DataNode's recent expected time for a 4 KiB read (milliseconds).",
}
_GAUGES = ("uptime_seconds", "open_files", "open_directories", "kept_names", "kept_locations",
           "amplification", "datanode_latency_ms", "block_cache_used_bytes",
           "short_circuit_open_blocks")
_LABELS = {"namenode_rpcs": "method", "namenode_rpcs_by_role": "role", "cache_hits": "cache", "cache_misses": "cache",
           "datanode_latency_ms": "datanode", "datanode_sasl_handshakes": "layer",
           "short_circuit_by_datanode": "datanode", "local_disk_reads": "how"}


def prometheus(snap: dict[str, object]) -> str:
    """The snapshot in the Prometheus text exposition format."""
    return prometheus_of([({}, snap)])


def prometheus_of(snaps: list[tuple[dict[str, str], dict[str, object]]]) -> str:
    """Several snapshots as one exposition, each sample with its snapshot's labels (a CSI driver's
    volumes: {"volume_id": ...}); every metric's HELP and TYPE once."""
    lines = []
    keys = list(dict.fromkeys(key for _, snap in snaps for key in snap))
    for key in keys:
        name = f"hdfsfuse_{key}"
        lines.append(f"# HELP {name} {_HELP[key]}")
        lines.append(f"# TYPE {name} {'gauge' if key in _GAUGES else 'counter'}")
        for labels, snap in snaps:
            if key not in snap:
                continue
            value = snap[key]
            if isinstance(value, dict):
                for label, v in value.items():
                    lines.append(f"{name}{_labels({**labels, _LABELS[key]: label})} {v}")
            else:
                lines.append(f"{name}{_labels(labels)} {value}")
    return "\n".join(lines) + "\n"


def _labels(labels: Mapping[str, object]) -> str:
    """`{k="v",...}` with the values escaped, or nothing when there are none."""
    if not labels:
        return ""
    escaped = (str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for v in labels.values())
    return "{" + ",".join(f'{k}="{v}"' for k, v in zip(labels, escaped, strict=True)) + "}"
