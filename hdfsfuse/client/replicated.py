"""Reading a replicated block: replica order, failover, hedging, token refresh and the block cache.

    piece of a block
      -> the block cache (finalized blocks, while their description is fresh), else
      -> one round over the replicas, best first (`ReplicaPolicy`): a local replica from its
         files, else one exact READ_BLOCK; hedged onto the next replica when slow
      -> a refused token: fetch the block's locations again, once; every replica failed:
         fetch them again, once, forgetting the dead DataNodes
      -> a replica that served a corrupt chunk is reported to the NameNode

Failures of one block are remembered for that block only (`HdfsFile.dead`). Does I/O.
"""

from __future__ import annotations

import dataclasses
import logging

import trio

from hdfsfuse.client.files import BlockPlan, HdfsFile
from hdfsfuse.client.locator import Locator
from hdfsfuse.client.options import ClientOptions
from hdfsfuse.client.reports import BadBlockReports
from hdfsfuse.datanode import dtp, ops
from hdfsfuse.datanode.connection import ConnectFailed
from hdfsfuse.datanode.context import BlockKey, ReadContext
from hdfsfuse.datanode.hedging import HedgeTimer, Race
from hdfsfuse.datanode.pieces import Piece
from hdfsfuse.datanode.reader import read_replica
from hdfsfuse.errors import BlockUnavailable, ChecksumMismatch, HdfsError, InvalidBlockToken
from hdfsfuse.local.short_circuit import ShortCircuitReads
from hdfsfuse.proto import hdfs_pb2

log = logging.getLogger(__name__)

Result = bytes | bytearray | HdfsError


@dataclasses.dataclass(slots=True)
class _Outcome:
    """What one round over a block's replicas gave: data, or why not."""

    data: bytes | bytearray | None = None
    token_refused: bool = False
    corrupt: list[hdfs_pb2.DatanodeInfoProto] = dataclasses.field(default_factory=list)


class ReplicatedReader:
    def __init__(self, context: ReadContext, *, locator: Locator, reports: BadBlockReports,
                 short_circuit: ShortCircuitReads | None, options: ClientOptions, nursery: trio.Nursery) -> None:
        self.context = context
        self.locator = locator
        self.reports = reports
        self.short_circuit = short_circuit
        self.options = options
        self._nursery = nursery  # cache renewals, and the hedges the timer starts
        self.hedges = HedgeTimer()
        nursery.start_soon(self.hedges.run, nursery)

    async def read(self, file: HdfsFile, piece: Piece, failures: dict[str, str],
                   into: tuple[bytearray, dtp.Placement] | None = None) -> bytes | bytearray:
        """One piece of a replicated block; `failures` collects each replica's reason.

        `into`: a DataNode's bytes land in the caller's buffer at the placement's places, and
        that buffer is returned; bytes from the block cache or a local replica come back in
        their own buffer (the caller copies them)."""
        if self.context.cached is not None and file.finalized(piece.block_start):
            return await self._read_cached(file, piece, failures)
        return await self._read_with_failover(file, piece, failures, into=into)

    async def _read_cached(self, file: HdfsFile, piece: Piece, failures: dict[str, str]) -> bytes | bytearray:
        """A finalized block's piece from the block cache, else from HDFS (and then cached).

        Only while the block's description is fresh (`hdfsfuse.local.blockcache.freshness`):
        otherwise the piece comes from the DataNodes, uncached."""
        cached = self.context.cached
        assert cached is not None
        if not await file.freshness.renewed(piece.block_start, lambda start: self.locator.locate(file, start, 1),
                                            self._nursery, max_age=self.options.cache_max_age,
                                            wait=self.options.cache_renewal_wait):
            return await self._read_with_failover(file, piece, failures)
        b = file.map.block_at(piece.block_start).b
        key = BlockKey.of(b)

        async def fetch(keep: list[dtp.ReadBlockParser]) -> bytes | bytearray:
            return await self._read_with_failover(file, piece, failures, keep)

        def still_current() -> bool:
            return BlockKey.of(file.map.block_at(piece.block_start).b) == key

        data = await cached.read(key, b.numBytes, piece.offset_in_block, piece.length, fetch, still_current)
        assert data is not None  # the fetch raises rather than return None
        return data

    async def _read_with_failover(
        self, file: HdfsFile, piece: Piece, failures: dict[str, str], keep: list[dtp.ReadBlockParser] | None = None,
        into: tuple[bytearray, dtp.Placement] | None = None,
    ) -> bytes | bytearray:
        token_refreshed = False
        refetched = False
        while True:
            block = file.map.block_at(piece.block_start)
            plan = file.block_plan(piece.block_start, self.context)
            outcome = await _Round(self, file, piece, plan, failures, keep, into).run()
            if outcome.data is not None:
                if outcome.corrupt:
                    self.reports.replicas(file, block, outcome.corrupt)
                return outcome.data
            if outcome.token_refused and not token_refreshed:
                token_refreshed = True
                self.context.stats.token_refreshes += 1
                log.info("%s: block token refused; fetching a fresh one", plan.what)
                await self.locator.locate(file, piece.block_start, 1)
                continue
            if refetched:
                break
            refetched = True
            log.info("%s: every replica failed; fetching its locations again", plan.what)
            file.dead.pop(piece.block_start, None)
            await self.locator.locate(file, piece.block_start, 1)
        detail = "; ".join(f"{a}: {why}" for a, why in failures.items()) or "the block has no replicas"
        message = f"{file.path}: could not read block {block.b.blockId} from any replica: {detail}"
        raise BlockUnavailable(message)  # logged once, where it is answered (the FUSE boundary)


