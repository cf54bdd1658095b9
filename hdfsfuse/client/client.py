"""The hdfsfuse client library: open HDFS files and read exact byte ranges. Does I/O.

    HdfsClient.read_range(path_or_file, offset, length)
        -> blockmap.BlockMap.pieces(): one piece per block the range touches (locations are
           fetched in windows, on demand, and pinned to the file's block ids)
        -> _read_piece(): failover, hedging, token refresh, bad-block reports
        -> datanode.read_replica(): one exact-length OP_READ_BLOCK on a pooled connection
        (an erasure-coded file's pieces go to striped_reader.StripedReader instead: one exact
        read per data unit, decoding around units that fail)

An open file is pinned to its fileId: locations are fetched through `/.reserved/.inodes/<id>`
(a rename keeps reading; a replaced file fails with FileChanged, never another file's bytes).
Replica order and hedging live in `replicas.ReplicaPolicy`; failures of one block are remembered
for that block only. When every replica fails, the block's locations are fetched again once. A
corrupt replica is reported to the NameNode. Each block read is bounded by `Timeouts.total`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from google.protobuf.message import DecodeError

from hdfsfuse.client import filechecksum
from hdfsfuse.client.blockmap import BlockMap
from hdfsfuse.conf.hadoop import ClusterSettings, NameNodeTarget, ViewTarget, load_hadoop_conf, resolve_source
from hdfsfuse.datanode import dtp
from hdfsfuse.datanode.connection import ConnectFailed, ConnectionPool, Timeouts, block_op, read_replica
from hdfsfuse.datanode.hedging import HedgeTimer, Race
from hdfsfuse.datanode.pieces import Piece, clamp
from hdfsfuse.datanode.replicas import ReplicaPolicy
from hdfsfuse.datanode.tasks import run_each
from hdfsfuse.erasure.arrival import Arrival
from hdfsfuse.erasure.codec import EcPolicy, resolve_policy
from hdfsfuse.erasure.reader import GroupPlan, StripedReader, group_plan
from hdfsfuse.errors import (
    BlockUnavailable,
    ChecksumMismatch,
    ConfigError,
    FileChanged,
    FileNotFound,
    HdfsError,
    InvalidBlockToken,
    IsADirectory,
    NotSupported,
)
from hdfsfuse.local.blockcache.freshness import CacheFreshness
from hdfsfuse.local.blockcache.reads import CachedReads
from hdfsfuse.local.blockcache.store import BlockCache, BlockKey
from hdfsfuse.local.io_threads import LocalIoThreads
from hdfsfuse.local.short_circuit import ShortCircuitReads
from hdfsfuse.namenode import ipc
from hdfsfuse.namenode.client import FileStatus, LocatedBlock, NameNodeClient, resolve_user
from hdfsfuse.namenode.rpc import RpcConnection
from hdfsfuse.namenode.viewfs import ViewNameNode
from hdfsfuse.proto import datatransfer_pb2, hdfs_pb2, rpc_pb2
from hdfsfuse.security.credentials import Credentials, RpcAuth, SecurityOptions, keep_login_fresh
from hdfsfuse.security.kerberos import KeytabLogin
from hdfsfuse.security.transfer import DataTransferSecurity
from hdfsfuse.stats import Stats

log = logging.getLogger(__name__)

WHOLE_FILE = 1 << 62
HAS_CRYPT = hdfs_pb2.HdfsFileStatusProto.HAS_CRYPT
HAS_EC = hdfs_pb2.HdfsFileStatusProto.HAS_EC


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
    short_circuit: bool = True  # read local replicas from their files when the configuration allows it


def xfer_address(loc: hdfs_pb2.DatanodeInfoProto, use_hostname: bool = False) -> str:
    """"host:port" of a DataNode's data port ("[v6addr]:port" for IPv6 literals)."""
    host = loc.id.hostName if use_hostname and loc.id.hostName else loc.id.ipAddr
    return f"[{host}]:{loc.id.xferPort}" if ":" in host else f"{host}:{loc.id.xferPort}"


def locate_path(path: str, file_id: int) -> str:
    """The path that always names this file: its inode, unless it lives in a snapshot.

    A rename keeps the inode path valid; a replaced file has another fileId. Snapshot copies share
    the live file's fileId, so they are located by their own (immutable) path.
    """
    if file_id and ".snapshot" not in path.split("/"):
        return f"/.reserved/.inodes/{file_id}"
    return path


@dataclasses.dataclass(frozen=True, slots=True)
class BlockPlan:
    block: hdfs_pb2.ExtendedBlockProto
    header_field: bytes  # OpReadBlockProto field 1, encoded
    replicas: list[tuple[str, tuple[hdfs_pb2.DatanodeInfoProto, str]]]  # (address, (DatanodeInfo, description))
    what: str
    token: rpc_pb2.TokenProto  # the block token: a SASL handshake's credentials


