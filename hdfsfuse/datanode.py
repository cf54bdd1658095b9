"""DataNode transport over trio: a connection pool and one exact-length read from one replica.

Does I/O. The byte layouts live in `hdfsfuse.dtp`; choosing replicas lives in `hdfsfuse.client`.

- `ConnectionPool` keeps idle DataNode sockets for less than the DataNode's 4 s keepalive,
  with a global cap. A socket goes back only after a complete read and a sent status.
- `read_replica()` sends one OP_READ_BLOCK, parses the response with a read timeout on every
  wait, and retries once on a fresh socket when a pooled one turns out to be stale (that does
  not count as a DataNode failure). A cancelled or failed read closes its socket.
"""

from __future__ import annotations

import collections
import dataclasses
import logging

import trio

from hdfsfuse import dtp
from hdfsfuse.errors import ConnectionLost, RpcTimeout
from hdfsfuse.stats import Stats
from hdfsfuse.wire import NEED_DATA

log = logging.getLogger(__name__)

RECEIVE_SIZE = 256 * 1024


@dataclasses.dataclass(frozen=True)
class Timeouts:
    connect: float = 5.0  # TCP connect to a DataNode
    read: float = 10.0  # any single wait for DataNode bytes
    total: float = 60.0  # one block read across every replica and retry


class DataNodeTimeout(RpcTimeout):
    """A DataNode did not connect or send within its timeout."""


class ConnectionPool:
    """Idle DataNode connections keyed by "host:port"; expire before the DataNode's keepalive."""

    def __init__(self, *, idle_seconds: float = 3.0, capacity: int = 64) -> None:
        self.idle_seconds = idle_seconds
        self.capacity = capacity
        self._idle: dict[str, collections.deque[tuple[float, trio.SocketStream]]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def take(self, address: str) -> trio.SocketStream | None:
        """A fresh-enough idle connection to `address`, or None."""
        conns = self._idle.get(address)
        now = trio.current_time()
        while conns:
            stamp, stream = conns.pop()  # newest first
            self._count -= 1
            if now - stamp < self.idle_seconds:
                return stream
            self._discard(stream)
        return None

    def give(self, address: str, stream: trio.SocketStream) -> None:
        self._expire()
        if self._count >= self.capacity:
            oldest_addr = min(self._idle, key=lambda a: self._idle[a][0][0] if self._idle[a] else float("inf"))
            if self._idle.get(oldest_addr):
                _, old = self._idle[oldest_addr].popleft()
                self._count -= 1
                self._discard(old)
        self._idle.setdefault(address, collections.deque()).append((trio.current_time(), stream))
        self._count += 1

    def _expire(self) -> None:
        now = trio.current_time()
        for conns in self._idle.values():
            while conns and now - conns[0][0] >= self.idle_seconds:
                _, stream = conns.popleft()
                self._count -= 1
                self._discard(stream)

    @staticmethod
    def _discard(stream: trio.SocketStream) -> None:
        # Closing a plain socket stream never blocks; a forceful close needs no checkpoint.
        stream.socket.close()

    def close(self) -> None:
        for conns in self._idle.values():
            for _, stream in conns:
                self._discard(stream)
        self._idle.clear()
        self._count = 0


class _Stale(Exception):
    """A pooled connection was already closed by the DataNode."""


async def _connect(address: str, timeouts: Timeouts) -> trio.SocketStream:
    host, _, port = address.rpartition(":")
    try:
        with trio.fail_after(timeouts.connect):
            return await trio.open_tcp_stream(host, int(port))
    except trio.TooSlowError:
        raise DataNodeTimeout(f"connecting to DataNode {address} timed out after {timeouts.connect:g}s") from None
    except OSError as e:
        raise ConnectionLost(f"cannot connect to DataNode {address}: {e.strerror or e}") from None


async def _exchange(
    stream: trio.SocketStream, request: bytes, parser: dtp.ReadBlockParser, timeouts: Timeouts,
    address: str, reused: bool,
) -> None:
    """Send the op and drive the parser to the end of the read; send the read status."""
    try:
        await stream.send_all(request)
    except (trio.BrokenResourceError, OSError) as e:
        if reused:
            raise _Stale from None
        raise ConnectionLost(f"sending to DataNode {address} failed: {e}") from None
    got_any = False
    while True:
        event = parser.next_event()
        if event is NEED_DATA:
            try:
                with trio.fail_after(timeouts.read):
                    data = await stream.receive_some(RECEIVE_SIZE)
            except trio.TooSlowError:
                raise DataNodeTimeout(
                    f"DataNode {address} sent nothing for {timeouts.read:g}s during a read of {parser.what}"
                ) from None
            except (trio.BrokenResourceError, OSError) as e:
                if reused and not got_any:
                    raise _Stale from None
                raise ConnectionLost(f"connection to DataNode {address} lost: {e}") from None
            if not data:
                if not got_any:
                    if reused:
                        raise _Stale
                    raise dtp.sasl_suspected(f"DataNode {address}")
                raise ConnectionLost(f"DataNode {address} closed the connection in the middle of a read")
            got_any = True
            parser.feed(data)
        elif isinstance(event, dtp.ReadFinished):
            try:
                await stream.send_all(event.status_reply)
            except (trio.BrokenResourceError, OSError) as e:
                raise ConnectionLost(f"sending the read status to {address} failed: {e}") from None
            return


async def read_replica(
    pool: ConnectionPool, address: str, request: bytes, offset: int, length: int, what: str,
    timeouts: Timeouts, stats: Stats,
) -> bytearray:
    """Read exactly `length` bytes at block `offset` from the DataNode at `address`."""
    attempts = 0
    while True:
        attempts += 1
        stream = pool.take(address) if attempts == 1 else None
        reused = stream is not None
        if stream is None:
            stream = await _connect(address, timeouts)
            stats.dn_connects += 1
        else:
            stats.dn_reuses += 1
        parser = dtp.ReadBlockParser(offset, length, what)
        stats.dtp_read_ops += 1
        try:
            await _exchange(stream, request, parser, timeouts, address, reused)
        except _Stale:
            stats.dn_stale_retries += 1
            await trio.aclose_forcefully(stream)
            continue
        except BaseException:
            stats.dn_payload_bytes += parser.received
            await trio.aclose_forcefully(stream)
            raise
        stats.dn_payload_bytes += parser.received
        pool.give(address, stream)
        return parser.output


