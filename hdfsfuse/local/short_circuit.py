"""Short-circuit local reads: a replica on this host's DataNode is read from its files with pread.

Does I/O: UNIX domain sockets to local DataNodes, their shared-memory segments, and preads of
the block and meta files they pass. The bytes of the ops live in `short_circuit_protocol`.

    read(loc, block, token, offset, length)
      -> is the DataNode local? its IP is this host's, and dfs.domain.socket.path (with _PORT =
         its xfer port) is a socket whose directories only root or we can write
      -> cached fds for (DataNode, pool, block id, generation stamp) whose slot is still VALID?
         no: claim a slot in the DataNode's segment (op 89 once per 128 slots; that connection
             stays open, and the DataNode frees the segment when it closes), mark it VALID,
             op 87 on a fresh connection: the block file and meta file fds by SCM_RIGHTS
      -> localio.read_verified(): pread the chunks and their CRCs, verify every chunk
    None means "read it over TCP": not local, refused, or the replica changed under its fds.

Never stale: the DataNode clears a slot's VALID bit when it deletes, moves or uncaches the
replica, and every read checks the bit first; a segment whose socket the DataNode closed
(a restart) counts as all invalid. An append or truncate under cached fds (which keep the
inode) shows as a file whose size is no longer the block's: those fds are dropped. Fds are
cached for at most `capacity` blocks, least recently used first out; a dropped replica's slot
goes back to the DataNode (op 88) before it is used again.

Refusals are remembered: a DataNode that does not pass fds (short-circuit off there, no
shared memory, a bad socket) is read over TCP for DISABLE_SECONDS, a block it would not pass
for BLOCK_REFUSED_SECONDS. A refused block token is the caller's to refresh, as over TCP.
"""

from __future__ import annotations

import array
import collections
import dataclasses
import errno
import logging
import math
import mmap
import os
import socket
from collections.abc import Callable

import trio
from google.protobuf.message import Message

from hdfsfuse.datanode.checksum import Checksum
from hdfsfuse.errors import ChecksumMismatch, ConnectionLost, InvalidBlockToken, ProtocolError
from hdfsfuse.local import short_circuit_protocol as scp
from hdfsfuse.local.io_threads import LocalIoThreads
from hdfsfuse.local.uring import RingClosed, UringReads
from hdfsfuse.local.verified_io import (
    DIRECT_MIN,
    ShortRead,
    WouldBlock,
    chunk_preads,
    chunk_span,
    direct_buffer,
    open_direct,
    read_in,
    read_verified,
    read_verified_direct,
    verified,
)
from hdfsfuse.proto import datatransfer_pb2, hdfs_pb2, rpc_pb2
from hdfsfuse.stats import Stats
from hdfsfuse.wire import NeedData

log = logging.getLogger(__name__)

DISABLE_SECONDS = 600.0  # as the Java client's dfs.client.domain.socket.disable.interval.seconds
BLOCK_REFUSED_SECONDS = 60.0
RECHECK_SECONDS = 60.0  # a local DataNode with no (trusted) socket yet is looked at again after this
REFUSED_MEMORY = 1024  # refused blocks remembered per DataNode before expired ones are forgotten
INLINE_MAX = 128 * 1024  # larger reads pread and verify in a worker thread
CAPACITY = 256  # blocks whose fds stay open (the Java client's streams cache size)
_FDS_SPACE = socket.CMSG_SPACE(4 * array.array("i").itemsize)

ReplicaKey = tuple[str, str, int, int]  # (DataNode socket, pool, block id, generation stamp)


