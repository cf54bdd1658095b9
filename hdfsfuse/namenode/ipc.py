"""Hadoop IPC framing (the NameNode and DataNode RPC protocol). Pure code, no I/O.

Owns the connection preamble, the connection context, call encoding and the response parser.
Bytes in, events out; the trio adapter is `hdfsfuse.namenode.rpc`.

Connection start (SIMPLE auth), sent once:

    +------+------+-------+------+
    | hrpc | 0x09 | 0x00  | 0x00 |   magic, IPC version 9, service class 0, auth NONE
    +------+------+-------+------+

Every frame after it, in both directions:

    +-----------------+---------------------------+-------------------------------+
    | u32 BE TOTAL    | varint len + RPC header   | varint len + payload(s) ...   |
    +-----------------+---------------------------+-------------------------------+
      TOTAL counts everything after itself.

    request:  RpcRequestHeaderProto, then IpcConnectionContextProto (callId -3), or
              RequestHeaderProto + the method's request message (callId >= 0)
    response: RpcResponseHeaderProto, then the response message on SUCCESS only

SASL authentication (Kerberos, or a delegation or block token) puts an exchange before the
context: the preamble ends in 0xDF instead of 0x00, and RpcSaslProto frames (callId -33) go
both ways: NEGOTIATE ->, <- NEGOTIATE (the server's methods), INITIATE ->, then CHALLENGE /
RESPONSE rounds until <- SUCCESS. The mechanisms are in `hdfsfuse.security.sasl` and `hdfsfuse.security.kerberos`.

With an integrity or privacy layer (hadoop.rpc.protection), every later byte travels inside
WRAP frames, both ways. The client's plaintext is the ordinary frame stream, cut anywhere;
each server WRAP token is one whole response frame:

    +----------+-------------------------+--------------------------------------------+
    | u32 LEN  | header (callId -33)     | RpcSaslProto{state WRAP, token=wrap(bytes)} |
    +----------+-------------------------+--------------------------------------------+
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable

from google.protobuf.message import DecodeError

from hdfsfuse.errors import ProtocolError
from hdfsfuse.proto import rpc_pb2
from hdfsfuse.wire import NEED_DATA, NeedData, _NeedDataType, delimited, read_delimited

PREAMBLE = b"hrpc\x09\x00\x00"
SASL_PREAMBLE = b"hrpc\x09\x00\xdf"
SASL_CALL_ID = -33
CLIENT_PROTOCOL = "org.apache.hadoop.hdfs.protocol.ClientProtocol"
DATANODE_PROTOCOL = "org.apache.hadoop.hdfs.protocol.ClientDatanodeProtocol"
PROTOCOL_VERSION = 1
CONNECTION_CONTEXT_CALL_ID = -3
DEFAULT_MAX_FRAME = 64 * 1024 * 1024
WRAP_CHUNK = 60000  # plaintext bytes per outgoing WRAP frame: under any peer's 64 KiB buffer
WRAP_OVERHEAD = 64 * 1024  # what a layer may add to a response frame

SUCCESS = rpc_pb2.RpcResponseHeaderProto.SUCCESS
ERROR = rpc_pb2.RpcResponseHeaderProto.ERROR
FATAL = rpc_pb2.RpcResponseHeaderProto.FATAL

_U32 = struct.Struct(">I")


def _request_header(call_id: int, client_id: bytes, retry_count: int, state_id: int | None = None) -> bytes:
    header = rpc_pb2.RpcRequestHeaderProto(
        rpcKind=rpc_pb2.RPC_PROTOCOL_BUFFER,
        rpcOp=rpc_pb2.RpcRequestHeaderProto.RPC_FINAL_PACKET,
        callId=call_id,
        clientId=client_id,
        retryCount=retry_count,
    )
    if state_id is not None:
        header.stateId = state_id
    return header.SerializeToString()


def _frame(*parts: bytes) -> bytes:
    body = b"".join(delimited(p) for p in parts)
    return _U32.pack(len(body)) + body


def encode_handshake(client_id: bytes, user: str, protocol: str = CLIENT_PROTOCOL) -> bytes:
    """The preamble plus the connection context: everything a SIMPLE client sends first."""
    return PREAMBLE + encode_context(client_id, user, protocol)


def encode_context(client_id: bytes, user: str | None, protocol: str = CLIENT_PROTOCOL) -> bytes:
    """The connection context frame (no user after token authentication)."""
    context = rpc_pb2.IpcConnectionContextProto(protocol=protocol)
    if user is not None:
        context.userInfo.effectiveUser = user
    return _frame(_request_header(CONNECTION_CONTEXT_CALL_ID, client_id, -1), context.SerializeToString())


def encode_sasl(message: rpc_pb2.RpcSaslProto) -> bytes:
    """One SASL frame (callId -33)."""
    return _frame(_request_header(SASL_CALL_ID, b"", -1), message.SerializeToString())


def encode_wrapped(data: bytes, wrap: Callable[[bytes], bytes]) -> bytes:
    """Outgoing bytes through a SASL layer, as WRAP frames of at most WRAP_CHUNK plaintext bytes."""
    return b"".join(
        encode_sasl(rpc_pb2.RpcSaslProto(state=rpc_pb2.RpcSaslProto.WRAP, token=wrap(data[i : i + WRAP_CHUNK])))
        for i in range(0, len(data), WRAP_CHUNK)
    )


def encode_call(
    call_id: int, client_id: bytes, method: str, request: bytes, protocol: str = CLIENT_PROTOCOL,
    retry_count: int = 0, state_id: int | None = None,
) -> bytes:
    """One call frame: RPC header, method header, serialized request message.

    `state_id`: the client's last seen NameNode state (observer reads); an observer answers only
    once it has applied that transaction."""
    if call_id < 0:
        raise ValueError("normal calls use non-negative call ids")
    method_header = rpc_pb2.RequestHeaderProto(
        methodName=method, declaringClassProtocolName=protocol, clientProtocolVersion=PROTOCOL_VERSION
    ).SerializeToString()
    return _frame(_request_header(call_id, client_id, retry_count, state_id), method_header, request)


@dataclasses.dataclass(frozen=True, slots=True)
class RpcResponse:
    """One parsed response frame."""

    call_id: int
    status: int
    body: bytes | None
    exception_class: str = ""
    error_msg: str = ""
    error_detail: int = 0
    state_id: int | None = None  # the server's state (with dfs.namenode.state.context.enabled)
    from_router: bool = False  # the header carries routerFederatedState: a federation Router answered

    @property
    def fatal(self) -> bool:
        return self.status == FATAL

    @property
    def first_line(self) -> str:
        """The Java message without its stack trace."""
        return self.error_msg.strip().splitlines()[0] if self.error_msg.strip() else ""


class ResponseReader:
    """Incremental response parser: `feed()` bytes, then call `next_response()` until NEED_DATA.

    A frame longer than `max_frame` is refused from its 4-byte length, before any allocation.
    After a ProtocolError the stream is unusable and the connection must be closed.
    """

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max_frame = max_frame

    def feed(self, data: bytes) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def next_response(self) -> RpcResponse | _NeedDataType:
        if len(self._buf) < 4:
            return NEED_DATA
        (total,) = _U32.unpack_from(self._buf, 0)
        if total > self._max_frame:
            raise ProtocolError(
                f"RPC response frame of {total} bytes exceeds the {self._max_frame}-byte limit"
            )
        if len(self._buf) < 4 + total:
            return NEED_DATA
        frame = memoryview(self._buf)[4 : 4 + total]
        try:
            response = _parse_frame(frame)
        except NeedData:
            raise ProtocolError("RPC response frame is truncated") from None
        finally:
            frame.release()
        del self._buf[: 4 + total]
        return response


def _parse_frame(frame: memoryview) -> RpcResponse:
    header_bytes, pos = read_delimited(frame, 0, len(frame))
    header = rpc_pb2.RpcResponseHeaderProto()
    try:
        header.ParseFromString(header_bytes)
    except DecodeError as e:
        raise ProtocolError(f"bad RPC response header: {e}") from None
    if not header.HasField("callId") or not header.HasField("status"):
        raise ProtocolError("RPC response header lacks callId or status")
    call_id = header.callId
    if call_id >= 2**31:  # Java writes negative ints into this uint32 as 5-byte varints.
        call_id -= 2**32
    body: bytes | None = None
    if header.status == SUCCESS:
        body, pos = read_delimited(frame, pos, len(frame))
    if pos != len(frame):
        raise ProtocolError(f"{len(frame) - pos} unexpected bytes after the RPC response")
    return RpcResponse(
        call_id=call_id,
        status=header.status,
        body=body,
        exception_class=header.exceptionClassName,
        error_msg=header.errorMsg,
        error_detail=header.errorDetail,
        state_id=header.stateId if header.HasField("stateId") else None,
        from_router=header.HasField("routerFederatedState"),
    )


class UnwrappingReader:
    """Responses behind a SASL layer: each frame is a WRAP whose token unwraps to response bytes.

    A plain error frame (the server failing before it could wrap) passes through as it is.
    """

    def __init__(self, unwrap: Callable[[bytes], bytes], max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._outer = ResponseReader(max_frame + WRAP_OVERHEAD)
        self._inner = ResponseReader(max_frame)
        self._unwrap = unwrap

    def feed(self, data: bytes) -> None:
        self._outer.feed(data)

    @property
    def buffered(self) -> int:
        return self._outer.buffered + self._inner.buffered

    def next_response(self) -> RpcResponse | _NeedDataType:
        while True:
            response = self._inner.next_response()
            if response is not NEED_DATA:
                return response
            outer = self._outer.next_response()
            if outer is NEED_DATA:
                return NEED_DATA
            assert isinstance(outer, RpcResponse)
            if outer.status != SUCCESS:
                return outer
            if outer.call_id != SASL_CALL_ID or outer.body is None:
                raise ProtocolError(f"an unwrapped response (call id {outer.call_id}) under a SASL layer")
            try:
                message = rpc_pb2.RpcSaslProto.FromString(outer.body)
            except DecodeError as e:
                raise ProtocolError(f"bad SASL frame: {e}") from None
            if message.state != rpc_pb2.RpcSaslProto.WRAP:
                raise ProtocolError(f"SASL state {message.state} after authentication (expected WRAP)")
            self._inner.feed(self._unwrap(message.token))
