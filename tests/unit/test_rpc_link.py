"""A NameNode connection's socket against a fake peer that stops reading, which a real NameNode
cannot be made to do on demand: a call larger than the socket's buffers waits and is written
whole, calls behind it are not interleaved into it, and a call cancelled part way through its
frame closes the connection (the next call reconnects)."""

from __future__ import annotations

import struct

import pytest
import trio

from hdfsfuse.errors import RpcTimeout
from hdfsfuse.namenode import ipc
from hdfsfuse.namenode.rpc import RpcConnection
from hdfsfuse.proto import rpc_pb2
from hdfsfuse.security.credentials import RpcAuth
from hdfsfuse.wire import delimited, read_delimited

BIG = 8 * 1024 * 1024  # more than loopback's socket buffers take without the peer reading


class FakeNameNode:
    """Accepts connections; reads nothing until `reading` is set; answers each call with its
    request's length, newest call first."""

    def __init__(self) -> None:
        self.reading = trio.Event()
        self.calls: list[tuple[int, bytes]] = []  # (call id, request) in the order they arrived
        self.connections = 0
        self.port = 0

    async def serve(self, nursery: trio.Nursery) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, self.handle, listeners)

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        await self.reading.wait()
        buf = bytearray()
        seen_context = False
        answered = 0
        while True:
            data = await stream.receive_some(1 << 20)
            if not data:
                return
            buf += data
            if not seen_context and len(buf) >= len(ipc.PREAMBLE):
                del buf[: len(ipc.PREAMBLE)]
                seen_context = True
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
                size = struct.unpack(">I", buf[:4])[0]
                frame, buf = bytes(buf[4 : 4 + size]), buf[4 + size :]
                raw, pos = read_delimited(frame, 0, len(frame))
                header = rpc_pb2.RpcRequestHeaderProto.FromString(bytes(raw))
                if header.callId < 0:
                    continue  # the connection context
                _, pos = read_delimited(frame, pos, len(frame))  # the method header
                request, _ = read_delimited(frame, pos, len(frame))
                self.calls.append((header.callId, bytes(request)))
            if len(self.calls) > answered:
                for call_id, request in reversed(self.calls[answered:]):
                    head = rpc_pb2.RpcResponseHeaderProto(callId=call_id, status=ipc.SUCCESS, serverIpcVersionNum=9)
                    payload = delimited(head.SerializeToString()) + delimited(str(len(request)).encode())
                    await stream.send_all(struct.pack(">I", len(payload)) + payload)
                answered = len(self.calls)


async def _connection(nursery: trio.Nursery, fake: FakeNameNode) -> RpcConnection:
    return RpcConnection("127.0.0.1", fake.port, auth=RpcAuth(user="alice"), nursery=nursery)


async def test_a_call_larger_than_the_socket_buffers_is_written_whole_before_the_next(nursery) -> None:  # type: ignore[no-untyped-def]
    fake = FakeNameNode()
    await fake.serve(nursery)
    rpc = await _connection(nursery, fake)
    big = bytes(range(256)) * (BIG // 256)
    answers: dict[str, bytes] = {}

    async def call(name: str, request: bytes) -> None:
        answers[name] = await rpc.call("m", request, timeout=30)

    async with trio.open_nursery() as calls:
        calls.start_soon(call, "big", big)
        await trio.sleep(0.2)  # the big call is part way through its frame, waiting
        calls.start_soon(call, "small", b"tiny")
        await trio.sleep(0.2)
        assert not answers
        fake.reading.set()
    assert answers == {"big": str(BIG).encode(), "small": b"4"}
    assert [request for _, request in fake.calls] == [big, b"tiny"]  # whole, and in order
    await rpc.aclose()


async def test_a_call_cancelled_part_way_through_its_frame_closes_the_connection(nursery) -> None:  # type: ignore[no-untyped-def]
    fake = FakeNameNode()
    await fake.serve(nursery)
    rpc = await _connection(nursery, fake)
    with pytest.raises(RpcTimeout):
        await rpc.call("m", bytes(BIG), timeout=0.3)
    fake.reading.set()
    assert await rpc.call("m", b"after", timeout=10) == b"5"
    assert fake.connections == 2  # the half-sent frame's connection was not used again
    assert [request for _, request in fake.calls] == [b"after"]
    await rpc.aclose()