class HdfsFile:
    """An open HDFS file, pinned to its fileId and block ids: its located blocks and readable length."""

    def __init__(self, path: str, status: FileStatus, window: int, *, by_inode: bool = True) -> None:
        self.path = path
        self.status = status
        self.file_id = status.fileId
        # Behind a Router, by path: each later location fetch then checks the fileId again.
        self.by_inode = by_inode
        self.locate_path = locate_path(path, status.fileId) if by_inode else path
        self.window = window  # bytes of block locations per NameNode call
        self.map = BlockMap(path)
        self.freshness = CacheFreshness(path)  # whether the block cache may answer for its blocks
        self.length = 0
        self.under_construction = False
        self.length_checked = -math.inf  # trio time of the last length refresh
        self.length_unknown = ""  # why the readable length of a block being written is unknown
        self.opened = False
        self.dead: dict[int, set[str]] = {}  # block start -> DataNodes that failed reading it
        self.namenode: NameNodeClient | None = None  # the opener's identity (None: the client's own)
        self.dn_security: DataTransferSecurity | None = None  # its namespace's SASL on DataNode connections
        self.ec_policy: EcPolicy | None = None  # erasure-coded: its blocks are striped groups
        self._plans: dict[int, BlockPlan] = {}
        self._group_plans: dict[int, GroupPlan] = {}

    @property
    def blocks(self) -> list[LocatedBlock]:
        return self.map.blocks

    def forget_plans(self, starts: list[int] | None = None) -> None:
        """Drop cached op headers and replica lists (all, or those of blocks starting at `starts`)."""
        if starts is None:
            self._plans = {}
            self._group_plans = {}
        else:
            for start in starts:
                self._plans.pop(start, None)
                self._group_plans.pop(start, None)

    def block_plan(self, start: int, client_name: str, use_hostname: bool) -> BlockPlan:
        """What every read of the block at `start` reuses: the encoded op header and the replicas."""
        plan = self._plans.get(start)
        if plan is None:
            block = self.map.block_at(start)
            what = f"block {block.b.blockId} of {self.path}"
            replicas = []
            for loc in block.locs:
                address = xfer_address(loc, use_hostname)
                replicas.append((address, (loc, f"{what} on DataNode {address}")))
            header = dtp.header_field(dtp.encode_op_header(block.b, block.blockToken, client_name))
            plan = self._plans[start] = BlockPlan(block.b, header, replicas, what, block.blockToken)
        return plan

    def finalized(self, start: int) -> bool:
        """Whether the block at `start` can no longer change under its id and generation stamp:
        every block but the last one of a file being written."""
        return not (self.under_construction and start == self.map.starts[-1])

    def group_plan(self, start: int, policy: EcPolicy, client: HdfsClient) -> GroupPlan:
        """The internal blocks of the erasure-coded group at `start`, with their op headers."""
        plan = self._group_plans.get(start)
        if plan is None:
            use_hostname = client.settings.use_datanode_hostname
            plan = self._group_plans[start] = group_plan(
                self.map.block_at(start), policy, self.path, client.client_name,
                lambda loc: xfer_address(loc, use_hostname),
            )
        return plan


@dataclasses.dataclass(slots=True)
class _Outcome:
    """What one round over a block's replicas gave: data, or why not."""

    data: bytes | bytearray | None = None
    token_refused: bool = False
    corrupt: list[hdfs_pb2.DatanodeInfoProto] = dataclasses.field(default_factory=list)


def short_circuit_reads(settings: ClusterSettings, options: ClientOptions, client: HdfsClient,
                        nursery: trio.Nursery, local_io: LocalIoThreads) -> ShortCircuitReads | None:
    """Short-circuit local reads, when the configuration turns them on and the mount allows them."""
    if not (options.short_circuit and settings.short_circuit):
        return None
    if not settings.domain_socket_path:
        log.warning("dfs.client.read.shortcircuit is true but dfs.domain.socket.path is not set: "
                    "short-circuit local reads are off")
        return None
    log.info("short-circuit local reads: on for DataNodes on this host (dfs.domain.socket.path=%s)",
             settings.domain_socket_path)
    return ShortCircuitReads(settings.domain_socket_path, client.client_name, timeout=options.timeouts.read,
                             stats=client.stats, nursery=nursery, local_io=local_io)


