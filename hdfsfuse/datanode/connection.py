"""DataNode transport over trio: a connection pool and one exact-length read from one replica.

Does I/O. The byte layouts live in `hdfsfuse.datanode.dtp`; choosing replicas lives in `hdfsfuse.client.client`.

- `ConnectionPool` keeps idle DataNode sockets for less than the DataNode's 4 s keepalive,
  with a global cap. A socket goes back only after a complete, verified read.
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

  A socket not reused within STATUS_DELAY / 2 to STATUS_DELAY (a reader went quiet) sends its
  status alone (`ConnectionPool.flush_forever`), and so does one being closed. The DataNode's
  counters (it counts BytesRead once it has the status) lag a read by at most STATUS_DELAY.
- `read_replica()` sends one OP_READ_BLOCK, parses the response with a read timeout on every
  wait, and retries once on a fresh socket when a pooled one turns out to be stale (that does
  not count as a DataNode failure). A cancelled or failed read closes its socket.
- A new connection to a DataNode that needs SASL (`hdfsfuse.security.transfer` decides) makes the
  handshake first (`hdfsfuse.security.transfer_sasl`); it then carries its layer (DIGEST frames or AES/CTR)
  for its whole life, pooled or not.
- **Bytes land once.** A read's bytes go from the socket straight into its parser's buffer
  (`recv_into` its room), and the packet loop copies them from there to their place in the
  read's output: one copy in user space. AES/CTR decrypts from one scratch buffer per
  connection into that same room; a DIGEST-framed layer's plaintext is fed (copied) in.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import socket
from collections.abc import Callable
from typing import Protocol

import trio

from hdfsfuse.datanode import dtp
from hdfsfuse.errors import ConnectionLost, RpcTimeout
from hdfsfuse.security.transfer_sasl import (
    DataTransferSaslClient,
    DataTransferSaslError,
    StreamLayer,
    UnknownEncryptionKey,
)
from hdfsfuse.stats import Stats
from hdfsfuse.wire import NEED_DATA, NeedData, read_delimited

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


class ConnectionPool:
    """Idle DataNode connections keyed by "host:port"; expire before the DataNode's keepalive."""

    def __init__(self, *, idle_seconds: float = 3.0, capacity: int = 64) -> None:
        self.idle_seconds = idle_seconds
        self.capacity = capacity
        self._idle: dict[str, collections.deque[tuple[float, DnConnection]]] = {}
        self._count = 0
        # Sockets given back with a kept status, oldest first: (when given, socket, its exchanges then).
        self._statuses: collections.deque[tuple[float, DnConnection, int]] = collections.deque()
        self._status_wakeup = trio.Event()

    def __len__(self) -> int:
        return self._count

    def take(self, address: str) -> DnConnection | None:
        """A fresh-enough idle connection to `address`, or None."""
        conns = self._idle.get(address)
        now = trio.current_time()
        while conns:
            stamp, conn = conns.pop()  # newest first
            self._count -= 1
            if now - stamp < self.idle_seconds:
                return conn
            conn.close()
        return None

    def give(self, address: str, conn: DnConnection) -> None:
        self._expire()
        if self._count >= self.capacity:
            oldest = min((q for q in self._idle.values() if q), key=lambda q: q[0][0])
            oldest.popleft()[1].close()
            self._count -= 1
        now = trio.current_time()
        self._idle.setdefault(address, collections.deque()).append((now, conn))
        self._count += 1
        if conn.pending:
            if not self._statuses:
                self._status_wakeup.set()
            self._statuses.append((now, conn, conn.exchanges))

    async def flush_forever(self) -> None:
        """Send the statuses of sockets not reused within STATUS_DELAY.

        A status goes out between STATUS_DELAY / 2 and STATUS_DELAY after its socket came back:
        each wake-up sends all of those, so the task wakes at most once per STATUS_DELAY / 2
        while reads go on, not once per read.
        """
        statuses = self._statuses
        while True:
            if not statuses:
                self._status_wakeup = trio.Event()
                await self._status_wakeup.wait()
                continue
            await trio.sleep_until(statuses[0][0] + STATUS_DELAY)
            horizon = trio.current_time() - STATUS_DELAY / 2
            while statuses and statuses[0][0] <= horizon:
                _, conn, exchanges = statuses.popleft()
                if conn.exchanges == exchanges and conn.pending:
                    conn.flush_status()  # idle since it was given back: no request took the status along

    async def reap_forever(self) -> None:
        """Close idle connections as they expire (the DataNode drops them after its keepalive)."""
        while True:
            await trio.sleep(self.idle_seconds / 2)
            try:
                self._expire()
            except Exception as e:  # a background task: log, never escape
                log.error("closing idle DataNode connections failed: %s: %s", type(e).__name__, e)

    def _expire(self) -> None:
        now = trio.current_time()
        for conns in self._idle.values():
            while conns and now - conns[0][0] >= self.idle_seconds:
                conns.popleft()[1].close()
                self._count -= 1

    def close(self) -> None:
        for conns in self._idle.values():
            for _, conn in conns:
                conn.close()
        self._idle.clear()
        self._statuses.clear()
        self._count = 0