class _Round:
    """One round over a block's replicas, best first; hedged onto the next one when slow.

    Each replica is read inline. If it has not answered within the hedging threshold, the
    hedge timer asks the next replica for the same bytes (`hdfsfuse.datanode.hedging`); the first
    answer wins and the other read is cancelled. A failure moves on to the next replica.
    """

    def __init__(self, reader: ReplicatedReader, file: HdfsFile, piece: Piece, plan: BlockPlan,
                 failures: dict[str, str], keep: list[dtp.ReadBlockParser] | None,
                 into: tuple[bytearray, dtp.Placement] | None = None) -> None:
        self.context = reader.context
        self.hedges = reader.hedges
        self.file, self.piece, self.plan, self.failures, self.keep = file, piece, plan, failures, keep
        self.into = into  # a hedge writes the same verified bytes to the same places
        self.outcome = _Outcome()
        self.dead = file.dead.setdefault(piece.block_start, set())
        self.pending = self.context.replicas.order(plan.replicas, self.dead, trio.current_time())
        self.request = ops.encode_read_block(plan.header_field, piece.offset_in_block, piece.length)
        self.local = reader.short_circuit if file.finalized(piece.block_start) else None

    async def run(self) -> _Outcome:
        while self.pending and self.outcome.data is None:
            address, (loc, description) = self.pending.pop(0)
            hedged = self.pending and not (self.local is not None and self.local.serves(loc))
            threshold = self.context.replicas.hedge_after(self.piece.length) if hedged else None
            if threshold is None:
                stop = self._settle(address, loc, await self._attempt(address, loc, description))
            else:
                stop = await self._raced(address, loc, description, threshold)
            if stop:
                break
        return self.outcome

    async def _attempt(self, address: str, loc: hdfs_pb2.DatanodeInfoProto, description: str) -> Result:
        """One replica's bytes, or why not."""
        piece, plan, context = self.piece, self.plan, self.context
        started = trio.current_time()
        try:
            if self.local is not None:
                data = await self.local.read(loc, plan.block, plan.token, piece.offset_in_block, piece.length,
                                             description)
                if data is not None:
                    return data  # no latency sample: a local read says nothing of the DataNode
            security = self.file.dn_security
            data = await read_replica(
                context.pool, address, self.request, piece.offset_in_block, piece.length,
                description, context.timeouts, context.stats,
                None if security is None else security.for_block(plan.token), self.keep, self.into,
            )
        except HdfsError as e:
            return e
        except BaseException:  # cancelled (a lost race, the read's bound), maybe inside a connect's
            now = trio.current_time()  # nursery: the replica took at least this long
            context.replicas.record(address, piece.length, now - started, now)
            raise
        now = trio.current_time()
        context.replicas.record(address, piece.length, now - started, now)
        return data

    async def _raced(self, address: str, loc: hdfs_pb2.DatanodeInfoProto, description: str,
                     threshold: float) -> bool:
        """Read one replica with a hedge armed; True when the round must stop."""
        race = Race(self._hedge)
        self.hedges.arm(trio.current_time() + threshold, race)
        try:
            with race.primary_scope:
                result = await self._attempt(address, loc, description)
            if race.primary_scope.cancelled_caught:  # the hedge answered first
                _, _, data = race.hedge_result  # type: ignore[misc]
                self.outcome.data = data
                self.context.stats.hedge_wins += 1
                return True
            race.finished = True  # no hedge starts from now on
            if self._settle(address, loc, result):
                return True
            if self.outcome.data is None and race.hedged:  # the primary failed: the hedge decides
                return await self._hedge_decides(race)
            return False
        finally:
            race.finish()

    async def _hedge(self, race: Race) -> None:
        """Started by the timer: ask the next replica for the same bytes."""
        if not self.pending:
            return
        address, (loc, description) = self.pending.pop(0)
        self.context.stats.hedged_reads += 1
        log.debug("%s: no answer within the hedging threshold; also asking %s", self.plan.what, address)
        with race.hedge_scope:
            result = await self._attempt(address, loc, description)
            if not isinstance(result, Exception):
                race.won((address, loc, result))
                return
            race.hedge_result = (address, loc, result)

    async def _hedge_decides(self, race: Race) -> bool:
        await race.hedge_done.wait()
        if race.hedge_result is None:
            return False
        address, loc, result = race.hedge_result  # type: ignore[misc]
        if not isinstance(result, Exception):
            self.context.stats.hedge_wins += 1
        return self._settle(address, loc, result)

    def _settle(self, address: str, loc: hdfs_pb2.DatanodeInfoProto, result: Result) -> bool:
        """Take one replica's answer; True when the round must stop (bytes, or a refused token)."""
        if not isinstance(result, Exception):
            self.outcome.data = result
            return True
        return self._failed(address, loc, result)

    def _failed(self, address: str, loc: hdfs_pb2.DatanodeInfoProto, e: HdfsError) -> bool:
        """Account one replica's failure; True when the round must stop (a refused token)."""
        self.failures[address] = str(e)
        if isinstance(e, InvalidBlockToken):
            self.outcome.token_refused = True
            return True
        self.dead.add(address)
        if isinstance(e, ChecksumMismatch):
            self.context.stats.checksum_failures += 1
            self.outcome.corrupt.append(loc)
            log.warning("%s; trying the next replica", e)
            return False
        if isinstance(e, ConnectFailed):
            self.context.replicas.refused(address, trio.current_time())
        self.context.stats.replica_failovers += 1
        log.warning("%s: %s; trying the next replica", address, e)
        return False
