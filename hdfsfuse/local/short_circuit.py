"""Short-circuit local reads: a replica on this host's DataNode is read from its files with pread.

Does I/O: UNIX domain sockets to local DataNodes, their shared-memory segments, and preads of
the block and meta files they pass. The bytes of the ops live in `short_circuit_protocol`, the
exchanges over the socket in `domain_socket`.

    read(loc, block, token, offset, length)
      -> is the DataNode local? its IP is this host's, and dfs.domain.socket.path (with _PORT =
         its xfer port) is a socket whose directories only root or we can write
      -> cached fds for (DataNode, pool, block id, generation stamp) whose slot is still VALID?
         no: claim a slot in the DataNode's segment (op 89 once per 128 slots; that connection
             stays open, and the DataNode frees the segment when it closes), mark it VALID,
             op 87 on a fresh connection: the block file and meta file fds by SCM_RIGHTS
      -> verified_io.read_verified(): pread the chunks and their CRCs, verify every chunk
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

import collections
import logging
import math
import os
from collections.abc import Callable

import trio

from hdfsfuse.errors import ChecksumMismatch, ConnectionLost, InvalidBlockToken, ProtocolError
from hdfsfuse.local import short_circuit_protocol as scp
from hdfsfuse.local.domain_socket import (
    LocalDataNode,
    ReplicaKey,
    Segment,
    ask_for_fds,
    close_all,
    new_segment,
    release_slot,
)
from hdfsfuse.local.domain_socket import is_local_ip as default_is_local_ip
from hdfsfuse.local.io_threads import LocalIoThreads
from hdfsfuse.local.replica_files import LocalReplica
from hdfsfuse.local.uring import RingClosed
from hdfsfuse.local.verified_io import (
    DIRECT_MIN,
    ShortRead,
    WouldBlock,
)
from hdfsfuse.proto import hdfs_pb2, rpc_pb2
from hdfsfuse.stats import Stats

log = logging.getLogger(__name__)

DISABLE_SECONDS = 600.0  # as the Java client's dfs.client.domain.socket.disable.interval.seconds
BLOCK_REFUSED_SECONDS = 60.0
RECHECK_SECONDS = 60.0  # a local DataNode with no (trusted) socket yet is looked at again after this
REFUSED_MEMORY = 1024  # refused blocks remembered per DataNode before expired ones are forgotten
INLINE_MAX = 128 * 1024  # larger reads pread and verify in a worker thread
CAPACITY = 256  # blocks whose fds stay open (the Java client's streams cache size)



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
        self._is_local_ip = is_local_ip or default_is_local_ip
        # (IP, xfer port) -> its local DataNode, or when to look for its socket again
        self._datanodes: dict[tuple[str, int], LocalDataNode | float] = {}
        self._warned: set[str] = set()  # socket paths refused as untrusted (logged once each)
        self._replicas: collections.OrderedDict[ReplicaKey, LocalReplica] = collections.OrderedDict()
        self._opening: dict[ReplicaKey, trio.Event] = {}
        self._last_used: dict[tuple[str, int, int], LocalReplica] = {}  # (pool, block id, GS) -> what served it last
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
                # page cache), through io_uring too. Without io_uring, both go to the threads.
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

    def _served(self, replica: LocalReplica, n: int) -> None:
        self.stats.short_circuit_reads += 1
        self.stats.short_circuit_bytes += n
        self.stats.short_circuit_by_datanode[replica.datanode.address] += 1

    def serves(self, loc: hdfs_pb2.DatanodeInfoProto) -> bool:
        """Whether a read of `loc` would try its local files first (then no hedging: a local
        read either answers at once or waits for a disk that a second replica would share)."""
        datanode = self._datanode(loc)
        return datanode is not None and datanode.off_until <= trio.current_time()

    @staticmethod
    def _changed(replica: LocalReplica) -> bool:
        try:
            return os.fstat(replica.data_fd).st_size != replica.length
        except OSError:
            return True

    # ----- which DataNodes are local ----------------------------------------------------------------

    def _datanode(self, loc: hdfs_pb2.DatanodeInfoProto) -> LocalDataNode | None:
        ident = (loc.id.ipAddr, loc.id.xferPort)
        known = self._datanodes.get(ident)
        if known is not None and (isinstance(known, LocalDataNode) or known > trio.current_time()):
            return known if isinstance(known, LocalDataNode) else None
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
            datanode = self._datanodes[ident] = LocalDataNode(path, address)
            log.info("DataNode %s is local: short-circuit reads over %s", address, path)
            return datanode
        if unsafe is not None and os.path.exists(path) and path not in self._warned:
            self._warned.add(path)
            log.warning("DataNode %s: not using its socket for short-circuit reads: %s (dfs.domain.socket.path)",
                        address, unsafe)
        self._datanodes[ident] = trio.current_time() + RECHECK_SECONDS  # no socket (yet): look again later
        return None

    # ----- opening a replica's files ----------------------------------------------------------------

    async def _open(self, datanode: LocalDataNode, key: ReplicaKey, block: hdfs_pb2.ExtendedBlockProto,
                    token: rpc_pb2.TokenProto, what: str) -> LocalReplica | None:
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

    async def _request(self, datanode: LocalDataNode, key: ReplicaKey, block: hdfs_pb2.ExtendedBlockProto,
                       token: rpc_pb2.TokenProto, what: str) -> LocalReplica | None:
        segment: Segment | None = None
        slot: int | None = None
        try:
            segment, slot = await self._claim_slot(datanode)
            self.stats.short_circuit_fd_requests += 1
            request = scp.encode_fds_request(block, token, scp.SlotId(segment.shm_id, slot))
            data_fd, meta_fd = await ask_for_fds(datanode, request, what, self.timeout)
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
            close_all([data_fd, meta_fd])
            self._nursery.start_soon(release_slot, datanode, segment, slot, self.timeout)
            self._refuse(datanode, key, str(e))
            return None
        replica = LocalReplica(key, data_fd, meta_fd, checksum, block.numBytes, datanode, segment, slot)
        self._replicas[key] = replica
        while len(self._replicas) > self.capacity:
            self._drop(next(iter(self._replicas.values())))
        self.stats.short_circuit_open_blocks = len(self._replicas)
        return replica

    @staticmethod
    def _refuse(datanode: LocalDataNode, key: ReplicaKey, why: str) -> None:
        now = trio.current_time()
        if len(datanode.refused) >= REFUSED_MEMORY:
            datanode.refused = {k: t for k, t in datanode.refused.items() if t > now}
        datanode.refused[key] = now + BLOCK_REFUSED_SECONDS
        log.info("%s; reading it over TCP for %gs", why, BLOCK_REFUSED_SECONDS)

    async def _claim_slot(self, datanode: LocalDataNode) -> tuple[Segment, int]:
        async with datanode.segment_lock:  # readers arriving together share one new segment
            for segment in datanode.segments:
                slot = segment.claim()
                if slot is not None:
                    return segment, slot
            datanode.segments = [s for s in datanode.segments if not s.disconnected]
            segment = await new_segment(datanode, self.client_name, self.timeout)
            self._nursery.start_soon(segment.watch)
            self.stats.short_circuit_segments += 1
            datanode.segments.append(segment)
            slot = segment.claim()
            if slot is None:
                raise scp.ShortCircuitUnsupported(f"DataNode {datanode.address} gave a segment with no slots")
            return segment, slot

    # ----- dropping cached fds ----------------------------------------------------------------------

    def _drop(self, replica: LocalReplica) -> None:
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
            self._nursery.start_soon(release_slot, replica.datanode, replica.segment, replica.slot, self.timeout)

    def close(self) -> None:
        """Close every cached file and segment (the DataNodes then free their slots)."""
        self._closed = True
        for replica in list(self._replicas.values()):
            self._drop(replica)
        for datanode in self._datanodes.values():
            for segment in datanode.segments if isinstance(datanode, LocalDataNode) else ():
                segment.close()
