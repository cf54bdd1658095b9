"""A local DataNode's domain socket: its shared-memory segments, and file descriptors passed over it.

Does I/O (UNIX domain sockets, mmap). The bytes of the ops live in `short_circuit_protocol`:

    op 89  a shared-memory segment of slots; its connection stays open for the segment's life
    op 87  a block's data and meta file fds (SCM_RIGHTS), guarded by a slot marked VALID
    op 88  a slot handed back; only then may it be claimed again
"""

from __future__ import annotations

import array
import dataclasses
import logging
import mmap
import os
import socket

import trio
from google.protobuf.message import Message

from hdfsfuse.errors import ConnectionLost, ProtocolError
from hdfsfuse.local import short_circuit_protocol as scp
from hdfsfuse.proto import datatransfer_pb2
from hdfsfuse.wire import NeedData

log = logging.getLogger(__name__)

_FDS_SPACE = socket.CMSG_SPACE(4 * array.array("i").itemsize)
ReplicaKey = tuple[str, str, int, int]  # (DataNode socket, pool, block id, generation stamp)


class Segment:
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
class LocalDataNode:
    path: str  # its domain socket
    address: str  # its xfer address, for messages
    off_until: float = 0.0  # trio time: read over TCP until then
    segments: list[Segment] = dataclasses.field(default_factory=list)
    segment_lock: trio.Lock = dataclasses.field(default_factory=trio.Lock)  # one new segment at a time
    refused: dict[ReplicaKey, float] = dataclasses.field(default_factory=dict)




async def new_segment(datanode: LocalDataNode, client_name: str, timeout: float) -> Segment:
    """Op 89: a shared-memory segment; its connection stays open for the segment's life."""
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fds: list[int] = []
    try:
        with trio.fail_after(timeout):
            await sock.connect(datanode.path)
            await _send_all(sock, scp.encode_shm_request(client_name))
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
        close_all(fds)  # the mapping stays; the fd is not needed
    return Segment(sock, shm_id, memory)


async def ask_for_fds(datanode: LocalDataNode, request: bytes, what: str, timeout: float) -> tuple[int, int]:
    """Op 87 on a fresh connection: [block file fd, meta file fd], or the refusal raised."""
    fds: list[int] = []
    with trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            with trio.fail_after(timeout):
                await sock.connect(datanode.path)
                await _send_all(sock, request)
                reply = datatransfer_pb2.BlockOpResponseProto()
                rest = await _receive_reply(sock, reply, fds, datanode.address)
                scp.check_fds_reply(reply, what)
                rest = await _receive_fds(sock, rest, fds, 2, datanode.address)
                if rest[0] == scp.USE_RECEIPT_VERIFICATION:
                    await _send_all(sock, b"\x00")
        except BaseException:
            close_all(fds)
            raise
    return fds[0], fds[1]


async def release_slot(datanode: LocalDataNode, segment: Segment, slot: int, timeout: float) -> None:
    """Op 88: the DataNode unregisters the slot; only then may it be claimed again."""
    try:
        with trio.fail_after(timeout), trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
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


def close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


_local_ips: dict[str, bool] = {}


def is_local_ip(ip: str) -> bool:
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
