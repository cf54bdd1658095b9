"""One DataNode socket over trio, with the read status that rides on the next request.

Does I/O. The byte layouts live in `hdfsfuse.datanode.dtp`; pooling lives in
`hdfsfuse.datanode.pool` and one exact read in `hdfsfuse.datanode.reader`.

- **The read status rides on the next request.** After the last packet the DataNode waits for
  the client's status (CHECKSUM_OK) before it accounts the read and reads the next op. Sent on
  its own, the status costs a send and a DataNode wake-up per read. It is kept on the pooled
  socket instead, and goes out in front of that socket's next request, in one send:

      client                                   DataNode thread
        |-- READ_BLOCK #1 --------------------->|
        |<---------- response, packets ---------|  (waits for a status)
        |   (status #1 kept)                    |
        |-- status #1 + READ_BLOCK #2 --------->|  accounts #1, reads op #2 from the same bytes
        |<---------- response, packets ---------|

- A connection to a DataNode that needs SASL carries its layer (DIGEST frames or AES/CTR) for its
  whole life, pooled or not.
- **Bytes land once.** A read's bytes go from the socket straight into its parser's buffer
  (`recv_into` its room), and the packet loop copies them from there to their place in the
  read's output: one copy in user space. AES/CTR decrypts from one scratch buffer per
  connection into that same room; a DIGEST-framed layer's plaintext is fed (copied) in.
"""

from __future__ import annotations

import dataclasses
import logging
import socket

import trio

from hdfsfuse.datanode import dtp
from hdfsfuse.errors import ConnectionLost, RpcTimeout
from hdfsfuse.security.transfer_sasl import (
    StreamLayer,
)

log = logging.getLogger(__name__)

RECEIVE_SIZE = 256 * 1024
LOW_WATER = 256 * 1024  # the most a wait for a read's bytes lets gather before it ends (<= RECEIVE_SIZE)
YIELD_EVERY = 1024 * 1024  # a large read yields to other tasks at least this often
STATUS_DELAY = 0.02  # seconds a pooled socket keeps its read status for the next request


@dataclasses.dataclass(frozen=True)
class Timeouts:
    connect: float = 5.0  # TCP connect to a DataNode
    read: float = 10.0  # any single wait for DataNode bytes
    total: float = 60.0  # one block read across every replica and retry
    min_rate: float = 64 * 1024  # bytes/s a replica must keep up once it has sent its first bytes...
    rate_grace: float = 1.0  # ...measured from this many seconds after those first bytes


class DataNodeTimeout(RpcTimeout):
    """A DataNode did not connect or send within its timeout."""


class ConnectFailed(ConnectionLost):
    """No TCP connection to the DataNode (refused, unreachable, or timed out)."""


class TooSlow(DataNodeTimeout):
    """The DataNode sends, but below the minimum rate: leave it for another replica."""


