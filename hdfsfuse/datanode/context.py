"""What every block read needs, handed to the replicated and the striped reader when they are built.

A reader gets the connection pool, the timeouts, the stats, the replica policy, the client's
name on the wire and, when the mount has one, the block cache's read face. Nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Protocol

from hdfsfuse.datanode.connection import Timeouts
from hdfsfuse.datanode.dtp import ReadBlockParser
from hdfsfuse.datanode.pool import ConnectionPool
from hdfsfuse.datanode.replicas import ReplicaPolicy
from hdfsfuse.proto import hdfs_pb2
from hdfsfuse.stats import Stats

Fetch = Callable[[list[ReadBlockParser]], Awaitable[bytes | bytearray | None]]


@dataclasses.dataclass(frozen=True, slots=True)
class BlockKey:
    """A finalized block's bytes: fixed by its pool, id and generation stamp."""

    pool: str
    block_id: int
    generation_stamp: int

    @classmethod
    def of(cls, block: hdfs_pb2.ExtendedBlockProto) -> BlockKey:
        return cls(block.poolId, block.blockId, block.generationStamp)

    def stem(self) -> str:
        return f"{self.block_id}_{self.generation_stamp}"


class CachedBlocks(Protocol):
    """The block cache's read face (`hdfsfuse.local.blockcache.reads.CachedReads`)."""

    async def read(self, key: BlockKey, block_length: int, offset: int, length: int, fetch: Fetch,
                   still_current: Callable[[], bool]) -> bytes | bytearray | None: ...

    def read_now(self, block: hdfs_pb2.ExtendedBlockProto, offset: int, length: int, *,
                 poll: bool = False) -> bytes | bytearray | None: ...


def xfer_address(loc: hdfs_pb2.DatanodeInfoProto, use_hostname: bool = False) -> str:
    """"host:port" of a DataNode's data port ("[v6addr]:port" for IPv6 literals)."""
    host = loc.id.hostName if use_hostname and loc.id.hostName else loc.id.ipAddr
    return f"[{host}]:{loc.id.xferPort}" if ":" in host else f"{host}:{loc.id.xferPort}"


@dataclasses.dataclass(frozen=True, slots=True)
class ReadContext:
    pool: ConnectionPool
    timeouts: Timeouts
    stats: Stats
    replicas: ReplicaPolicy
    client_name: str  # names this client in every op header
    use_hostname: bool = False  # dfs.client.use.datanode.hostname
    cached: CachedBlocks | None = None  # the persistent block cache, when the mount has one

    def address(self, loc: hdfs_pb2.DatanodeInfoProto) -> str:
        return xfer_address(loc, self.use_hostname)