class Security(Protocol):
    """What a new connection needs for SASL (`hdfsfuse.security.transfer`, bound to one block's token)."""

    async def handshake(self, address: str) -> DataTransferSaslClient | None: ...
    def forget_key(self) -> None: ...


class _Stale(Exception):
    """A pooled connection was already closed by the DataNode."""


async def _connect(address: str, timeouts: Timeouts) -> DnConnection:
    host, _, port = address.rpartition(":")
    try:
        with trio.fail_after(timeouts.connect):
            stream = await trio.open_tcp_stream(host.strip("[]"), int(port))
    except trio.TooSlowError:
        raise ConnectFailed(f"connecting to DataNode {address} timed out after {timeouts.connect:g}s") from None
    except OSError as e:
        raise ConnectFailed(f"cannot connect to DataNode {address}: {e.strerror or e}") from None
    # trio sets TCP_NODELAY; take the plain socket over for the non-blocking fast path.
    return DnConnection(socket.socket(fileno=stream.socket.detach()), address)


async def _negotiate(conn: DnConnection, client: DataTransferSaslClient, timeouts: Timeouts) -> None:
    """The SASL handshake on a new connection, before its first op; then the layer is on."""
    try:
        with trio.fail_after(timeouts.read):
            await conn.send_all(client.start())
            while not client.done:
                data = await conn.receive(65536)
                if not data:
                    raise DataTransferSaslError(
                        f"DataNode {conn.address} closed the connection during the SASL handshake; does the "
                        f"cluster's setting match {client.setting}?"
                    )
                reply = client.receive(data)
                if reply:
                    await conn.send_all(reply)
    except trio.TooSlowError:
        raise DataNodeTimeout(f"DataNode {conn.address}: no SASL answer within {timeouts.read:g}s") from None
    except OSError as e:
        raise DataTransferSaslError(
            f"DataNode {conn.address} dropped the connection during the SASL handshake ({e}); does the cluster's "
            f"setting match {client.setting}?"
        ) from None
    conn.layer = client.layer


async def _secure(conn: DnConnection, security: Security, timeouts: Timeouts, stats: Stats) -> None:
    """The SASL handshake a new connection needs, if any (`hdfsfuse.security.transfer` decides)."""
    client = await security.handshake(conn.address)
    if client is not None:
        await _negotiate(conn, client, timeouts)
        stats.dn_sasl[client.layer_name] += 1


