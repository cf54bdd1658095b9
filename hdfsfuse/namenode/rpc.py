"""A Hadoop IPC connection over trio: pipelined calls on one socket, demultiplexed by callId.

Owns one TCP connection to one NameNode (or DataNode IPC port) at a time. Does I/O. The
framing lives in `hdfsfuse.namenode.ipc`; failover and retries live in `hdfsfuse.namenode.client`.

- Calls are written whole under a send lock; a reader task (owned by the caller's nursery)
  routes each response to its waiting call.
- Once connected, the socket is driven without trio's stream layer, as a DataNode's is: a send
  is tried at once and only waits when the kernel's buffer is full, and the reader waits for
  the socket and then takes what is in. A call costs its one wait for the answer, not a trio
  checkpoint for every lock, send and receive.
- Every call has a deadline. A call cancelled mid-send closes the connection, because a
  partial frame would corrupt the stream.
- EOF, a reset or a FATAL frame fails every waiting call; the next call reconnects.
- With SASL (`RpcAuth` from `hdfsfuse.security.credentials`: Kerberos, or a delegation or block token),
  the connection first authenticates (`_negotiate`, bounded by the connect timeout), then
  runs every frame through the negotiated integrity or privacy layer, if any. Blocking
  Kerberos steps run in threads. The mechanisms live in `hdfsfuse.security.sasl` and
  `hdfsfuse.security.kerberos`.
- `aclose()` is safe under cancellation.
"""

from __future__ import annotations

import itertools
import logging
import random
import socket
import uuid
from typing import Protocol

import trio

from hdfsfuse.errors import AuthenticationRequired, ConnectionLost, HdfsError, ProtocolError, RpcTimeout, from_remote
from hdfsfuse.namenode import ipc
from hdfsfuse.namenode.link import Layer, Link, Slot, encode
from hdfsfuse.proto import rpc_pb2
from hdfsfuse.security import sasl
from hdfsfuse.security.credentials import RpcAuth, canonical_hostname, expand_principal
from hdfsfuse.security.kerberos import GssapiMechanism
from hdfsfuse.wire import NEED_DATA

log = logging.getLogger(__name__)

SaslState = rpc_pb2.RpcSaslProto


class Mechanism(Protocol):
    layer: Layer | None

    def start(self) -> bytes: ...
    def evaluate(self, challenge: bytes) -> bytes: ...
    def finish(self, token: bytes) -> None: ...


class SaslRefused(AuthenticationRequired):
    """The server refused our credentials during SASL (worth one fresh attempt)."""


RECEIVE_SIZE = 65536


class StateAlignment:
    """The highest NameNode state id seen on any connection to one nameservice (observer reads).

    Sent on every call once known, so an observer never answers from a state older than what
    this client has already seen; updated from successful responses only, as Java's
    ClientGSIContext does.
    """

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: int | None = None

    def seen(self, state_id: int) -> None:
        if self.last is None or state_id > self.last:
            self.last = state_id


