"""The DataNode block reader against fake peers (what Hadoop cannot produce on demand): a DataNode
that closes after the op, hangs, or writes small pieces, and the read status that rides on the
next request."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from hdfsfuse import errors
from hdfsfuse.datanode.connection import DataNodeTimeout, Timeouts
from hdfsfuse.datanode.dtp import STATUS_CHECKSUM_OK
from hdfsfuse.datanode.pool import ConnectionPool
from hdfsfuse.datanode.reader import read_replica
from hdfsfuse.stats import Stats
from tests.conftest import random_bytes

MiB = 1 << 20


async def test_datanode_closing_right_after_the_op_is_an_io_failure_not_sasl() -> None:
    async def handler(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        await stream.aclose()

    async with trio.open_nursery() as n:
        listeners = await n.start(trio.serve_tcp, handler, 0)
        port = listeners[0].socket.getsockname()[1]
        pool = ConnectionPool()
        with pytest.raises(errors.ConnectionLost, match="right after the READ_BLOCK request") as e:
            await read_replica(pool, f"127.0.0.1:{port}", b"\x00\x1c\x51\x00", 0, 10, "blk", Timeouts(), Stats())
        assert not isinstance(e.value, errors.AuthenticationRequired)
        n.cancel_scope.cancel()


async def test_hung_datanode_times_out() -> None:
    async def handler(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    async with trio.open_nursery() as n:
        listeners = await n.start(trio.serve_tcp, handler, 0)
        port = listeners[0].socket.getsockname()[1]
        pool = ConnectionPool()
        with pytest.raises(DataNodeTimeout, match=r"sent nothing for 0\.3s"):
            await read_replica(pool, f"127.0.0.1:{port}", b"\x00\x1c\x51\x00", 0, 10, "blk",
                               Timeouts(read=0.3), Stats())
        assert len(pool) == 0
        n.cancel_scope.cancel()


async def test_a_datanode_writing_small_pieces_wakes_the_reader_per_64_kib_not_per_piece() -> None:
    """An encrypted stream arrives 8 KiB at a time. The reader's waits let up to 64 KiB gather
    (SO_RCVLOWAT), never more than is sure to come, so the last bytes still end the read."""
    from tests.dtp_fakes import read_response

    block = random_bytes(512 * 1024, seed=77)
    wire = read_response(block, 0, len(block))

    async def handler(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        for i in range(0, len(wire) - 200, 8192):  # all but the last 200 bytes, in 8 KiB pieces
            await stream.send_all(wire[i : min(i + 8192, len(wire) - 200)])
            await trio.sleep(0.002)
        await trio.sleep(0.2)
        await stream.send_all(wire[len(wire) - 200 :])  # fewer than the low-water mark
        await stream.receive_some(100)  # the read status

    async with trio.open_nursery() as n:
        listeners = await n.start(trio.serve_tcp, handler, 0)
        address = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        pool = ConnectionPool()
        with trio.fail_after(10):
            data = await read_replica(pool, address, b"\x00\x1c\x51\x00", 0, len(block), "blk",
                                      Timeouts(read=3), Stats())
        assert bytes(data) == block
        conn = pool.take(address)
        assert conn is not None
        assert conn.waits <= 20  # 64 pieces arrived; 512 KiB / 64 KiB = 8 waits, and a few more
        conn.close()
        n.cancel_scope.cancel()


@asynccontextmanager
async def _serving(handler) -> AsyncIterator[tuple[trio.Nursery, str]]:  # type: ignore[no-untyped-def]
    """A fake DataNode on a local port for the block: (its nursery, "host:port")."""
    async with trio.open_nursery() as n:
        listeners = await n.start(trio.serve_tcp, handler, 0)
        yield n, f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        n.cancel_scope.cancel()


def _status_recording_datanode(block: bytes, request: bytes, reads: int,
                               received: list[bytes], ended: trio.Event):  # type: ignore[no-untyped-def]
    """A fake DataNode serving `reads` requests on one connection, then what follows until EOF or
    a status. `received`: the bytes it took in before each response, then those after the last."""
    from tests.dtp_fakes import read_response

    async def handler(stream: trio.SocketStream) -> None:
        buf = bytearray()
        for _ in range(reads):
            while not buf.endswith(request):
                buf += await stream.receive_some(100)
            received.append(bytes(buf))
            buf.clear()
            await stream.send_all(read_response(block, 0, 4096))
        while len(buf) < len(STATUS_CHECKSUM_OK) and (chunk := await stream.receive_some(100)):
            buf += chunk
        received.append(bytes(buf))
        ended.set()

    return handler


async def test_the_read_status_rides_on_the_next_request_and_goes_alone_once_idle() -> None:
    """CHECKSUM_OK is kept on the pooled socket and sent in front of its next request (one send,
    one DataNode wake-up); a socket nobody reuses sends it alone, so the DataNode accounts the read."""
    block, request = random_bytes(4096, seed=78), b"\x00\x1c\x51\x00"
    received: list[bytes] = []
    ended = trio.Event()
    async with _serving(_status_recording_datanode(block, request, 2, received, ended)) as (n, address):
        pool = ConnectionPool()
        n.start_soon(pool.flush_forever)
        for _ in range(2):
            assert bytes(await read_replica(pool, address, request, 0, 4096, "blk", Timeouts(), Stats())) == block
            (_, conn), = pool._idle[address]
            assert conn.pending == STATUS_CHECKSUM_OK  # kept, not sent
        with trio.fail_after(5):
            await ended.wait()  # the flusher sent the second status on its own
        assert received == [request, STATUS_CHECKSUM_OK + request, STATUS_CHECKSUM_OK]
        assert conn.pending == b""
        pool.close()


async def test_a_closing_pool_sends_the_kept_read_status_first() -> None:
    block, request = random_bytes(4096, seed=79), b"\x00\x1c\x51\x00"
    received: list[bytes] = []
    ended = trio.Event()
    async with _serving(_status_recording_datanode(block, request, 1, received, ended)) as (_, address):
        pool = ConnectionPool()  # no flusher: only the close can send it
        assert bytes(await read_replica(pool, address, request, 0, 4096, "blk", Timeouts(), Stats())) == block
        pool.close()
        with trio.fail_after(5):
            await ended.wait()
        assert received == [request, STATUS_CHECKSUM_OK]