class DnConnection:
    """One DataNode socket, driven without trio's stream layer on the hot path.

    The socket is non-blocking: a send or receive is tried first and only waits (a trio
    checkpoint) when the kernel has nothing ready. A read always waits for the DataNode at
    least once, so the task still yields to others on every operation.
    """

    __slots__ = ("address", "exchanges", "layer", "lowat", "pending", "scratch", "sock", "waited", "waits")

    def __init__(self, sock: socket.socket, address: str) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.address = address
        self.waited = False
        self.waits = 0  # receive waits so far (each one let other tasks run)
        self.layer: StreamLayer | None = None  # SASL's integrity or privacy layer, once negotiated
        self.lowat = 1  # the socket's SO_RCVLOWAT: a wait for data ends when this much is in
        self.pending = b""  # a read status not sent yet, as wire bytes (already sealed by the layer)
        self.exchanges = 0  # reads finished on this socket
        self.scratch: bytearray | None = None  # an AES connection's ciphertext, on its way to a parser

    def keep_status(self, status: bytes) -> None:
        """A read finished: its status goes out with the next request (or `flush_status`)."""
        self.exchanges += 1
        self.pending = status if self.layer is None else self.layer.seal(status)

    def flush_status(self) -> None:
        """Send a kept read status now, without waiting: a few bytes into an idle socket."""
        try:
            n = self.sock.send(self.pending)
        except BlockingIOError:
            return  # a full send buffer (never on an idle socket): the next request takes it along
        except OSError:
            n = len(self.pending)  # a broken socket: its next use finds out and moves to a fresh one
        self.pending = self.pending[n:]

    async def send_all(self, data: bytes) -> None:
        if self.layer is not None:
            data = self.layer.seal(data)
        if self.pending:
            data = self.pending + data
            self.pending = b""
        view = memoryview(data)
        while view:
            try:
                n = self.sock.send(view)
            except BlockingIOError:
                self.waited = True
                await trio.lowlevel.wait_writable(self.sock)
                continue
            view = view[n:]

    async def receive(self, max_bytes: int, due: int = 1, ready: bool = True) -> bytes:
        """The next bytes (plaintext under a layer); b"" at EOF.

        `due`: how many bytes are sure to come (a lower bound). While that is LOW_WATER or
        more, a wait lasts until LOW_WATER bytes are in, not until the first few arrive: a
        DataNode that writes in small pieces (an encrypted stream writes 8 KiB at a time) would
        otherwise wake this task for each. Below it (a small read, a read's tail) any byte ends
        the wait, so the mark never outlasts the stream, and small reads make no setsockopt.
        `ready`: False right after a request, whose answer cannot be in yet: wait before the
        first try (a receive that could only fail costs a syscall and an exception).
        """
        while True:
            if ready:
                try:
                    data = self.sock.recv(max_bytes)
                except BlockingIOError:
                    pass
                else:
                    if self.layer is None or not data:
                        return data
                    plain = self.layer.open(data)
                    if plain:
                        return plain
                    continue  # part of a frame: the rest may be in already
            ready = True
            await self._wait_readable(due)

    async def receive_into(self, parser: dtp.ReadBlockParser, max_bytes: int, due: int = 1,
                           ready: bool = True) -> int:
        """As `receive`, but into the parser's own buffer (no copy between the socket and
        the packets); returns the count, 0 at EOF. A layer that opens into a buffer (AES)
        writes its plaintext there; a framed one's plaintext is fed."""
        if self.layer is not None and self.layer.open_into_slack is None:
            data = await self.receive(max_bytes, due, ready)
            parser.feed(data)
            return len(data)
        while True:
            if ready:
                n = self._try_receive_into(parser, max_bytes)
                if n >= 0:
                    return n
            ready = True
            await self._wait_readable(due)

    def _try_receive_into(self, parser: dtp.ReadBlockParser, max_bytes: int) -> int:
        """One receive into the parser's room: the count (0 at EOF), -1 when nothing is in."""
        layer = self.layer
        slack = 0 if layer is None else layer.open_into_slack or 0
        room = parser.receive_buffer(max_bytes + slack)
        try:
            if layer is None:
                n = self.sock.recv_into(room)
            else:  # the ciphertext into this connection's scratch buffer, its plaintext into the room
                want = len(room) - slack
                if self.scratch is None or len(self.scratch) < want:
                    self.scratch = bytearray(max(want, RECEIVE_SIZE))
                scratch = memoryview(self.scratch)
                got = self.sock.recv_into(scratch[:want])
                n = layer.open_into(scratch[:got], room) if got else 0
        except BlockingIOError:
            return -1
        finally:
            room.release()
        parser.filled(n)
        return n

    async def _wait_readable(self, due: int) -> None:
        self.waited = True
        self.waits += 1
        lowat = LOW_WATER if due >= LOW_WATER else 1
        if lowat != self.lowat:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, lowat)
            self.lowat = lowat
        await trio.lowlevel.wait_readable(self.sock)

    def close(self) -> None:
        if self.pending:  # so the DataNode accounts the read and logs no network error
            self.flush_status()
        trio.lowlevel.notify_closing(self.sock)
        self.sock.close()