class _Segment:
    """One shared-memory segment of a DataNode: its slots, and the connection that keeps it."""

    def __init__(self, sock: trio.socket.SocketType, shm_id: scp.ShmId, memory: mmap.mmap) -> None:
        self.sock = sock
        self.shm_id = shm_id
        self.memory = memory
        self.free = list(range(len(memory) // scp.SLOT_SIZE - 1, -1, -1))
        self.disconnected = False  # the DataNode closed the segment: every slot is invalid

    def claim(self) -> int | None:
        if self.disconnected or not self.free:
            return None
        index = self.free.pop()
        scp.SLOT_WORD.pack_into(self.memory, index * scp.SLOT_SIZE, scp.VALID)
        return index

    def valid(self, index: int) -> bool:
        return not self.disconnected and scp.slot_is_valid(self.memory, index)

    def give_back(self, index: int) -> None:
        """The DataNode does not hold this slot (any more): it may be claimed again."""
        scp.SLOT_WORD.pack_into(self.memory, index * scp.SLOT_SIZE, 0)
        self.free.append(index)

    async def watch(self) -> None:
        """Mark the segment disconnected when the DataNode closes its connection."""
        try:
            await trio.lowlevel.wait_readable(self.sock)
        except (trio.ClosedResourceError, OSError, ValueError):  # we closed it first: nothing to watch
            return
        self.disconnected = True

    def close(self) -> None:
        self.disconnected = True
        self.sock.close()
        self.memory.close()


@dataclasses.dataclass(eq=False, slots=True)
class _LocalDataNode:
    path: str  # its domain socket
    address: str  # its xfer address, for messages
    off_until: float = 0.0  # trio time: read over TCP until then
    segments: list[_Segment] = dataclasses.field(default_factory=list)
    segment_lock: trio.Lock = dataclasses.field(default_factory=trio.Lock)  # one new segment at a time
    refused: dict[ReplicaKey, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(eq=False, slots=True)
class _Replica:
    """A block's open files, as a local DataNode passed them, and the slot that guards them."""

    key: ReplicaKey
    data_fd: int
    meta_fd: int
    checksum: Checksum
    length: int  # the finalized block's length: its file's size while unchanged
    datanode: _LocalDataNode
    segment: _Segment
    slot: int
    users: int = 0
    dropped: bool = False
    direct_fd: int = -2  # the data file opened again with O_DIRECT, for large reads; -1: refused; -2: not yet

    @property
    def block(self) -> tuple[str, int, int]:
        """(pool, block id, generation stamp): the same bytes on every replica."""
        return self.key[1:]

    def usable(self) -> bool:
        return self.segment.valid(self.slot)

    def read(self, offset: int, length: int, what: str, *, nowait: bool = False) -> bytes | bytearray:
        """[offset, offset+length) of the block, every chunk verified (localio.read_verified);
        a large read through the O_DIRECT open, once `open_direct` made one."""
        if length > DIRECT_MIN and self.direct_fd >= 0 and not nowait:
            return read_verified_direct(self.direct_fd, self.data_fd, 0, self.meta_fd, scp.META_HEADER.size,
                                        self.checksum, self.length, offset, length, what)
        return read_verified(self.data_fd, 0, self.meta_fd, scp.META_HEADER.size, self.checksum, self.length,
                             offset, length, what, nowait=nowait)

    async def read_through(self, ring: UringReads, offset: int, length: int, what: str) -> bytes | bytearray:
        """`read`, its chunks and checksums read concurrently through io_uring (a small read
        that must wait for the disk: no worker thread)."""
        reads = chunk_preads(self.data_fd, 0, self.meta_fd, scp.META_HEADER.size, self.checksum, self.length,
                             offset, length)
        got = await ring.pread_many(reads)
        return verified(got[0], got[1] if len(got) > 1 else b"", self.checksum, self.length, offset, length, what)

    async def read_direct_through(self, ring: UringReads, offset: int, length: int,
                                  what: str) -> bytes | bytearray | None:
        """`read` of a large range through the O_DIRECT open, its data and checksums read
        concurrently through io_uring and verified here, with no worker thread; None where
        `read_verified_direct` would fall back to the page cache (an unaligned start, a
        refused read): then `read` in a thread."""
        first, count, start, end = chunk_span(offset, length, self.checksum.bytes_per_checksum, self.length)
        n = end - start
        data = direct_buffer(start, n) if self.direct_fd >= 0 else None
        if data is None:
            return None
        sums = bytearray(self.checksum.size * count)
        reads = [(self.direct_fd, data, start)]
        if sums:
            reads.append((self.meta_fd, sums, scp.META_HEADER.size + 4 * first))
        try:
            got = await ring.pread_into(reads)
        except OSError as e:
            if e.errno == errno.EINVAL and not isinstance(e, RingClosed):
                return None  # the filesystem refuses this O_DIRECT read
            raise
        if got[0] < n:  # the file ends early, or a read cut short: the rest through the page cache
            rest = (await ring.pread_many([(self.data_fd, n - got[0], start + got[0])]))[0]
            data[got[0] : got[0] + len(rest)] = rest
            got[0] += len(rest)
        del data[min(n, got[0]) :]
        if sums:
            del sums[got[1] :]
        return verified(data, sums, self.checksum, self.length, offset, length, what)

    def open_direct(self) -> None:
        """Open the data file again with O_DIRECT, once (in the trio thread, before a large read
        is handed to a worker). A large read is a sequential reader's: it then costs no copy out
        of the page cache, and leaves no second copy of the block in memory beside the mount's
        own pages."""
        if self.direct_fd == -2:
            self.direct_fd = open_direct(self.data_fd)

    def read_in(self, offset: int, length: int) -> None:
        """Start the disk reads of `read` without waiting (see localio.read_in)."""
        read_in(self.data_fd, 0, self.meta_fd, scp.META_HEADER.size, self.checksum, self.length, offset, length)

    def close_files(self) -> None:
        os.close(self.data_fd)
        os.close(self.meta_fd)
        if self.direct_fd >= 0:
            os.close(self.direct_fd)


class ShortCircuitReads:
    """Short-circuit reads of one client: local DataNodes, their segments, and cached fds."""

    def __init__(self, socket_pattern: str, client_name: str, *, timeout: float, stats: Stats,
                 nursery: trio.Nursery, capacity: int = CAPACITY,
                 is_local_ip: Callable[[str], bool] | None = None, local_io: LocalIoThreads | None = None) -> None:
        self.socket_pattern = socket_pattern
        self.client_name = client_name
        self.timeout = timeout
        self.stats = stats
        self.capacity = capacity
        self._nursery = nursery
        self._is_local_ip = is_local_ip or _is_local_ip
        # (IP, xfer port) -> its local DataNode, or when to look for its socket again
        self._datanodes: dict[tuple[str, int], _LocalDataNode | float] = {}
        self._warned: set[str] = set()  # socket paths refused as untrusted (logged once each)
        self._replicas: collections.OrderedDict[ReplicaKey, _Replica] = collections.OrderedDict()
        self._opening: dict[ReplicaKey, trio.Event] = {}
        self._last_used: dict[tuple[str, int, int], _Replica] = {}  # (pool, block id, GS) -> what served it last
        self._local_io = local_io or LocalIoThreads()  # (one not served runs jobs in trio's threads)
        self._closed = False

    # ----- reads ----------------------------------------------------------------------------------

    async def read(self, loc: hdfs_pb2.DatanodeInfoProto, block: hdfs_pb2.ExtendedBlockProto,
                   token: rpc_pb2.TokenProto, offset: int, length: int, what: str) -> bytes | bytearray | None:
        """[offset, offset+length) of a finalized block from the local replica on `loc`, verified.

        None: read it over TCP instead. Raises ChecksumMismatch (a corrupt local replica) and
        InvalidBlockToken (refresh the token) as a TCP read would.
        """
        datanode = self._datanode(loc)
        if datanode is None:
            return None
        if datanode.off_until > trio.current_time():
            self.stats.short_circuit_fallbacks += 1
            return None
        key = (datanode.path, block.poolId, block.blockId, block.generationStamp)
        replica = self._replicas.get(key)
        if replica is not None and not replica.usable():
            self.stats.short_circuit_invalidated += 1
            log.debug("%s: the DataNode invalidated its short-circuit slot; asking for its files again", what)
            self._drop(replica)
            replica = None
        if replica is None:
            replica = await self._open(datanode, key, block, token, what)
            if replica is None:
                self.stats.short_circuit_fallbacks += 1
                return None
        else:
            self._replicas.move_to_end(key)
        what = f"{what} (local replica)"
        replica.users += 1
        try:
            try:
                if length > INLINE_MAX:
                    raise WouldBlock
                data = replica.read(offset, length, what, nowait=True)
            except WouldBlock:
                # A small read waits for its chunks and checksums through io_uring. A large one
                # is a sequential reader's (the mount's readahead pieces): it reads through an
                # O_DIRECT open of the block file straight into its own buffer (no copy out of the
                # page cache, whose cost swung with the machine's memory: 640 MB/s buffered against
                # 949 direct, 1 GiB cold, five rounds), through io_uring too (798 -> 907 MB/s
                # against a worker thread, four rounds). Without io_uring, both go to the threads.
                if length > DIRECT_MIN:
                    replica.open_direct()
                data = None
                ring = self._local_io.ring
                if ring.available:
                    try:
                        if length <= INLINE_MAX:
                            data = await replica.read_through(ring, offset, length, what)
                        elif length > DIRECT_MIN:
                            data = await replica.read_direct_through(ring, offset, length, what)
                        if data is not None:
                            self.stats.local_disk_reads["io_uring"] += 1
                    except RingClosed:
                        data = None
                if data is None:
                    self.stats.local_disk_reads["thread"] += 1
                    if length <= INLINE_MAX:
                        replica.read_in(offset, length)
                    data = await self._local_io.run(replica.read, offset, length, what)
        except (ShortRead, ChecksumMismatch) as e:
            if self._changed(replica):  # an append rewrote the last chunk's CRC, or a truncate
                self.stats.short_circuit_invalidated += 1
                log.info("%s changed under its short-circuit files; reading it over TCP", what)
                self._drop(replica)
                self.stats.short_circuit_fallbacks += 1
                return None
            self._drop(replica)  # a corrupt replica: the caller reports it and reads another
            if isinstance(e, ShortRead):
                raise ChecksumMismatch(str(e)) from None
            raise
        except OSError as e:
            log.warning("%s: %s; reading it over TCP", what, e)
            self._drop(replica)
            self.stats.short_circuit_fallbacks += 1
            return None
        finally:
            replica.users -= 1
            if replica.dropped and replica.users == 0:
                replica.close_files()
        if not replica.dropped:
            self._last_used[replica.block] = replica
        self._served(replica, len(data))
        return data

    def read_now(self, block: hdfs_pb2.ExtendedBlockProto, offset: int, length: int) -> bytes | bytearray | None:
        """The hot path of a small read: from the local files that last served this block, if
        their slot is still valid and the bytes are already in memory. No await, no replica
        choice; None (anything unusual, a corrupt chunk included) sends the caller to `read`,
        which handles it."""
        replica = self._last_used.get((block.poolId, block.blockId, block.generationStamp))
        if replica is None or length > INLINE_MAX or replica.dropped or not replica.usable():
            return None
        try:
            data = replica.read(offset, length, "", nowait=True)
        except (WouldBlock, ShortRead, ChecksumMismatch, OSError):
            return None
        self._served(replica, len(data))
        return data

    def _served(self, replica: _Replica, n: int) -> None:
        self.stats.short_circuit_reads += 1
        self.stats.short_circuit_bytes += n
        self.stats.short_circuit_by_datanode[replica.datanode.address] += 1

    def serves(self, loc: hdfs_pb2.DatanodeInfoProto) -> bool:
        """Whether a read of `loc` would try its local files first (then no hedging: a local
        read either answers at once or waits for a disk that a second replica would share)."""
        datanode = self._datanode(loc)
        return datanode is not None and datanode.off_until <= trio.current_time()

    @staticmethod
    def _changed(replica: _Replica) -> bool:
        try:
            return os.fstat(replica.data_fd).st_size != replica.length
        except OSError:
            return True

    # ----- which DataNodes are local ----------------------------------------------------------------

    def _datanode(self, loc: hdfs_pb2.DatanodeInfoProto) -> _LocalDataNode | None:
        ident = (loc.id.ipAddr, loc.id.xferPort)
        known = self._datanodes.get(ident)
        if known is not None and (isinstance(known, _LocalDataNode) or known > trio.current_time()):
            return known if isinstance(known, _LocalDataNode) else None
        address = f"{loc.id.ipAddr}:{loc.id.xferPort}"
        if not self._is_local_ip(loc.id.ipAddr):
            self._datanodes[ident] = math.inf  # another host's DataNode: never local
            return None
        path = scp.socket_path(self.socket_pattern, loc.id.xferPort)
        try:
            unsafe = scp.unsafe_socket_path(path, os.stat, os.geteuid())
        except OSError as e:
            unsafe = f"{e.filename}: {e.strerror}"
        if unsafe is None and os.path.exists(path):
            datanode = self._datanodes[ident] = _LocalDataNode(path, address)
            log.info("DataNode %s is local: short-circuit reads over %s", address, path)
            return datanode
        if unsafe is not None and os.path.exists(path) and path not in self._warned:
            self._warned.add(path)
            log.warning("DataNode %s: not using its socket for short-circuit reads: %s (dfs.domain.socket.path)",
                        address, unsafe)
        self._datanodes[ident] = trio.current_time() + RECHECK_SECONDS  # no socket (yet): look again later
        return None

    # ----- opening a replica's files ----------------------------------------------------------------

    async def _open(self, datanode: _LocalDataNode, key: ReplicaKey, block: hdfs_pb2.ExtendedBlockProto,
                    token: rpc_pb2.TokenProto, what: str) -> _Replica | None:
        refused_until = datanode.refused.get(key)
        if refused_until is not None:
            if refused_until > trio.current_time():
                return None
            del datanode.refused[key]
        opening = self._opening.get(key)
        if opening is not None:  # another reader is asking for these files: share its answer
            await opening.wait()
            return self._replicas.get(key)
        opening = self._opening[key] = trio.Event()
        try:
            return await self._request(datanode, key, block, token, what)
        finally:
            del self._opening[key]
            opening.set()

    async def _request(self, datanode: _LocalDataNode, key: ReplicaKey, block: hdfs_pb2.ExtendedBlockProto,
                       token: rpc_pb2.TokenProto, what: str) -> _Replica | None:
        segment: _Segment | None = None
        slot: int | None = None
        try:
            segment, slot = await self._claim_slot(datanode)
            self.stats.short_circuit_fd_requests += 1
            request = scp.encode_fds_request(block, token, scp.SlotId(segment.shm_id, slot))
            data_fd, meta_fd = await self._ask_for_fds(datanode, request, what)
        except scp.ShortCircuitRefused as e:
            if segment is not None and slot is not None:
                segment.give_back(slot)  # a clean refusal: the DataNode unregistered the slot
            self._refuse(datanode, key, str(e))
            return None
        except InvalidBlockToken:
            if segment is not None and slot is not None:
                segment.give_back(slot)
            raise
        except (scp.ShortCircuitUnsupported, ProtocolError, ConnectionLost, OSError, trio.TooSlowError) as e:
            # After a broken exchange the slot's state on the DataNode is unknown: never reuse it.
            if isinstance(e, scp.ShortCircuitUnsupported) and segment is not None and slot is not None:
                segment.give_back(slot)
            datanode.off_until = trio.current_time() + DISABLE_SECONDS
            reason = "no answer within the timeout" if isinstance(e, trio.TooSlowError) else str(e)
            log.warning("DataNode %s: short-circuit reads failed (%s); reading from it over TCP for %gs",
                        datanode.address, reason, DISABLE_SECONDS)
            return None
        # The DataNode holds the slot now: files we cannot use hand it back with op 88.
        try:
            checksum = scp.checksum_of_meta(os.pread(meta_fd, scp.META_HEADER.size, 0), what)
            size = os.fstat(data_fd).st_size
            if size != block.numBytes:
                raise ProtocolError(f"{what}: its local file holds {size} bytes, the block {block.numBytes}")
        except (ProtocolError, OSError) as e:
            _close_all([data_fd, meta_fd])
            self._nursery.start_soon(self._release, datanode, segment, slot)
            self._refuse(datanode, key, str(e))
            return None
        replica = _Replica(key, data_fd, meta_fd, checksum, block.numBytes, datanode, segment, slot)
        self._replicas[key] = replica
        while len(self._replicas) > self.capacity:
            self._drop(next(iter(self._replicas.values())))
        self.stats.short_circuit_open_blocks = len(self._replicas)
        return replica

    @staticmethod
    def _refuse(datanode: _LocalDataNode, key: ReplicaKey, why: str) -> None:
        now = trio.current_time()
        if len(datanode.refused) >= REFUSED_MEMORY:
            datanode.refused = {k: t for k, t in datanode.refused.items() if t > now}
        datanode.refused[key] = now + BLOCK_REFUSED_SECONDS
        log.info("%s; reading it over TCP for %gs", why, BLOCK_REFUSED_SECONDS)

    async def _claim_slot(self, datanode: _LocalDataNode) -> tuple[_Segment, int]:
        async with datanode.segment_lock:  # readers arriving together share one new segment
            for segment in datanode.segments:
                slot = segment.claim()
                if slot is not None:
                    return segment, slot
            datanode.segments = [s for s in datanode.segments if not s.disconnected]
            segment = await self._new_segment(datanode)
            datanode.segments.append(segment)
            slot = segment.claim()
            if slot is None:
                raise scp.ShortCircuitUnsupported(f"DataNode {datanode.address} gave a segment with no slots")
            return segment, slot

    async def _new_segment(self, datanode: _LocalDataNode) -> _Segment:
        """Op 89: a shared-memory segment; its connection stays open for the segment's life."""
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        fds: list[int] = []
        try:
            with trio.fail_after(self.timeout):
                await sock.connect(datanode.path)
                await _send_all(sock, scp.encode_shm_request(self.client_name))
                reply = datatransfer_pb2.ShortCircuitShmResponseProto()
                rest = await _receive_reply(sock, reply, fds, datanode.address)
                shm_id = scp.check_shm_reply(reply, f"DataNode {datanode.address}")
                await _receive_fds(sock, rest, fds, 1, datanode.address)
            size = os.fstat(fds[0]).st_size // scp.SLOT_SIZE * scp.SLOT_SIZE
            if size == 0:
                raise ProtocolError(f"DataNode {datanode.address} passed an empty shared-memory segment")
            memory = mmap.mmap(fds[0], size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            sock.close()
            raise
        finally:
            _close_all(fds)  # the mapping stays; the fd is not needed
        segment = _Segment(sock, shm_id, memory)
        self._nursery.start_soon(segment.watch)
        self.stats.short_circuit_segments += 1
        return segment

    async def _ask_for_fds(self, datanode: _LocalDataNode, request: bytes, what: str) -> tuple[int, int]:
        """Op 87 on a fresh connection: [block file fd, meta file fd], or the refusal raised."""
        fds: list[int] = []
        with trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                with trio.fail_after(self.timeout):
                    await sock.connect(datanode.path)
                    await _send_all(sock, request)
                    reply = datatransfer_pb2.BlockOpResponseProto()
                    rest = await _receive_reply(sock, reply, fds, datanode.address)
                    scp.check_fds_reply(reply, what)
                    rest = await _receive_fds(sock, rest, fds, 2, datanode.address)
                    if rest[0] == scp.USE_RECEIPT_VERIFICATION:
                        await _send_all(sock, b"\x00")
            except BaseException:
                _close_all(fds)
                raise
        return fds[0], fds[1]

    # ----- dropping cached fds ----------------------------------------------------------------------

    def _drop(self, replica: _Replica) -> None:
        """Forget a replica's files (closed once no read uses them) and hand its slot back."""
        if replica.dropped:
            return
        replica.dropped = True
        self._replicas.pop(replica.key, None)
        self.stats.short_circuit_open_blocks = len(self._replicas)
        if self._last_used.get(replica.block) is replica:
            del self._last_used[replica.block]
        if replica.users == 0:
            replica.close_files()
        if not replica.segment.disconnected and not self._closed:
            self._nursery.start_soon(self._release, replica.datanode, replica.segment, replica.slot)

    async def _release(self, datanode: _LocalDataNode, segment: _Segment, slot: int) -> None:
        """Op 88: the DataNode unregisters the slot; only then may it be claimed again."""
        try:
            with trio.fail_after(self.timeout), trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                await sock.connect(datanode.path)
                await _send_all(sock, scp.encode_release(scp.SlotId(segment.shm_id, slot)))
                reply = datatransfer_pb2.ReleaseShortCircuitAccessResponseProto()
                await _receive_reply(sock, reply, [], datanode.address)
        except (OSError, ProtocolError, ConnectionLost, trio.TooSlowError) as e:  # a background task: never escape
            log.debug("DataNode %s: releasing short-circuit slot %d failed: %s", datanode.address, slot, e)
            return
        if reply.status == scp.Status.SUCCESS and not segment.disconnected:
            segment.give_back(slot)
        else:
            log.debug("DataNode %s kept short-circuit slot %d: %s", datanode.address, slot, reply.error)

    def close(self) -> None:
        """Close every cached file and segment (the DataNodes then free their slots)."""
        self._closed = True
        for replica in list(self._replicas.values()):
            self._drop(replica)
        for datanode in self._datanodes.values():
            for segment in datanode.segments if isinstance(datanode, _LocalDataNode) else ():
                segment.close()


# ----- socket helpers -----------------------------------------------------------------------------


async def _send_all(sock: trio.socket.SocketType, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[await sock.send(view):]


async def _receive(sock: trio.socket.SocketType, fds: list[int], address: str) -> bytes:
    """Some bytes, keeping every fd that arrives with them (a plain recv would drop them)."""
    data, ancillary, flags, _ = await sock.recvmsg(4096, _FDS_SPACE)
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(array.array("i", payload[: len(payload) - len(payload) % 4]))
    if flags & socket.MSG_CTRUNC:
        raise ProtocolError(f"DataNode {address} passed more file descriptors than asked for")
    if not data:
        raise ConnectionLost(f"DataNode {address} closed its domain socket before answering")
    return data


async def _receive_reply(sock: trio.socket.SocketType, reply: Message, fds: list[int], address: str) -> bytes:
    """One varint-delimited reply parsed into `reply`; returns the bytes that came after it."""
    buf = bytearray()
    while True:
        try:
            end = scp.parse_reply(buf, reply)
            return bytes(buf[end:])
        except NeedData:
            buf += await _receive(sock, fds, address)


async def _receive_fds(sock: trio.socket.SocketType, rest: bytes, fds: list[int], count: int, address: str) -> bytes:
    """Wait for the byte that carries `count` fds; returns the bytes from it on."""
    while not rest or len(fds) < count:
        if rest and len(fds) < count:
            raise ProtocolError(f"DataNode {address} sent {len(fds)} file descriptors, expected {count}")
        rest += await _receive(sock, fds, address)
    if len(fds) != count:
        raise ProtocolError(f"DataNode {address} sent {len(fds)} file descriptors, expected {count}")
    return rest


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


_local_ips: dict[str, bool] = {}


def _is_local_ip(ip: str) -> bool:
    """Whether `ip` is one of this host's addresses (a socket can bind to it)."""
    known = _local_ips.get(ip)
    if known is None:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.bind((ip, 0))
            known = True
        except OSError:
            known = False
        _local_ips[ip] = known
    return known