def _login(target: NameNodeTarget | ViewTarget, options: ClientOptions) -> tuple[Credentials, dict[str, RpcAuth]]:
    """The mount's credentials and the recipe for each of its namespaces' NameNodes, by target
    URI ("" for a single namespace). Blocking: may talk to the KDC and DNS."""
    credentials = Credentials.choose(target.settings, options.security, resolve_user(options.user))
    if isinstance(target, ViewTarget):
        return credentials, {uri: credentials.namenode_auth(ns) for uri, ns in target.namespaces.items()}
    return credentials, {"": credentials.namenode_auth(target)}


@asynccontextmanager
async def _namenodes(target: NameNodeTarget | ViewTarget, auths: dict[str, RpcAuth],
                     options: ClientOptions) -> AsyncIterator[NameNodeClient | ViewNameNode]:
    timeouts = dict(call_timeout=options.namenode_call_timeout, total_timeout=options.namenode_total_timeout,
                    connect_timeout=options.namenode_connect_timeout)
    if isinstance(target, ViewTarget):
        async with ViewNameNode.open(target, auths, **timeouts) as view:
            yield view
    else:
        async with NameNodeClient.open(target, auth=auths[""], **timeouts) as namenode:  # type: ignore[arg-type]
            yield namenode


class HdfsClient:
    def __init__(
        self, namenode: NameNodeClient | ViewNameNode, *, nursery: trio.Nursery,
        options: ClientOptions | None = None,
        stats: Stats | None = None, settings: ClusterSettings | None = None,
    ) -> None:
        self.namenode = namenode
        self.credentials: Credentials | None = None
        # SASL on DataNode connections, decided per namespace (a data-encryption key belongs to
        # one block pool); None keeps the read path free of it.
        self._transfer: dict[NameNodeClient, DataTransferSecurity | None] = {}
        self.options = options or ClientOptions()
        self.stats = stats or Stats()
        self.settings = settings or ClusterSettings()
        self.client_name = f"hdfsfuse-{uuid.uuid4()}"
        self.pool = ConnectionPool(idle_seconds=self.options.pool_idle_seconds, capacity=self.options.pool_capacity)
        self.replicas = ReplicaPolicy(
            connect_penalty=self.options.connect_penalty_seconds, hedge_after=self.options.hedge_after,
        )
        self._nursery = nursery
        self.cached: CachedReads | None = None  # the persistent block cache, when cache_dir is set
        self.short_circuit: ShortCircuitReads | None = None  # local replicas read from their files
        self.striped = StripedReader(self)
        self.hedges = HedgeTimer()
        nursery.start_soon(self.hedges.run, nursery)

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, uri: str, *, conf_dir: str | None = None, options: ClientOptions | None = None,
        stats: Stats | None = None,
    ) -> AsyncIterator[HdfsClient]:
        """Resolve `uri` against the Hadoop configuration and open a client for it."""
        target = resolve_source(uri, load_hadoop_conf(conf_dir))
        async with cls.open_target(target, options=options, stats=stats) as client:
            yield client

    @classmethod
    @asynccontextmanager
    async def open_target(
        cls, target: NameNodeTarget | ViewTarget, *, options: ClientOptions | None = None,
        stats: Stats | None = None,
    ) -> AsyncIterator[HdfsClient]:
        opts = options or ClientOptions()
        credentials, auths = await trio.to_thread.run_sync(_login, target, opts, abandon_on_cancel=True)
        async with _namenodes(target, auths, opts) as namenode:
            try:
                async with trio.open_nursery() as nursery:
                    client = cls(namenode, nursery=nursery, options=opts, stats=stats, settings=target.settings)
                    client.credentials = credentials
                    nursery.start_soon(client.pool.reap_forever)
                    nursery.start_soon(client.pool.flush_forever)
                    local_io = LocalIoThreads()
                    if opts.cache_dir:
                        cache = BlockCache(opts.cache_dir, opts.cache_size)
                        try:
                            await trio.to_thread.run_sync(cache.open)
                        except OSError as e:
                            raise ConfigError(str(e.strerror or e)) from None
                        client.cached = CachedReads(cache, client.stats, nursery, local_io)
                        nursery.start_soon(client.cached.rescan_forever)
                    if isinstance(credentials.login, KeytabLogin):
                        nursery.start_soon(keep_login_fresh, credentials.login)
                    client.short_circuit = short_circuit_reads(target.settings, opts, client, nursery, local_io)
                    if client.cached is not None or client.short_circuit is not None:
                        nursery.start_soon(local_io.serve)
                    try:
                        yield client
                    finally:
                        client.pool.close()
                        if client.short_circuit is not None:
                            client.short_circuit.close()
                        nursery.cancel_scope.cancel()
            except BaseExceptionGroup as group:
                if len(group.exceptions) == 1:
                    raise group.exceptions[0] from None
                raise

    # ----- opening files --------------------------------------------------------------------------

    async def open(self, path: str, *, file_id: int = 0, namenode: NameNodeClient | ViewNameNode | None = None
                   ) -> HdfsFile:
        """Open a file by path, or (with `file_id`) exactly the file with that inode id.

        `namenode`: the connection of the identity opening it (per-caller identity); the file
        keeps using it, so its locations and block tokens are always fetched as the opener. A
        viewfs mount hands the file to the namespace that holds it.
        """
        nn, path = (namenode or self.namenode).route(path)
        await nn.sync_for_open()
        status = await nn.get_file_info(path if nn.router else locate_path(path, file_id))
        if status is None or (file_id and status.fileId != file_id):
            raise FileNotFound(f"{path}: no such file" if status is None else f"{path}: replaced by another file")
        if status.fileType == hdfs_pb2.HdfsFileStatusProto.IS_DIR:
            raise IsADirectory(f"{path}: is a directory")
        policy = self.check_supported(path, status)
        security = await self.check_data_transfer(nn)
        blocksize = status.blocksize or 128 * 1024 * 1024
        group_bytes = blocksize * (policy.data_units if policy is not None else 1)  # file bytes per block
        file = HdfsFile(path, status, window=self.options.location_window_blocks * group_bytes,
                        by_inode=not nn.router)  # (known by now: a Router says so in every answer)
        file.namenode = nn
        file.dn_security = security
        file.ec_policy = policy
        await self._locate(file, 0, file.window)
        file.opened = True
        return file

    @staticmethod
    def check_supported(path: str, status: FileStatus) -> EcPolicy | None:
        """Refuse what cannot be read; return the erasure-coding policy (an unknown codec fails here)."""
        if status.flags & HAS_EC and not status.HasField("ecPolicy"):
            raise NotSupported(f"{path}: erasure-coded, but the NameNode did not name the policy")
        if status.HasField("fileEncryptionInfo") or status.flags & HAS_CRYPT:
            raise NotSupported(f"{path}: files in an encryption zone are not supported")
        return resolve_policy(status.ecPolicy, path) if status.HasField("ecPolicy") else None

    async def check_data_transfer(self, namenode: NameNodeClient) -> DataTransferSecurity | None:
        """Decide, from the configuration and the namespace's server defaults, whether its
        DataNode connections may need SASL (None keeps the read path free of it)."""
        if namenode not in self._transfer:
            defaults = await namenode.get_server_defaults()
            kerberos = self.credentials is not None and self.credentials.kerberos
            needed = defaults.encryptDataTransfer or (kerberos and self.settings.data_transfer_protection)
            self._transfer[namenode] = (
                DataTransferSecurity(namenode, self.settings, self.stats, kerberos=kerberos) if needed else None
            )
        return self._transfer[namenode]

    async def refresh(self, file: HdfsFile) -> None:
        """Fetch fresh locations and tokens for the file's first window and its last block, and its length."""
        await self._locate(file, 0, file.window)

    async def grow(self, file: HdfsFile, *, strict: bool = True) -> None:
        """For a file being written: learn how far it can be read now (rate-limited).

        `strict` (a read at or past the known end): raise when the readable length cannot be
        known, rather than answer a silently short end of file.
        """
        if not file.under_construction:
            return
        if trio.current_time() - file.length_checked >= self.options.length_refresh_seconds:
            await self._locate(file, max(0, file.length - 1), 1)
        if strict and file.length_unknown:
            raise BlockUnavailable(file.length_unknown)

    async def _locate(self, file: HdfsFile, offset: int, length: int) -> None:
        """Fetch the window of locations at `offset` and merge it into the file's pinned block map."""
        namenode = file.namenode or self.namenode
        try:
            lbs = await namenode.get_block_locations(file.locate_path, offset, max(length, file.window))
            if file.opened and not file.by_inode:
                status = await namenode.get_file_info(file.path)
                if status is None or status.fileId != file.file_id:
                    raise FileNotFound(file.path)
        except FileNotFound:
            if not file.opened:
                raise
            self.stats.files_changed += 1
            raise FileChanged(f"{file.path} was deleted or replaced since it was opened") from None
        if lbs.HasField("ecPolicy") != (file.ec_policy is not None):
            self.stats.files_changed += 1
            raise FileChanged(f"{file.path} changed since it was opened: its blocks are "
                              f"{'now' if lbs.HasField('ecPolicy') else 'no longer'} erasure-coded")
        if file.ec_policy is not None and lbs.underConstruction:
            raise NotSupported(f"{file.path}: reading an erasure-coded file while it is being written is not "
                               "supported")
        if lbs.HasField("fileEncryptionInfo"):
            raise NotSupported(f"{file.path}: files in an encryption zone are not supported")
        blocks = list(lbs.blocks)
        length = lbs.fileLength
        unknown = ""
        if lbs.HasField("lastBlock"):
            last = hdfs_pb2.LocatedBlockProto()
            last.CopyFrom(lbs.lastBlock)
            if lbs.underConstruction and not lbs.isLastBlockComplete:
                visible, unknown = await self._visible_length(file.path, last)
                last.b.numBytes = visible
                length = lbs.fileLength + visible
            blocks = [b for b in blocks if b.b.blockId != last.b.blockId]
            if last.b.numBytes or last.locs:
                blocks.append(last)
        try:
            changed = file.map.merge(blocks)
        except FileChanged:
            self.stats.files_changed += 1
            raise
        file.forget_plans(changed)
        file.freshness.note(changed, trio.current_time())
        file.length = length
        file.under_construction = bool(lbs.underConstruction)
        file.length_unknown = unknown
        file.length_checked = trio.current_time()

    async def _visible_length(self, path: str, last: LocatedBlock) -> tuple[int, str]:
        """The readable length of a block being written, as Java's DFSInputStream learns it.

        Returns (length, "") or, when no DataNode can say, (the NameNode's figure, why not).
        """
        if not last.locs:
            if last.b.numBytes:
                return last.b.numBytes, f"{path}: the block being written has no locations yet"
            return 0, ""
        errors = []
        for loc in last.locs:
            # With block tokens on, ClientDatanodeProtocol authenticates with the block token (SASL).
            conn = RpcConnection(
                loc.id.ipAddr, loc.id.ipcPort, nursery=self._nursery,
                auth=RpcAuth(self.namenode.user, token=last.blockToken if last.blockToken.identifier else None),
                protocol=ipc.DATANODE_PROTOCOL, connect_timeout=self.options.timeouts.connect,
            )
            try:
                body = await conn.call(
                    "getReplicaVisibleLength",
                    hdfs_pb2.GetReplicaVisibleLengthRequestProto(block=last.b).SerializeToString(),
                    timeout=self.options.timeouts.read,
                )
                return hdfs_pb2.GetReplicaVisibleLengthResponseProto.FromString(body).length, ""
            except (HdfsError, DecodeError) as e:
                errors.append(f"{loc.id.ipAddr}:{loc.id.ipcPort}: {e}")
            finally:
                await conn.aclose()
        why = f"{path}: no DataNode gave the readable length of block {last.b.blockId}: {'; '.join(errors)}"
        log.warning("%s", why)
        return last.b.numBytes, why

    # ----- facts without reading data ----------------------------------------------------------

    async def file_checksum(self, file: HdfsFile) -> str:
        """The file's COMPOSITE_CRC checksum (`COMPOSITE-CRC32C 0a1b2c3d`), from each block's
        DataNode (OP_BLOCK_CHECKSUM, or OP_BLOCK_GROUP_CHECKSUM for an erasure-coded file's block
        groups): no data is read. See `hdfsfuse.client.filechecksum`."""
        if file.under_construction:
            raise NotSupported(f"{file.path}: the file is being written; its checksum is not final")
        if file.length == 0:
            return filechecksum.EMPTY_FILE
        if file.map.first_gap(0, file.length) is not None:
            await self._fill_gaps(file, 0, file.length)
        crcs: list[tuple[int, int]] = []
        kind = None
        for piece in file.map.pieces(0, file.length):
            block = file.map.block_at(piece.block_start)
            if file.ec_policy is not None:
                request = filechecksum.encode_group_request(block, file.status.ecPolicy, piece.length)
                addresses = [xfer_address(loc, self.settings.use_datanode_hostname) for loc in block.locs]
                what = f"block group {block.b.blockId} of {file.path}"
            else:
                request = filechecksum.encode_request(block.b, block.blockToken)
                plan = file.block_plan(piece.block_start, self.client_name, self.settings.use_datanode_hostname)
                addresses, what = [address for address, _ in plan.replicas], plan.what
            crc, block_kind = await self._block_crc(file, block, request, addresses, what)
            if kind is not None and block_kind != kind:
                raise NotSupported(f"{file.path}: its blocks use different checksum types; COMPOSITE_CRC "
                                   "needs one")
            kind = block_kind
            crcs.append((crc, piece.length))
        assert kind is not None
        return filechecksum.describe(filechecksum.file_crc(crcs, kind), kind)

    async def _block_crc(self, file: HdfsFile, block: LocatedBlock, request: bytes, addresses: list[str],
                         what: str) -> tuple[int, int]:
        """(CRC, checksum type) of one block or block group, from the first DataNode that answers."""
        security = None if file.dn_security is None else file.dn_security.for_block(block.blockToken)
        errors = []
        for address in dict.fromkeys(addresses):  # a group's DataNode may hold two of its blocks
            try:
                raw = await block_op(address, request, f"{what} on DataNode {address}", self.options.timeouts,
                                     self.stats, security)
                reply = datatransfer_pb2.BlockOpResponseProto.FromString(raw)
            except (HdfsError, DecodeError) as e:
                errors.append(f"{address}: {e}")
                continue
            answer = reply.checksumResponse
            if reply.status != datatransfer_pb2.SUCCESS or len(answer.blockChecksum) != 4:
                message = reply.message.strip().splitlines()[0] if reply.message.strip() else ""
                errors.append(f"{address}: {datatransfer_pb2.Status.Name(reply.status)} {message}".rstrip())
                continue
            if answer.crcType not in filechecksum.POLYNOMIALS:
                raise NotSupported(f"{what} has no CRC checksums (type {answer.crcType})")
            return int.from_bytes(answer.blockChecksum, "big"), answer.crcType
        raise BlockUnavailable(f"{what}: no DataNode gave its checksum: {'; '.join(errors) or 'no locations'}")

    # ----- reading ------------------------------------------------------------------------------

    async def read_range(self, file: HdfsFile | str, offset: int, length: int) -> bytes | bytearray:
        """Read [offset, offset+length) of a file, clamped at EOF (library callers)."""
        data = await self.fetch_range(file, offset, length)
        self.stats.app_bytes += len(data)
        return data

    async def fetch_range(self, file: HdfsFile | str, offset: int, length: int, *,
                          inline_tried: bool = False, arrival: Arrival | None = None) -> bytes | bytearray:
        """Read a range without counting it as application bytes (the mount counts its own).

        `inline_tried`: the caller already asked `read_now` for exactly this range. `arrival`:
        a range inside one erasure-coded block group tells it which bytes have landed, while
        it is read (any other range only returns them all at the end)."""
        if isinstance(file, str):
            file = await self.open(file)
        if file.under_construction and offset + length > file.length:
            await self.grow(file, strict=offset >= file.length)
        n = clamp(offset, length, file.length)
        if n == 0:
            return b""
        data = None if inline_tried else self.read_now(file, offset, n)
        if data is not None:
            return data
        if file.map.first_gap(offset, n) is not None:
            await self._fill_gaps(file, offset, n)
            n = min(n, clamp(offset, length, file.length))  # the file may have shrunk, never read past the fill
            if n == 0:
                return b""
        pieces = file.map.pieces(offset, n)
        if len(pieces) == 1:
            return await self._read_piece(file, pieces[0], arrival)
        result = bytearray(n)

        async def fill(piece: Piece) -> None:
            result[piece.out_offset : piece.out_offset + piece.length] = await self._read_piece(file, piece)

        await run_each(fill, pieces)
        return result

    def read_now(self, file: HdfsFile, offset: int, n: int, *, poll: bool = False) -> bytes | bytearray | None:
        """A small read of a finalized block done inline with no wait, from bytes already in
        memory: the block cache's files first (as `_read_piece` asks it first), then the files
        of a local replica that served this block before (short-circuit). None: read it the
        usual way. `poll`: the caller has nothing else to do, so the block cache may poll for
        bytes on its disk (`CachedReads.read_now`)."""
        if file.ec_policy is not None or (self.cached is None and self.short_circuit is None):
            return None
        block = file.map.holding(offset, n)
        if block is None or not file.finalized(block.offset):
            return None
        at = offset - block.offset
        data = None
        if self.cached is not None and file.freshness.current(block.offset, trio.current_time(),
                                                              self.options.cache_max_age):
            data = self.cached.read_now(block.b, at, n, poll=poll)
        if data is None and self.short_circuit is not None:
            data = self.short_circuit.read_now(block.b, at, n)
        return data

    async def _fill_gaps(self, file: HdfsFile, offset: int, n: int) -> None:
        """Fetch location windows until [offset, offset+n) is known (each window moves forward)."""
        gap = file.map.first_gap(offset, n)
        while gap is not None:
            await self._locate(file, gap, offset + n - gap)
            n = clamp(offset, n, file.length)
            after = file.map.first_gap(offset, n)
            if after is not None and after <= gap:
                self.stats.files_changed += 1
                raise FileChanged(f"{file.path} changed since it was opened: no block holds offset {after}")
            gap = after

    async def _read_piece(self, file: HdfsFile, piece: Piece, arrival: Arrival | None = None) -> bytes | bytearray:
        total = self.options.timeouts.total
        failures: dict[str, str] = {}
        with trio.move_on_after(total):
            if file.ec_policy is not None:
                return await self.striped.read(file, piece, file.ec_policy, arrival)
            if self.cached is not None and file.finalized(piece.block_start):
                return await self._read_piece_cached(file, piece, failures)
            return await self._read_piece_with_failover(file, piece, failures)
        detail = "; ".join(f"{a}: {why}" for a, why in failures.items()) or "no replica answered"
        message = (
            f"{file.path}: the block at file offset {piece.block_start} (reading offset "
            f"{piece.block_start + piece.offset_in_block}) was not read within {total:g}s; {detail}"
        )
        raise BlockUnavailable(message)  # logged once, where it is answered (the FUSE boundary)

    async def _read_piece_cached(self, file: HdfsFile, piece: Piece, failures: dict[str, str]) -> bytes | bytearray:
        """A finalized block's piece from the block cache, else from HDFS (and then cached).

        Only while the block's description is fresh (`hdfsfuse.local.blockcache.freshness`): otherwise the
        piece comes from the DataNodes, uncached."""
        assert self.cached is not None
        if not await file.freshness.renewed(piece.block_start, lambda start: self._locate(file, start, 1),
                                            self._nursery, max_age=self.options.cache_max_age,
                                            wait=self.options.cache_renewal_wait):
            return await self._read_piece_with_failover(file, piece, failures)
        b = file.map.block_at(piece.block_start).b
        key = BlockKey(b.poolId, b.blockId, b.generationStamp)

        async def fetch(keep: list[dtp.ReadBlockParser]) -> bytes | bytearray:
            return await self._read_piece_with_failover(file, piece, failures, keep)

        def still_current() -> bool:
            now = file.map.block_at(piece.block_start).b
            return (now.blockId, now.generationStamp) == (key.block_id, key.generation_stamp)

        data = await self.cached.read(key, b.numBytes, piece.offset_in_block, piece.length, fetch, still_current)
        assert data is not None  # the fetch raises rather than return None
        return data

    async def _read_piece_with_failover(
        self, file: HdfsFile, piece: Piece, failures: dict[str, str], keep: list[dtp.ReadBlockParser] | None = None,
    ) -> bytes | bytearray:
        token_refreshed = False
        refetched = False
        while True:
            block = file.map.block_at(piece.block_start)
            plan = file.block_plan(piece.block_start, self.client_name, self.settings.use_datanode_hostname)
            outcome = await self._read_replicas(file, piece, plan, failures, keep)
            if outcome.data is not None:
                if outcome.corrupt:
                    self._report_bad_replicas(file, block, outcome.corrupt)
                return outcome.data
            if outcome.token_refused and not token_refreshed:
                token_refreshed = True
                self.stats.token_refreshes += 1
                log.info("%s: block token refused; fetching a fresh one", plan.what)
                await self._locate(file, piece.block_start, 1)
                continue
            if refetched:
                break
            refetched = True
            log.info("%s: every replica failed; fetching its locations again", plan.what)
            file.dead.pop(piece.block_start, None)
            await self._locate(file, piece.block_start, 1)
        detail = "; ".join(f"{a}: {why}" for a, why in failures.items()) or "the block has no replicas"
        message = f"{file.path}: could not read block {block.b.blockId} from any replica: {detail}"
        raise BlockUnavailable(message)  # logged once, where it is answered (the FUSE boundary)

    async def _read_replicas(
        self, file: HdfsFile, piece: Piece, plan: BlockPlan, failures: dict[str, str],
        keep: list[dtp.ReadBlockParser] | None = None,
    ) -> _Outcome:
        """One round over the block's replicas, best first; hedged onto the next one when slow.

        Each replica is read inline. If it has not answered within the hedging threshold, the
        hedge timer asks the next replica for the same bytes (`hedging`); the first answer wins
        and the other read is cancelled. A failure moves on to the next replica.
        """
        outcome = _Outcome()
        dead = file.dead.setdefault(piece.block_start, set())
        pending = self.replicas.order(plan.replicas, dead, trio.current_time())
        request = dtp.encode_read_block(plan.header_field, piece.offset_in_block, piece.length)

        local = self.short_circuit if file.finalized(piece.block_start) else None

        async def attempt(address: str, loc: hdfs_pb2.DatanodeInfoProto,
                          description: str) -> bytes | bytearray | HdfsError:
            started = trio.current_time()
            try:
                if local is not None:
                    data = await local.read(loc, plan.block, plan.token, piece.offset_in_block, piece.length,
                                            description)
                    if data is not None:
                        return data  # no latency sample: a local read says nothing of the DataNode
                data = await read_replica(
                    self.pool, address, request, piece.offset_in_block, piece.length,
                    description, self.options.timeouts, self.stats,
                    None if file.dn_security is None else file.dn_security.for_block(plan.token), keep,
                )
            except HdfsError as e:
                return e
            except BaseException:  # cancelled (a lost race, the read's bound), maybe inside a connect's
                now = trio.current_time()  # nursery: the replica took at least this long
                self.replicas.record(address, piece.length, now - started, now)
                raise
            now = trio.current_time()
            self.replicas.record(address, piece.length, now - started, now)
            return data

        async def hedge(race: Race) -> None:
            if not pending:
                return
            address, (loc, description) = pending.pop(0)
            self.stats.hedged_reads += 1
            log.debug("%s: no answer within the hedging threshold; also asking %s", plan.what, address)
            with race.hedge_scope:
                result = await attempt(address, loc, description)
                if not isinstance(result, Exception):
                    race.won((address, loc, result))
                    return
                race.hedge_result = (address, loc, result)

        while pending and outcome.data is None:
            address, (loc, description) = pending.pop(0)
            hedged = pending and not (local is not None and local.serves(loc))
            threshold = self.replicas.hedge_after(piece.length) if hedged else None
            if threshold is None:
                result = await attempt(address, loc, description)
                if self._settle(address, loc, result, dead, failures, outcome):
                    break
                continue
            race = Race(hedge)
            self.hedges.arm(trio.current_time() + threshold, race)
            try:
                with race.primary_scope:
                    result = await attempt(address, loc, description)
                if race.primary_scope.cancelled_caught:  # the hedge answered first
                    _, _, data = race.hedge_result  # type: ignore[misc]
                    outcome.data = data
                    self.stats.hedge_wins += 1
                    break
                race.finished = True  # no hedge starts from now on
                if self._settle(address, loc, result, dead, failures, outcome):
                    break
                if outcome.data is None and race.hedged:  # the primary failed: the hedge decides
                    await race.hedge_done.wait()
                    if race.hedge_result is not None:
                        h_address, h_loc, h_result = race.hedge_result  # type: ignore[misc]
                        if not isinstance(h_result, Exception):
                            self.stats.hedge_wins += 1
                        if self._settle(h_address, h_loc, h_result, dead, failures, outcome):
                            break
            finally:
                race.finish()
        return outcome

    def _settle(
        self, address: str, loc: hdfs_pb2.DatanodeInfoProto, result: bytes | bytearray | Exception, dead: set[str],
        failures: dict[str, str], outcome: _Outcome,
    ) -> bool:
        """Take one replica's answer; True when the round must stop (bytes, or a refused token)."""
        if not isinstance(result, Exception):
            outcome.data = result
            return True
        return self._failed(address, loc, result, dead, failures, outcome)

    def _failed(
        self, address: str, loc: hdfs_pb2.DatanodeInfoProto, e: Exception, dead: set[str],
        failures: dict[str, str], outcome: _Outcome,
    ) -> bool:
        """Account one replica's failure; True when the round must stop (a refused token)."""
        failures[address] = str(e)
        if isinstance(e, InvalidBlockToken):
            outcome.token_refused = True
            return True
        dead.add(address)
        if isinstance(e, ChecksumMismatch):
            self.stats.checksum_failures += 1
            outcome.corrupt.append(loc)
            log.warning("%s; trying the next replica", e)
            return False
        if isinstance(e, ConnectFailed):
            self.replicas.refused(address, trio.current_time())
        self.stats.replica_failovers += 1
        log.warning("%s: %s; trying the next replica", address, e)
        return False

    def report_bad_internal_block(
        self, file: HdfsFile, block: hdfs_pb2.ExtendedBlockProto, loc: hdfs_pb2.DatanodeInfoProto,
        token: rpc_pb2.TokenProto,
    ) -> None:
        """Tell the NameNode an erasure-coded group's internal block is corrupt on `loc`."""
        self._report(file, hdfs_pb2.LocatedBlockProto(b=block, offset=0, locs=[loc], corrupt=False, blockToken=token))

    def _report_bad_replicas(self, file: HdfsFile, block: LocatedBlock, bad: list[hdfs_pb2.DatanodeInfoProto]) -> None:
        """Tell the NameNode which replicas served corrupt data (in the background)."""
        self._report(file, hdfs_pb2.LocatedBlockProto(
            b=block.b, offset=block.offset, locs=bad, corrupt=False, blockToken=block.blockToken
        ))

    def _report(self, file: HdfsFile, report: LocatedBlock) -> None:
        """Send one bad-block report in the background, to the namespace that holds the file."""
        path = file.path
        namenode = file.namenode or self.namenode

        async def send() -> None:
            try:
                await namenode.report_bad_blocks([report])
                self.stats.bad_block_reports += 1
                log.warning(
                    "%s: reported corrupt replica(s) of block %d on %s to the NameNode",
                    path, report.b.blockId, ", ".join(xfer_address(b) for b in report.locs),
                )
            except Exception as e:  # a background task: log, never escape
                log.error("%s: reporting corrupt block %d failed: %s", path, report.b.blockId, e)

        self._nursery.start_soon(send)