async def _exchange(
    conn: DnConnection, request: bytes, parser: dtp.ReadBlockParser, timeouts: Timeouts, reused: bool,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Send the op and drive the parser to the end of the read; keep the read status for later.

    One cancel scope per operation; its deadline moves forward whenever bytes arrive, so the
    read timeout bounds every single wait. Once the first bytes are in, the replica must also
    keep up `min_rate` (after `rate_grace`), so a DataNode that trickles is left for another.
    """
    address = conn.address
    conn.waited = False
    first_bytes_at = 0.0
    unyielded = 0  # bytes received since this read last let other tasks run
    waits_seen = conn.waits
    with trio.CancelScope(deadline=trio.current_time() + timeouts.read) as scope:
        try:
            await conn.send_all(request)
        except OSError as e:
            if reused:
                raise _Stale from None
            raise ConnectionLost(f"sending to DataNode {address} failed: {e}") from None
        got_any = False
        progressed = False
        while True:
            event = parser.next_event()
            if event is NEED_DATA:
                if progressed:  # bytes arrived since the last wait: the timeout starts over
                    now = trio.current_time()
                    scope.deadline = now + timeouts.read
                    progressed = False
                    elapsed = now - first_bytes_at
                    if elapsed > timeouts.rate_grace and parser.received < timeouts.min_rate * elapsed:
                        raise TooSlow(
                            f"DataNode {address} sent {parser.received} bytes in {elapsed:.1f}s during a read of "
                            f"{parser.what}, below the minimum {timeouts.min_rate:g} bytes/s"
                        )
                try:
                    count = await conn.receive_into(parser, RECEIVE_SIZE, parser.bytes_due, ready=got_any)
                except OSError as e:
                    if reused and not got_any:
                        raise _Stale from None
                    raise ConnectionLost(f"connection to DataNode {address} lost: {e}") from None
                if not count:
                    if not got_any:
                        if reused:
                            raise _Stale
                        raise ConnectionLost(
                            f"DataNode {address} closed the connection right after the READ_BLOCK request "
                            "without answering"
                        )
                    raise ConnectionLost(f"DataNode {address} closed the connection in the middle of a read")
                if not got_any:
                    first_bytes_at = trio.current_time()
                got_any = progressed = True
                if conn.waits != waits_seen:
                    waits_seen, unyielded = conn.waits, 0
                else:  # data kept arriving without a wait: let other reads run between packets
                    unyielded += count
                    if unyielded >= YIELD_EVERY:
                        unyielded = 0
                        await trio.lowlevel.checkpoint()
            elif isinstance(event, dtp.ReadFinished):
                conn.keep_status(event.status_reply)  # it goes out with the next request
                break
            elif progress is not None:  # PacketReceived: more verified bytes are in place
                progress(parser.position)
    if scope.cancelled_caught:
        raise DataNodeTimeout(f"DataNode {address} sent nothing for {timeouts.read:g}s during a read of {parser.what}")
    if not conn.waited:
        await trio.lowlevel.checkpoint()  # every read yields at least once


async def read_replica(
    pool: ConnectionPool, address: str, request: bytes, offset: int, length: int, what: str,
    timeouts: Timeouts, stats: Stats, security: Security | None = None,
    keep: list[dtp.ReadBlockParser] | None = None, into: tuple[bytearray, dtp.Placement] | None = None,
    progress: Callable[[int], None] | None = None,
) -> bytearray:
    """Read exactly `length` bytes at block `offset` from the DataNode at `address`.

    `security` (with the block's token): a new connection makes the SASL handshake it asks for.
    `keep`: the finished parser is appended, holding the verified chunk-aligned bytes (the
    block cache stores them). `into`: the bytes go to the caller's buffer at the placement's
    places, and that buffer is returned (a failed attempt may have written part of them).
    `progress(block offset)`: called as verified bytes land, with the offset they reach.
    """
    attempts = 0
    new_key = False
    while True:
        attempts += 1
        conn = pool.take(address) if attempts == 1 else None
        reused = conn is not None
        if conn is None:
            conn = await _connect(address, timeouts)
            stats.dn_connects += 1
            if security is not None:
                try:
                    await _secure(conn, security, timeouts, stats)
                except UnknownEncryptionKey:
                    conn.close()
                    if new_key:
                        raise
                    new_key = True  # the key expired or rolled: once more with a fresh one
                    security.forget_key()
                    continue
                except BaseException:
                    conn.close()
                    raise
        else:
            stats.dn_reuses += 1
        parser = dtp.ReadBlockParser(offset, length, what, keep=keep is not None, into=into)
        stats.dtp_read_ops += 1
        try:
            await _exchange(conn, request, parser, timeouts, reused, progress)
        except _Stale:
            stats.dn_stale_retries += 1
            conn.close()
            continue
        except BaseException:
            conn.close()
            raise
        finally:
            stats.dn_payload_bytes += parser.received  # what crossed the wire, even if the read failed
        pool.give(address, conn)
        if keep is not None:
            keep.append(parser)
        return parser.output


async def block_op(address: str, request: bytes, what: str, timeouts: Timeouts, stats: Stats,
                   security: Security | None = None) -> bytes:
    """One operation other than a read (OP_BLOCK_CHECKSUM) on a fresh connection, closed after.

    Returns the DataNode's varint-delimited response body.
    """
    conn = await _connect(address, timeouts)
    stats.dn_connects += 1
    try:
        if security is not None:
            await _secure(conn, security, timeouts, stats)
        with trio.fail_after(timeouts.read):
            await conn.send_all(request)
            buf = bytearray()
            while True:
                try:
                    raw, _ = read_delimited(buf, 0, dtp.MAX_RESPONSE_LEN)
                    return bytes(raw)
                except NeedData:
                    pass
                data = await conn.receive(65536)
                if not data:
                    raise ConnectionLost(f"DataNode {address} closed the connection before answering for {what}")
                buf += data
    except trio.TooSlowError:
        raise DataNodeTimeout(f"DataNode {address} did not answer within {timeouts.read:g}s for {what}") from None
    except OSError as e:
        raise ConnectionLost(f"connection to DataNode {address} lost: {e}") from None
    finally:
        conn.close()
