"""Reading erasure-coded block groups over trio: healthy reads, and degraded reads that decode.

Does I/O; the layout and the plan are `hdfsfuse.erasure.striping`, the arithmetic `hdfsfuse.erasure.codec`.

    piece of a group [offset, +length)
      -> plan_group_read(): one exact READ_BLOCK per data unit touched, all concurrent
      -> a unit that fails (no location, refused, dead, corrupt chunk, ...):
         read the same in-block range from k other units (data first, then parity; units past
         their stored length are zeros and cost nothing), decode it, and scatter it.

A degraded 4 KiB read inside one cell thus costs k x 4 KiB, as Java's pread does. A unit that
failed is remembered per group (the open file's `dead`), so later reads decode at once. A corrupt
internal block is reported to the NameNode. A refused block token refetches the group's
locations once.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

from hdfsfuse.datanode import dtp, ops
from hdfsfuse.datanode.buffers import read_buffer
from hdfsfuse.datanode.connection import ConnectFailed
from hdfsfuse.datanode.context import BlockKey, ReadContext
from hdfsfuse.datanode.dtp import Placement
from hdfsfuse.datanode.pieces import Piece
from hdfsfuse.datanode.reader import read_replica, run_each
from hdfsfuse.erasure import codec as erasure
from hdfsfuse.erasure.arrival import Arrival
from hdfsfuse.erasure.codec import EcPolicy
from hdfsfuse.erasure.striping import UnitRead, decode_sources, internal_length, plan_group_read
from hdfsfuse.errors import BlockUnavailable, ChecksumMismatch, HdfsError, InvalidBlockToken, ProtocolError
from hdfsfuse.proto import hdfs_pb2, rpc_pb2
from hdfsfuse.security.transfer import DataTransferSecurity

log = logging.getLogger(__name__)

UINT64 = (1 << 64) - 1


@dataclasses.dataclass(frozen=True, slots=True)
class UnitSource:
    """One stored internal block: where it is and how to ask for it."""

    address: str
    loc: hdfs_pb2.DatanodeInfoProto
    block: hdfs_pb2.ExtendedBlockProto
    token: rpc_pb2.TokenProto
    header_field: bytes
    what: str


@dataclasses.dataclass(frozen=True, slots=True)
class GroupPlan:
    """A located block group: each internal block's stored length and locations."""

    start: int  # the group's file offset
    lengths: tuple[int, ...]
    sources: dict[int, list[UnitSource]]  # unit index -> locations, the NameNode's order


def group_plan(block: hdfs_pb2.LocatedBlockProto, policy: EcPolicy, path: str, client_name: str,
               address_of: Callable[[hdfs_pb2.DatanodeInfoProto], str]) -> GroupPlan:
    """The internal blocks of a located group (`address_of(loc)` names a DataNode's data port)."""
    indices = block.blockIndices
    if len(indices) != len(block.locs):
        raise ProtocolError(f"{path}: block group {block.b.blockId} has {len(block.locs)} locations but "
                            f"{len(indices)} block indices")
    tokens = list(block.blockTokens)
    lengths = tuple(internal_length(block.b.numBytes, policy, i) for i in range(policy.units))
    sources: dict[int, list[UnitSource]] = {}
    for pos, (index, loc) in enumerate(zip(indices, block.locs, strict=True)):
        if index >= policy.units:
            raise ProtocolError(f"{path}: block group {block.b.blockId} lists internal block {index}, beyond "
                                f"{policy.name}'s {policy.units} units")
        internal = hdfs_pb2.ExtendedBlockProto(
            poolId=block.b.poolId, blockId=(block.b.blockId + index) & UINT64,
            generationStamp=block.b.generationStamp, numBytes=lengths[index],
        )
        token = tokens[pos] if pos < len(tokens) else block.blockToken
        address = address_of(loc)
        header = ops.header_field(ops.encode_op_header(internal, token, client_name))
        what = f"internal block {index} ({internal.blockId}) of {path} on DataNode {address}"
        sources.setdefault(index, []).append(UnitSource(address, loc, internal, token, header, what))
    return GroupPlan(block.offset, lengths, sources)