class RpcConnection:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        auth: RpcAuth,
        nursery: trio.Nursery,
        protocol: str = ipc.CLIENT_PROTOCOL,
        client_id: bytes | None = None,
        connect_timeout: float = 10.0,
        max_frame: int = ipc.DEFAULT_MAX_FRAME,
        alignment: StateAlignment | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.auth = auth
        self.protocol = protocol
        self.client_id = client_id or uuid.uuid4().bytes
        self.connect_timeout = connect_timeout
        self.max_frame = max_frame
        self.qop = ""  # the negotiated SASL quality of protection ("" = SIMPLE)
        self.alignment = alignment  # observer reads: the state ids shared by a nameservice's connections
        self._nursery = nursery
        self._link: Link | None = None
        self._connect_lock = trio.Lock()
        self._send_lock = trio.Lock()
        self._call_ids = itertools.count()
        self._closed = False
        self.connects = 0
        # A federation Router answers on this address (its response headers carry
        # routerFederatedState): fileIds are not unique behind it and /.reserved/.inodes
        # paths do not resolve.
        self.router = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def user(self) -> str:
        return self.auth.user

    async def _connected(self) -> Link:
        link = self._link
        if link is not None and link.dead is None and not self._closed and not self._connect_lock.locked():
            return link  # the usual case, without a checkpoint
        async with self._connect_lock:
            if self._closed:
                raise ConnectionLost(f"connection to {self.address} is closed")
            link = self._link
            if link is not None and link.dead is None:
                return link
            try:
                link = await self._dial()
            except SaslRefused as e:
                # As Java does for refused SASL (a replayed authenticator, a ticket that just
                # expired): once more, on a new connection with freshly acquired credentials.
                log.info("RPC %s: %s; retrying once with fresh credentials", self.address, e)
                await trio.sleep(random.uniform(0.05, 0.3))
                link = await self._dial()
            self._link = link
            self.connects += 1
            self._nursery.start_soon(self._reader, link)
            return link

    async def _dial(self) -> Link:
        """A new connection, authenticated, with its context sent."""
        try:
            with trio.fail_after(self.connect_timeout):
                stream = await trio.open_tcp_stream(self.host, self.port)
        except trio.TooSlowError:
            raise ConnectionLost(f"connecting to {self.address} timed out after {self.connect_timeout:g}s") from None
        except OSError as e:
            raise ConnectionLost(f"cannot connect to {self.address}: {e.strerror or e}") from None
        layer = None
        try:
            # No reply comes for the context; the first call's reply proves the handshake.
            if not self.auth.sasl:
                await stream.send_all(ipc.encode_handshake(self.client_id, self.auth.user, self.protocol))
            else:
                with trio.fail_after(self.connect_timeout):
                    user, layer = await self._negotiate(stream)
                await stream.send_all(encode(ipc.encode_context(self.client_id, user, self.protocol), layer))
        except trio.TooSlowError:
            await trio.aclose_forcefully(stream)
            raise ConnectionLost(f"SASL with {self.address} took longer than {self.connect_timeout:g}s") from None
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        # Nothing is read ahead: the server says nothing more until the first call's answer.
        return Link(socket.socket(fileno=stream.socket.detach()), layer)

    async def _negotiate(self, stream: trio.SocketStream) -> tuple[str | None, Layer | None]:
        """SASL before the context: (the user the context names, the negotiated layer)."""
        auth = self.auth
        reader = ipc.ResponseReader(self.max_frame)
        who = auth.description

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
                why = resp.first_line or resp.exception_class or "no reason given"
                raise SaslRefused(f"{self.address} refused authentication with {who}: {why}")
            if resp.call_id != ipc.SASL_CALL_ID:
                raise ProtocolError(f"{self.address} answered SASL with call id {resp.call_id}")
            return rpc_pb2.RpcSaslProto.FromString(resp.body)

        async def send(state: int, token: bytes | None = None, auths: list[rpc_pb2.RpcSaslProto.SaslAuth] = ()) -> None:
            message = rpc_pb2.RpcSaslProto(state=state, auths=auths)
            if token is not None:
                message.token = token  # present even when empty: the server requires the field
            await stream.send_all(ipc.encode_sasl(message))

        await stream.send_all(ipc.SASL_PREAMBLE)
        await send(SaslState.NEGOTIATE)
        offer = await receive()
        if offer.state == SaslState.SUCCESS:  # the server only does SIMPLE: it switched
            return auth.user, None
        if offer.state != SaslState.NEGOTIATE:
            raise ProtocolError(f"{self.address} answered NEGOTIATE with SASL state {offer.state}")
        chosen = self._choose(offer.auths)
        echo = rpc_pb2.RpcSaslProto.SaslAuth()
        echo.CopyFrom(chosen)
        echo.ClearField("challenge")  # echoed exactly as offered, minus the challenge
        if chosen.method == "SIMPLE":
            await send(SaslState.INITIATE, auths=[echo])  # the server switches without a reply
            return auth.user, None
        mechanism: Mechanism
        if chosen.method == "TOKEN":
            assert auth.token is not None
            mechanism = sasl.DigestMechanism(
                auth.token.identifier, auth.token.password, protocol=chosen.protocol, server=chosen.serverId,
                challenge=chosen.challenge, peer=self.address, wanted=auth.qops,
            )
            first = mechanism.start()
        else:
            assert auth.kerberos is not None
            target = await self._service_principal(chosen)
            gss = GssapiMechanism(auth.kerberos, target, auth.qops, self.address)
            first = await trio.to_thread.run_sync(gss.start, abandon_on_cancel=True)
            mechanism = gss
        await send(SaslState.INITIATE, first, [echo])
        while True:
            reply = await receive()
            if reply.state == SaslState.SUCCESS:
                mechanism.finish(reply.token)
                break
            if reply.state != SaslState.CHALLENGE:
                raise ProtocolError(f"{self.address} sent SASL state {reply.state} during {chosen.method}")
            await send(SaslState.RESPONSE, mechanism.evaluate(reply.token))
        if reader.buffered:
            raise ProtocolError(f"{self.address} sent data after SASL success")
        self.qop = getattr(mechanism, "qop", "") or "auth"
        # Kerberos: the principal names us, unless we act for someone (a proxy user).
        # Tokens name their owner. Either way a differing name would be refused.
        user = auth.user if chosen.method == "KERBEROS" and auth.proxy else None
        return user, mechanism.layer

    def _choose(self, offered: list[rpc_pb2.RpcSaslProto.SaslAuth]) -> rpc_pb2.RpcSaslProto.SaslAuth:
        """The first method, in the server's order, that we hold credentials for."""
        auth = self.auth
        for entry in offered:
            if entry.method == "TOKEN" and entry.mechanism == "DIGEST-MD5" and auth.token is not None:
                return entry
            if entry.method == "KERBEROS" and entry.mechanism == "GSSAPI" and auth.kerberos is not None:
                return entry
            if entry.method == "SIMPLE" and auth.simple_fallback:
                return entry
        methods = ", ".join(f"{a.method}/{a.mechanism}" for a in offered) or "nothing"
        if any(a.method == "SIMPLE" for a in offered):
            raise AuthenticationRequired(
                f"{self.address} asks to fall back to SIMPLE authentication, which "
                "ipc.client.fallback-to-simple-auth-allowed does not allow"
            )
        raise AuthenticationRequired(f"{self.address} accepts {methods}; hdfsfuse holds {auth.description}")

    async def _service_principal(self, chosen: rpc_pb2.RpcSaslProto.SaslAuth) -> str:
        """The principal to ask the KDC for: the configured one (with _HOST filled in), else
        the one the server advertises (protocol/serverId in the default realm)."""
        template = self.auth.principal
        if not template:
            return f"{chosen.protocol}/{chosen.serverId}"
        if "_HOST" not in template:
            return template
        host = await trio.to_thread.run_sync(canonical_hostname, self.host, abandon_on_cancel=True)
        return expand_principal(template, host)

    async def _reader(self, link: Link) -> None:
        reader: ipc.ResponseReader | ipc.UnwrappingReader = (
            ipc.ResponseReader(self.max_frame) if link.layer is None
            else ipc.UnwrappingReader(link.layer.unwrap, self.max_frame)
        )
        error: HdfsError = ConnectionLost(f"connection to {self.address} closed")
        try:
            while True:
                await trio.lowlevel.wait_readable(link.sock)
                while True:  # what is in, then wait again
                    try:
                        data = link.sock.recv(RECEIVE_SIZE)
                    except BlockingIOError:
                        break
                    if not data:
                        error = ConnectionLost(f"{self.address} closed the connection")
                        return
                    reader.feed(data)
                    fatal = self._dispatch(link, reader)
                    if fatal is not None:
                        error = fatal
                        return
                    if len(data) < RECEIVE_SIZE:
                        break
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
            link.close()

    def _dispatch(self, link: Link, reader: ipc.ResponseReader | ipc.UnwrappingReader) -> HdfsError | None:
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
            if resp.from_router:
                self.router = True
            if resp.status == ipc.SUCCESS:
                slot.body = resp.body
                if self.alignment is not None and resp.state_id is not None:
                    self.alignment.seen(resp.state_id)
            else:
                slot.error = from_remote(resp.exception_class, resp.error_msg)
            slot.event.set()

    async def call(self, method: str, request: bytes, timeout: float) -> bytes:
        """Send one call and wait for its response body, within `timeout` seconds."""
        slot = Slot()
        link: Link | None = None
        call_id = -1
        try:  # a bare cancel scope: this is every NameNode call's path
            with trio.CancelScope(deadline=trio.current_time() + timeout) as scope:
                link = await self._connected()
                call_id = next(self._call_ids) & 0x7FFFFFFF
                state = None if self.alignment is None else self.alignment.last
                frame = ipc.encode_call(call_id, self.client_id, method, request, self.protocol, state_id=state)
                link.pending[call_id] = slot
                await self._send(link, frame)
                await slot.event.wait()
        finally:
            if link is not None:
                link.pending.pop(call_id, None)
        if scope.cancelled_caught:
            raise RpcTimeout(f"{method} on {self.address}: no answer within {timeout:g}s")
        if slot.error is not None:
            raise slot.error
        assert slot.body is not None
        return slot.body

    async def _send(self, link: Link, frame: bytes) -> None:
        """Write one call whole, in order with the others: at once when no other call is part
        way through a send (no checkpoint), else after it. A failure fails the link's calls."""
        lock = self._send_lock
        if lock.locked():
            await lock.acquire()
        else:
            lock.acquire_nowait()
        try:
            # Wrapped under the lock: a layer's sequence numbers and cipher state must reach
            # the server in the order they were used.
            data = link.encode(frame)
            sent = link.send_now(data)
            if sent < len(data):
                await link.send_all(memoryview(data)[sent:])
        except (OSError, trio.ClosedResourceError) as e:
            link.fail_all(ConnectionLost(f"sending to {self.address} failed: {e}"))
        except BaseException:
            # Cancelled mid-frame: the stream is no longer in sync.
            link.fail_all(ConnectionLost(f"call to {self.address} cancelled mid-send"))
            link.close()
            raise
        finally:
            lock.release()

    async def close_link(self) -> None:
        """Close the socket, but stay usable: the next call connects (and authenticates) again."""
        link, self._link = self._link, None
        if link is not None:
            link.fail_all(ConnectionLost(f"connection to {self.address} closed while idle"))
            link.close()
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        self._closed = True
        link, self._link = self._link, None
        if link is not None:
            link.fail_all(ConnectionLost(f"connection to {self.address} closed by the client"))
            link.close()
        await trio.lowlevel.checkpoint()
