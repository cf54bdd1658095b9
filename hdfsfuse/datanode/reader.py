"""One exact-length read from one replica, and one small block op. Does I/O.

`read_replica()` sends one OP_READ_BLOCK, parses the response with a read timeout on every wait,
and retries once on a fresh socket when a pooled one turns out to be stale (that does not count
as a DataNode failure). A cancelled or failed read closes its socket. A new connection to a
DataNode that needs SASL (`hdfsfuse.security.transfer` decides) makes the handshake first
(`hdfsfuse.security.transfer_sasl`).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

import trio

from hdfsfuse.datanode import dtp
from hdfsfuse.datanode.connection import (
    RECEIVE_SIZE,
    YIELD_EVERY,
    ConnectFailed,
    DataNodeTimeout,
    DnConnection,
    Timeouts,
    TooSlow,
)
from hdfsfuse.datanode.pool import ConnectionPool
from hdfsfuse.errors import ConnectionLost
from hdfsfuse.security.transfer_sasl import DataTransferSaslClient, DataTransferSaslError, UnknownEncryptionKey
from hdfsfuse.stats import Stats
from hdfsfuse.wire import NEED_DATA, NeedData, read_delimited

log = logging.getLogger(__name__)


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


T = TypeVar("T")


async def run_each(fn: Callable[[T], Awaitable[None]], items: Sequence[T]) -> None:
    """Run fn(item) for every item concurrently (inline when there is one item).

    The first failure cancels the others and is raised as itself, not as an exception group:
    callers translate errors once, by type.
    """
    if len(items) == 1:
        await fn(items[0])
        return
    try:
        async with trio.open_nursery() as nursery:
            for item in items:
                nursery.start_soon(fn, item)
    except BaseExceptionGroup as group:
        raise group.exceptions[0] from None
