"""A Hadoop IPC connection over trio: pipelined calls on one socket, demultiplexed by callId.

Owns one TCP connection to one NameNode (or DataNode IPC port) at a time. Does I/O. The
framing lives in `hdfsfuse.ipc`; failover and retries live in `hdfsfuse.namenode`.

- Calls are written whole under a send lock; a reader task (owned by the caller's nursery)
  routes each response to its waiting call.
- Every call has a deadline. A call cancelled mid-send closes the connection, because a
  partial frame would corrupt the stream.
- EOF, a reset or a FATAL frame fails every waiting call; the next call reconnects.
- With a token (DataNode IPC and block tokens), the connection first authenticates with SASL
  DIGEST-MD5 (`_authenticate`, bounded by the connect timeout); the pure parts are in
  `hdfsfuse.sasl` and `hdfsfuse.ipc`.
- `aclose()` is safe under cancellation.
"""

from __future__ import annotations

import itertools
import logging
import uuid

import trio

from hdfsfuse import ipc, sasl
from hdfsfuse.errors import ConnectionLost, HdfsError, RpcTimeout, from_remote
from hdfsfuse.proto import rpc_pb2
from hdfsfuse.wire import NEED_DATA, ProtocolError

log = logging.getLogger(__name__)

SaslState = rpc_pb2.RpcSaslProto


class _Slot:
    __slots__ = ("body", "error", "event")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.body: bytes | None = None
        self.error: HdfsError | None = None