class StripedFile(Protocol):
    """What the striped reader needs of an open file (`hdfsfuse.client.files.HdfsFile`)."""

    path: str
    dead: dict[int, set[str]]  # group start -> DataNodes that failed reading it
    dn_security: DataTransferSecurity | None

    def group_plan(self, start: int, policy: EcPolicy, context: ReadContext) -> GroupPlan: ...


Relocate = Callable[[StripedFile, int, int], Awaitable[object]]  # (file, offset, length): fetch locations again
ReportCorrupt = Callable[[StripedFile, hdfs_pb2.ExtendedBlockProto, hdfs_pb2.DatanodeInfoProto, rpc_pb2.TokenProto],
                         None]


class _TokenRefused(Exception):
    """A DataNode refused an internal block's token: refetch the group's locations."""


class StripedReader:
    """Reads pieces of erasure-coded files: healthy units at once, lost ones decoded."""

    def __init__(self, context: ReadContext, *, relocate: Relocate, report_corrupt: ReportCorrupt) -> None:
        self.context = context
        self.relocate = relocate
        self.report_corrupt = report_corrupt

    async def read(self, file: StripedFile, piece: Piece, policy: EcPolicy,
                   arrival: Arrival | None = None) -> bytearray:
        """A piece of one group. A refused token, or more lost units than the parity covers,
        fetch the group's locations again (forgetting its dead DataNodes) and retry, once each.
        `arrival`: told the buffer and which of its bytes have landed, while the read runs."""
        token_refreshed = refetched = False
        while True:
            plan = file.group_plan(piece.block_start, policy, self.context)
            try:
                return await self._read_group(file, plan, piece, policy, arrival)
            except _TokenRefused:
                if token_refreshed:
                    raise BlockUnavailable(f"{file.path}: block tokens of the group at file offset "
                                           f"{piece.block_start} were refused twice") from None
                token_refreshed = True
                self.context.stats.token_refreshes += 1
                log.info("%s: a block token was refused; fetching the group's locations again", file.path)
            except BlockUnavailable:
                if refetched:
                    raise
                refetched = True
                log.info("%s: too many units of the group at file offset %d failed; fetching its locations again",
                         file.path, piece.block_start)
                file.dead.pop(plan.start, None)
            await self.relocate(file, piece.block_start, 1)

    async def _read_group(self, file: StripedFile, plan: GroupPlan, piece: Piece, policy: EcPolicy,
                          arrival: Arrival | None) -> bytearray:
        output = read_buffer(piece.length)  # the units' spans cover it: every byte written or decoded
        reads = plan_group_read(policy, piece.offset_in_block, piece.length)
        dead = file.dead.setdefault(plan.start, set())
        failed: dict[int, str] = {}  # unit -> why it cannot be read in this piece
        fetched: dict[int, tuple[int, bytes | bytearray]] = {}  # unit -> (in-block start, bytes) read so far

        # Without the block cache, each unit's packets land straight at their places in `output`.
        into = self.context.cached is None
        if arrival is not None and into:
            arrival.start(output, reads)

        async def healthy(read: UnitRead) -> None:
            placement = (output, read.placement(policy)) if into else None
            progress = None if placement is None or arrival is None else functools.partial(arrival.delivered, read.unit)
            data = await self._read_unit(file, plan, read.unit, read.start, read.length, dead, failed, placement,
                                         progress)
            if data is not None and placement is None:
                fetched[read.unit] = (read.start, data)
                read.scatter(data, output)

        await run_each(healthy, reads)
        if failed and into:  # decoding needs the units read (None only for those in `failed`) as their own bytes
            for read in reads:
                if read.unit not in failed:
                    fetched[read.unit] = (read.start, read.gather(output))
        for read in reads:
            if read.unit in failed:
                data = await self._recover(file, plan, policy, read, dead, failed, fetched)
                read.scatter(data, output)
        return output

    async def _recover(self, file: StripedFile, plan: GroupPlan, policy: EcPolicy, read: UnitRead, dead: set[str],
                       failed: dict[int, str], fetched: dict[int, tuple[int, bytes | bytearray]]) -> bytes:
        """Unit `read.unit`'s in-block range, decoded from k other units' same range."""
        start, length = read.start, read.length
        stats = self.context.stats
        while True:
            sources = decode_sources(policy, read.unit, set(failed))
            if sources is None:
                reasons = "; ".join(f"unit {u}: {why}" for u, why in sorted(failed.items()))
                raise BlockUnavailable(
                    f"{file.path}: the block group at file offset {plan.start} has {len(failed)} unreadable "
                    f"units and {policy.name} can rebuild only {policy.parity_units}: {reasons}"
                )
            inputs: dict[int, bytes | bytearray] = {}

            async def source(unit: int, inputs: dict[int, bytes | bytearray] = inputs) -> None:
                stored = min(start + length, plan.lengths[unit]) - start  # beyond it: zeros
                have = fetched.get(unit)
                data: bytes | bytearray | None
                if stored <= 0:
                    data = b""
                elif have is not None and have[0] <= start and have[0] + len(have[1]) >= start + stored:
                    data = bytes(memoryview(have[1])[start - have[0] : start - have[0] + stored])
                else:
                    data = await self._read_unit(file, plan, unit, start, stored, dead, failed)
                    if data is None:
                        return
                    fetched.setdefault(unit, (start, data))
                inputs[unit] = data if len(data) == length else bytes(data) + bytes(length - len(data))

            await run_each(source, sources)
            if len(inputs) == policy.data_units:
                stats.ec_degraded_reads += 1
                stats.ec_decoded_bytes += length
                return erasure.decode(policy.codec, policy.data_units, policy.parity_units, inputs,
                                      [read.unit], length)[read.unit]

    async def _read_unit(self, file: StripedFile, plan: GroupPlan, unit: int, start: int, length: int,
                         dead: set[str], failed: dict[int, str], into: tuple[bytearray, Placement] | None = None,
                         progress: Callable[[int], None] | None = None) -> bytes | bytearray | None:
        """Exactly `length` bytes at `start` of one internal block, or None (recorded in `failed`).
        `into` (no block cache): they go to a group buffer's places instead, returned, and
        `progress` hears the in-block offset their verified bytes reach as they land.

        With the block cache on, an internal block is a block like any other: looked up first,
        stored after a read from its DataNode.
        """
        cached = self.context.cached
        if cached is None or unit not in plan.sources:
            return await self._fetch_unit(file, plan, unit, start, length, dead, failed, None, into, progress)
        b = plan.sources[unit][0].block
        key = BlockKey.of(b)

        async def fetch(keep: list[dtp.ReadBlockParser]) -> bytearray | None:
            return await self._fetch_unit(file, plan, unit, start, length, dead, failed, keep)

        # The fetch reads exactly this plan's internal block: the key always names its bytes.
        return await cached.read(key, plan.lengths[unit], start, length, fetch, lambda: True)

    async def _fetch_unit(self, file: StripedFile, plan: GroupPlan, unit: int, start: int, length: int,
                          dead: set[str], failed: dict[int, str], keep: list[dtp.ReadBlockParser] | None,
                          into: tuple[bytearray, Placement] | None = None,
                          progress: Callable[[int], None] | None = None) -> bytearray | None:
        context = self.context
        sources = [s for s in plan.sources.get(unit, []) if s.address not in dead]
        if not sources:
            failed[unit] = "no live location" if unit in plan.sources else "no location"
            return None
        for src in sources:
            request = ops.encode_read_block(src.header_field, start, length)
            security = None if file.dn_security is None else file.dn_security.for_block(src.token)
            try:
                return await read_replica(context.pool, src.address, request, start, length, src.what,
                                          context.timeouts, context.stats, security, keep, into, progress)
            except InvalidBlockToken:
                raise _TokenRefused from None
            except HdfsError as e:
                failed[unit] = f"{src.address}: {e}"
                dead.add(src.address)
                if isinstance(e, ChecksumMismatch):
                    context.stats.checksum_failures += 1
                    self.report_corrupt(file, src.block, src.loc, src.token)
                    log.warning("%s; decoding around it", e)
                else:
                    if isinstance(e, ConnectFailed):
                        context.replicas.refused(src.address, trio.current_time())
                    log.warning("%s: %s; decoding around it", src.what, e)
        return None
