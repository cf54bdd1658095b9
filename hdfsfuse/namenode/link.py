"""One live NameNode connection once its handshake is done: the non-blocking socket, the calls
waiting on it, and how a frame goes out under a SASL layer. Does I/O (trio waits on the socket).
`hdfsfuse.namenode.rpc.RpcConnection` dials, authenticates and reads; this holds what it drives."""

from __future__ import annotations

import socket
from typing import Protocol

import trio

from hdfsfuse.errors import HdfsError
from hdfsfuse.namenode import ipc


class Slot:
    """Where one call's answer (or failure) is delivered."""

    __slots__ = ("body", "error", "event")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.body: bytes | None = None
        self.error: HdfsError | None = None


class Layer(Protocol):
    def wrap(self, data: bytes) -> bytes: ...
    def unwrap(self, token: bytes) -> bytes: ...


def encode(frame: bytes, layer: Layer | None) -> bytes:
    """A call frame as it goes on the wire: wrapped when SASL negotiated a layer."""
    return frame if layer is None else ipc.encode_wrapped(frame, layer.wrap)


class Link:
    """One live (non-blocking) socket plus the calls waiting on it."""

    def __init__(self, sock: socket.socket, layer: Layer | None) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.layer = layer
        self.pending: dict[int, Slot] = {}
        self.dead: HdfsError | None = None

    def encode(self, frame: bytes) -> bytes:
        return encode(frame, self.layer)

    def send_now(self, data: bytes) -> int:
        """As much of `data` as the socket takes without waiting."""
        try:
            return self.sock.send(data)
        except BlockingIOError:
            return 0

    async def send_all(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[self.sock.send(view):]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.sock)

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            trio.lowlevel.notify_closing(self.sock)
            self.sock.close()

    def fail_all(self, error: HdfsError) -> None:
        if self.dead is None:
            self.dead = error
        for slot in self.pending.values():
            if slot.error is None and slot.body is None:
                slot.error = error
                slot.event.set()
        self.pending.clear()