class _Link:
    """One live socket plus the calls waiting on it."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.pending: dict[int, _Slot] = {}
        self.dead: HdfsError | None = None

    def fail_all(self, error: HdfsError) -> None:
        if self.dead is None:
            self.dead = error
        for slot in self.pending.values():
            if slot.error is None and slot.body is None:
                slot.error = error
                slot.event.set()
        self.pending.clear()


class RpcConnection:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        user: str,
        nursery: trio.Nursery,
        protocol: str = ipc.CLIENT_PROTOCOL,
        client_id: bytes | None = None,
        connect_timeout: float = 10.0,
        max_frame: int = ipc.DEFAULT_MAX_FRAME,
        token: rpc_pb2.TokenProto | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.user = user
        self.protocol = protocol
        self.client_id = client_id or uuid.uuid4().bytes
        self.connect_timeout = connect_timeout
        self.max_frame = max_frame
        self.token = token
        self._nursery = nursery
        self._link: _Link | None = None
        self._connect_lock = trio.Lock()
        self._send_lock = trio.Lock()
        self._call_ids = itertools.count()
        self._closed = False
        self.connects = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def _connected(self) -> _Link:
        async with self._connect_lock:
            if self._closed:
                raise ConnectionLost(f"connection to {self.address} is closed")
            link = self._link
            if link is not None and link.dead is None:
                return link
            try:
                with trio.fail_after(self.connect_timeout):
                    stream = await trio.open_tcp_stream(self.host, self.port)
            except trio.TooSlowError:
                raise ConnectionLost(
                    f"connecting to {self.address} timed out after {self.connect_timeout:g}s"
                ) from None
            except OSError as e:
                raise ConnectionLost(f"cannot connect to {self.address}: {e.strerror or e}") from None
            link = _Link(stream)
            try:
                # No reply comes for the context; the first call's reply proves the handshake.
                if self.token is None:
                    await stream.send_all(ipc.encode_handshake(self.client_id, self.user, self.protocol))
                else:
                    with trio.fail_after(self.connect_timeout):
                        user = await self._authenticate(stream, self.token)
                    await stream.send_all(ipc.encode_context(self.client_id, user, self.protocol))
            except trio.TooSlowError:
                await trio.aclose_forcefully(stream)
                raise ConnectionLost(f"SASL with {self.address} took longer than {self.connect_timeout:g}s") from None
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
            self._link = link
            self.connects += 1
            self._nursery.start_soon(self._reader, link)
            return link

    async def _authenticate(self, stream: trio.SocketStream, token: rpc_pb2.TokenProto) -> str | None:
        """SASL TOKEN/DIGEST-MD5 before the context; the user to put in the context (None for a token)."""
        reader = ipc.ResponseReader(self.max_frame)

        async def receive() -> rpc_pb2.RpcSaslProto:
            while True:
                resp = reader.next_response()
                if resp is not NEED_DATA:
                    break
                data = await stream.receive_some(65536)
                if not data:
                    raise ConnectionLost(f"{self.address} closed the connection during SASL")
                reader.feed(data)
            assert isinstance(resp, ipc.RpcResponse)
            if resp.fatal or resp.body is None:
                raise from_remote(resp.exception_class, resp.error_msg)
            if resp.call_id != ipc.SASL_CALL_ID:
                raise ProtocolError(f"{self.address} answered SASL with call id {resp.call_id}")
            return rpc_pb2.RpcSaslProto.FromString(resp.body)

        await stream.send_all(ipc.SASL_PREAMBLE + ipc.encode_sasl(rpc_pb2.RpcSaslProto(state=SaslState.NEGOTIATE)))
        offer = await receive()
        if offer.state == SaslState.SUCCESS:  # the server only does SIMPLE: it switched
            return self.user
        chosen = next((a for a in offer.auths if a.method == "TOKEN" and a.mechanism == "DIGEST-MD5"), None)
        if offer.state != SaslState.NEGOTIATE or chosen is None:
            methods = ", ".join(f"{a.method}/{a.mechanism}" for a in offer.auths) or "none"
            raise sasl.SaslError(f"{self.address} offers no token authentication (offers {methods})")
        digest = sasl.DigestMd5Client(*sasl.token_credentials(token.identifier, token.password),
                                      protocol=chosen.protocol, server=chosen.serverId)
        echo = rpc_pb2.RpcSaslProto.SaslAuth()
        echo.CopyFrom(chosen)
        echo.ClearField("challenge")
        initiate = rpc_pb2.RpcSaslProto(state=SaslState.INITIATE, token=digest.respond(chosen.challenge), auths=[echo])
        await stream.send_all(ipc.encode_sasl(initiate))
        done = await receive()
        if done.state != SaslState.SUCCESS:
            raise sasl.SaslError(f"{self.address} did not accept the token (SASL state {done.state})")
        digest.verify(done.token)
        if reader.buffered:
            raise ProtocolError(f"{self.address} sent data after SASL success")
        return None

    async def _reader(self, link: _Link) -> None:
        reader = ipc.ResponseReader(self.max_frame)
        error: HdfsError = ConnectionLost(f"connection to {self.address} closed")
        try:
            while True:
                data = await link.stream.receive_some(65536)
                if not data:
                    error = ConnectionLost(f"{self.address} closed the connection")
                    return
                reader.feed(data)
                fatal = self._dispatch(link, reader)
                if fatal is not None:
                    error = fatal
                    return
        except ProtocolError as e:
            error = ConnectionLost(f"protocol error from {self.address}: {e}")
            log.error("RPC %s: %s", self.address, error)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
            error = ConnectionLost(f"connection to {self.address} lost: {e}")
        except Exception as e:  # a background task: fail the waiting calls, never the whole client
            error = ConnectionLost(f"connection to {self.address} failed: {type(e).__name__}: {e}")
            log.error("RPC %s: %s", self.address, error)
        finally:
            link.fail_all(error)
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(link.stream)

    def _dispatch(self, link: _Link, reader: ipc.ResponseReader) -> HdfsError | None:
        """Route every complete response; return an error if the server sent FATAL."""
        while True:
            resp = reader.next_response()
            if resp is NEED_DATA:
                return None
            assert isinstance(resp, ipc.RpcResponse)
            if resp.fatal:
                return from_remote(resp.exception_class, resp.error_msg)
            slot = link.pending.pop(resp.call_id, None)
            if slot is None:
                continue  # a call that gave up (deadline) before its answer came
            if resp.status == ipc.SUCCESS:
                slot.body = resp.body
            else:
                slot.error = from_remote(resp.exception_class, resp.error_msg)
            slot.event.set()

    async def call(self, method: str, request: bytes, timeout: float) -> bytes:
        """Send one call and wait for its response body, within `timeout` seconds."""
        slot = _Slot()
        link: _Link | None = None
        call_id = -1
        try:
            with trio.fail_after(timeout):
                link = await self._connected()
                call_id = next(self._call_ids) & 0x7FFFFFFF
                frame = ipc.encode_call(call_id, self.client_id, method, request, self.protocol)
                link.pending[call_id] = slot
                async with self._send_lock:
                    try:
                        await link.stream.send_all(frame)
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
                        link.fail_all(ConnectionLost(f"sending to {self.address} failed: {e}"))
                    except BaseException:
                        # Cancelled mid-frame: the stream is no longer in sync.
                        link.fail_all(ConnectionLost(f"call to {self.address} cancelled mid-send"))
                        await trio.aclose_forcefully(link.stream)
                        raise
                await slot.event.wait()
        except trio.TooSlowError:
            raise RpcTimeout(f"{method} on {self.address}: no answer within {timeout:g}s") from None
        finally:
            if link is not None:
                link.pending.pop(call_id, None)
        if slot.error is not None:
            raise slot.error
        assert slot.body is not None
        return slot.body

    async def aclose(self) -> None:
        self._closed = True
        link, self._link = self._link, None
        if link is not None:
            link.fail_all(ConnectionLost(f"connection to {self.address} closed by the client"))
            await trio.aclose_forcefully(link.stream)
