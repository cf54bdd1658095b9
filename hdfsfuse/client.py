"""The hdfsfuse client library: open HDFS files and read exact byte ranges. Does I/O.

    HdfsClient.read_range(path_or_file, offset, length)
        -> planner.plan_pieces(): one piece per block the range touches
        -> _read_piece(): replica choice, failover, token refresh, bad-block reports
        -> datanode.read_replica(): one exact-length OP_READ_BLOCK on a pooled connection

Replica choice follows the NameNode's order, skipping DataNodes that failed recently (a memory
that expires). When every replica fails, the block's locations are fetched again once. A
corrupt replica is reported to the NameNode. Each block read is bounded by `Timeouts.total`.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from hdfsfuse import dtp, ipc
from hdfsfuse.config import NameNodeTarget, load_hadoop_conf, resolve_uri
from hdfsfuse.datanode import ConnectionPool, Timeouts, read_replica
from hdfsfuse.errors import (
    AuthenticationRequired,
    BlockUnavailable,
    ChecksumMismatch,
    FileNotFound,
    HdfsError,
    IsADirectory,
    NotSupported,
)
from hdfsfuse.namenode import FileStatus, LocatedBlock, NameNodeClient
from hdfsfuse.planner import Piece, clamp, plan_pieces
from hdfsfuse.proto import hdfs_pb2
from hdfsfuse.rpc import RpcConnection
from hdfsfuse.stats import Stats
from hdfsfuse.wire import ProtocolError

log = logging.getLogger(__name__)

WHOLE_FILE = 1 << 62
HAS_CRYPT = hdfs_pb2.HdfsFileStatusProto.HAS_CRYPT
HAS_EC = hdfs_pb2.HdfsFileStatusProto.HAS_EC


@dataclasses.dataclass(frozen=True)
class ClientOptions:
    user: str | None = None
    timeouts: Timeouts = dataclasses.field(default_factory=Timeouts)
    namenode_call_timeout: float = 20.0
    namenode_total_timeout: float = 60.0
    namenode_connect_timeout: float = 5.0
    dead_node_seconds: float = 30.0
    pool_idle_seconds: float = 3.0
    pool_capacity: int = 64


def _xfer_address(loc: hdfs_pb2.DatanodeInfoProto) -> str:
    return f"{loc.id.ipAddr}:{loc.id.xferPort}"


@dataclasses.dataclass(frozen=True, slots=True)
class BlockPlan:
    header_field: bytes  # OpReadBlockProto field 1, encoded
    replicas: list[tuple[str, hdfs_pb2.DatanodeInfoProto, str]]  # (address, DatanodeInfo, description)
    what: str


class HdfsFile:
    """An open HDFS file: its status, its located blocks and its readable length."""

    def __init__(self, path: str, status: FileStatus) -> None:
        self.path = path
        self.status = status
        self.file_id = status.fileId
        self.length = 0
        self.under_construction = False
        self.blocks: list[LocatedBlock] = []
        self.starts: list[int] = []
        self.lengths: list[int] = []
        self._plans: dict[int, BlockPlan] = {}

    def set_blocks(self, blocks: list[LocatedBlock], length: int, under_construction: bool) -> None:
        self.blocks = blocks
        self.starts = [b.offset for b in blocks]
        self.lengths = [b.b.numBytes for b in blocks]
        self.length = length
        self.under_construction = under_construction
        self._plans = {}

    def block_plan(self, index: int, client_name: str) -> BlockPlan:
        """What every read of block `index` reuses: the encoded op header and the replicas."""
        plan = self._plans.get(index)
        if plan is None:
            block = self.blocks[index]
            what = f"block {block.b.blockId} of {self.path}"
            replicas = []
            for loc in block.locs:
                address = _xfer_address(loc)
                replicas.append((address, loc, f"{what} on DataNode {address}"))
            header = dtp.header_field(dtp.encode_op_header(block.b, block.blockToken, client_name))
            plan = self._plans[index] = BlockPlan(header, replicas, what)
        return plan


class HdfsClient:
    def __init__(
        self, namenode: NameNodeClient, *, nursery: trio.Nursery, options: ClientOptions | None = None,
        stats: Stats | None = None,
    ) -> None:
        self.namenode = namenode
        self.options = options or ClientOptions()
        self.stats = stats or Stats()
        self.client_name = f"hdfsfuse-{uuid.uuid4()}"
        self.pool = ConnectionPool(idle_seconds=self.options.pool_idle_seconds, capacity=self.options.pool_capacity)
        self._nursery = nursery
        self._dead_until: dict[str, float] = {}

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, uri: str, *, conf_dir: str | None = None, options: ClientOptions | None = None,
        stats: Stats | None = None,
    ) -> AsyncIterator[HdfsClient]:
        """Resolve `uri` against the Hadoop configuration and open a client for it."""
        target = resolve_uri(uri, load_hadoop_conf(conf_dir))
        async with cls.open_target(target, options=options, stats=stats) as client:
            yield client

    @classmethod
    @asynccontextmanager
    async def open_target(
        cls, target: NameNodeTarget, *, options: ClientOptions | None = None, stats: Stats | None = None,
    ) -> AsyncIterator[HdfsClient]:
        opts = options or ClientOptions()
        async with NameNodeClient.open(
            target, user=opts.user, call_timeout=opts.namenode_call_timeout,
            total_timeout=opts.namenode_total_timeout, connect_timeout=opts.namenode_connect_timeout,
        ) as namenode:
            try:
                async with trio.open_nursery() as nursery:
                    client = cls(namenode, nursery=nursery, options=opts, stats=stats)
                    nursery.start_soon(client.pool.reap_forever)
                    try:
                        yield client
                    finally:
                        client.pool.close()
                        nursery.cancel_scope.cancel()
            except BaseExceptionGroup as group:
                if len(group.exceptions) == 1:
                    raise group.exceptions[0] from None
                raise

    # ----- opening files --------------------------------------------------------------------------

    async def open(self, path: str) -> HdfsFile:
        status = await self.namenode.get_file_info(path)
        if status is None:
            raise FileNotFound(f"{path}: no such file")
        if status.fileType == hdfs_pb2.HdfsFileStatusProto.IS_DIR:
            raise IsADirectory(f"{path}: is a directory")
        self.check_supported(path, status)
        defaults = await self.namenode.get_server_defaults()
        if defaults.encryptDataTransfer:
            raise NotSupported(
                "the cluster sets dfs.encrypt.data.transfer=true (encryptDataTransfer in the server "
                "defaults); hdfsfuse does not support encrypted data transfer"
            )
        file = HdfsFile(path, status)
        await self.refresh(file)
        return file

    @staticmethod
    def check_supported(path: str, status: FileStatus) -> None:
        if status.HasField("ecPolicy") or status.flags & HAS_EC:
            raise NotSupported(f"{path}: erasure-coded files are not supported")
        if status.HasField("fileEncryptionInfo") or status.flags & HAS_CRYPT:
            raise NotSupported(f"{path}: files in an encryption zone are not supported")

    async def refresh(self, file: HdfsFile) -> None:
        """Fetch the file's block locations (fresh tokens, current replicas and length)."""
        lbs = await self.namenode.get_block_locations(file.path, 0, WHOLE_FILE)
        if lbs.HasField("ecPolicy"):
            raise NotSupported(f"{file.path}: erasure-coded files are not supported")
        if lbs.HasField("fileEncryptionInfo"):
            raise NotSupported(f"{file.path}: files in an encryption zone are not supported")
        blocks = list(lbs.blocks)
        length = lbs.fileLength
        uc = lbs.underConstruction and not lbs.isLastBlockComplete and lbs.HasField("lastBlock")
        if uc:
            last = hdfs_pb2.LocatedBlockProto()
            last.CopyFrom(lbs.lastBlock)
            visible = await self._visible_length(file.path, last)
            last.b.numBytes = visible
            if blocks and blocks[-1].b.blockId == last.b.blockId:
                blocks[-1] = last
            elif visible:
                blocks.append(last)
            length = lbs.fileLength + visible
        file.set_blocks(blocks, length, bool(lbs.underConstruction))

    async def _visible_length(self, path: str, last: LocatedBlock) -> int:
        """The readable length of a block being written (what Java's DFSInputStream does)."""
        if not last.locs:
            return 0
        if last.blockToken.identifier:
            # The DataNode IPC needs SASL with the block token when tokens are on: use the NN's figure.
            return last.b.numBytes
        for loc in last.locs:
            conn = RpcConnection(
                loc.id.ipAddr, loc.id.ipcPort, user=self.namenode.user, nursery=self._nursery,
                protocol=ipc.DATANODE_PROTOCOL, connect_timeout=self.options.timeouts.connect,
            )
            try:
                body = await conn.call(
                    "getReplicaVisibleLength",
                    hdfs_pb2.GetReplicaVisibleLengthRequestProto(block=last.b).SerializeToString(),
                    timeout=self.options.timeouts.read,
                )
                return hdfs_pb2.GetReplicaVisibleLengthResponseProto.FromString(body).length
            except (HdfsError, ProtocolError) as e:
                log.warning("%s: getReplicaVisibleLength on %s:%d failed: %s", path, loc.id.ipAddr, loc.id.ipcPort, e)
            finally:
                await conn.aclose()
        return last.b.numBytes

    # ----- reading ------------------------------------------------------------------------------

    async def read_range(self, file: HdfsFile | str, offset: int, length: int) -> bytes | bytearray:
        """Read [offset, offset+length) of a file, clamped at EOF (library callers)."""
        data = await self.fetch_range(file, offset, length)
        self.stats.app_bytes += len(data)
        return data

    async def fetch_range(self, file: HdfsFile | str, offset: int, length: int) -> bytes | bytearray:
        """Read a range without counting it as application bytes (the mount counts its own)."""
        if isinstance(file, str):
            file = await self.open(file)
        n = clamp(offset, length, file.length)
        if n == 0:
            return b""
        pieces = plan_pieces(file.starts, file.lengths, offset, n)
        if len(pieces) == 1:
            return await self._read_piece(file, pieces[0])
        result = bytearray(n)

        async def fill(piece: Piece) -> None:
            result[piece.out_offset : piece.out_offset + piece.length] = await self._read_piece(file, piece)

        try:
            async with trio.open_nursery() as nursery:
                for piece in pieces:
                    nursery.start_soon(fill, piece)
        except BaseExceptionGroup as group:
            raise group.exceptions[0] from None
        return result

    def _replica_order(self, replicas: list[tuple[str, hdfs_pb2.DatanodeInfoProto, str]]
                       ) -> list[tuple[str, hdfs_pb2.DatanodeInfoProto, str]]:
        """The NameNode's order, with DataNodes that failed recently moved to the end."""
        if not self._dead_until:
            return replicas
        now = trio.current_time()
        self._dead_until = {a: t for a, t in self._dead_until.items() if t > now}
        return sorted(replicas, key=lambda r: r[0] in self._dead_until)

    async def _read_piece(self, file: HdfsFile, piece: Piece) -> bytearray:
        total = self.options.timeouts.total
        failures: dict[str, str] = {}
        with trio.move_on_after(total):
            return await self._read_piece_with_failover(file, piece, failures)
        detail = "; ".join(f"{a}: {why}" for a, why in failures.items()) or "no replica answered"
        block_id = file.blocks[piece.block_index].b.blockId
        message = (
            f"{file.path}: block {block_id} (file offset {file.starts[piece.block_index] + piece.offset_in_block}) "
            f"not read within {total:g}s; {detail}"
        )
        log.error("%s", message)
        raise BlockUnavailable(message)

    async def _read_piece_with_failover(self, file: HdfsFile, piece: Piece, failures: dict[str, str]) -> bytearray:
        token_refreshed = False
        refetched = False
        sasl_errors = 0
        while True:
            block = file.blocks[piece.block_index]
            plan = file.block_plan(piece.block_index, self.client_name)
            request = dtp.encode_read_block(plan.header_field, piece.offset_in_block, piece.length)
            what = plan.what
            corrupt: list[hdfs_pb2.DatanodeInfoProto] = []
            restart = False
            for address, loc, description in self._replica_order(plan.replicas):
                try:
                    data = await read_replica(
                        self.pool, address, request, piece.offset_in_block, piece.length,
                        description, self.options.timeouts, self.stats,
                    )
                except ChecksumMismatch as e:
                    self.stats.checksum_failures += 1
                    corrupt.append(loc)
                    failures[address] = str(e)
                    log.warning("%s; trying the next replica", e)
                except dtp.InvalidBlockToken as e:
                    failures[address] = str(e)
                    if not token_refreshed:
                        token_refreshed = True
                        log.info("%s; fetching a fresh token", e)
                        await self.refresh(file)
                        restart = True
                        break
                except AuthenticationRequired as e:
                    sasl_errors += 1
                    failures[address] = str(e)
                    log.warning("%s", e)
                except (HdfsError, ProtocolError) as e:
                    failures[address] = str(e)
                    self._dead_until[address] = trio.current_time() + self.options.dead_node_seconds
                    self.stats.replica_failovers += 1
                    log.warning("%s failed: %s; trying the next replica", what, e)
                else:
                    if corrupt:
                        self._report_bad_replicas(file.path, block, corrupt)
                    return data
            if restart:
                continue
            if sasl_errors and sasl_errors == len(block.locs):
                raise AuthenticationRequired(next(iter(failures.values())))
            if refetched:
                break
            refetched = True
            log.info("%s: every replica failed; fetching its locations again", what)
            await self.refresh(file)
            if piece.block_index >= len(file.blocks):
                raise BlockUnavailable(f"{file.path}: the file shrank while being read")
        detail = "; ".join(f"{a}: {why}" for a, why in failures.items()) or "the block has no replicas"
        message = f"{file.path}: could not read block {block.b.blockId} from any replica: {detail}"
        log.error("%s", message)
        raise BlockUnavailable(message)

    def _report_bad_replicas(self, path: str, block: LocatedBlock, bad: list[hdfs_pb2.DatanodeInfoProto]) -> None:
        """Tell the NameNode which replicas served corrupt data (in the background)."""
        report = hdfs_pb2.LocatedBlockProto(
            b=block.b, offset=block.offset, locs=bad, corrupt=False, blockToken=block.blockToken
        )

        async def send() -> None:
            try:
                await self.namenode.report_bad_blocks([report])
                self.stats.bad_block_reports += 1
                log.warning(
                    "%s: reported corrupt replica(s) of block %d on %s to the NameNode",
                    path, block.b.blockId, ", ".join(_xfer_address(b) for b in bad),
                )
            except (HdfsError, ProtocolError) as e:
                log.error("%s: reporting corrupt block %d failed: %s", path, block.b.blockId, e)

        self._nursery.start_soon(send)
