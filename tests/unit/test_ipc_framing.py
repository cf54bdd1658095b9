"""Hadoop IPC framing, sans I/O: encoding, the response parser byte by byte, and fuzzing."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hdfsfuse.errors import ProtocolError
from hdfsfuse.namenode import ipc
from hdfsfuse.proto import rpc_pb2
from hdfsfuse.wire import NEED_DATA, decode_varint, delimited, encode_varint, read_delimited

ZERO_ID = bytes(16)


def response_frame(call_id: int, status: int = ipc.SUCCESS, body: bytes | None = b"", *,
                   exception_class: str = "", error_msg: str = "", raw_call_id: int | None = None) -> bytes:
    header = rpc_pb2.RpcResponseHeaderProto(
        callId=raw_call_id if raw_call_id is not None else call_id & 0xFFFFFFFF, status=status,
        serverIpcVersionNum=9,
    )
    if exception_class:
        header.exceptionClassName = exception_class
        header.errorMsg = error_msg
        header.errorDetail = rpc_pb2.RpcResponseHeaderProto.ERROR_APPLICATION
    payload = delimited(header.SerializeToString())
    if body is not None:
        payload += delimited(body)
    return struct.pack(">I", len(payload)) + payload


def parse_all(reader: ipc.ResponseReader) -> list[ipc.RpcResponse]:
    out = []
    while True:
        r = reader.next_response()
        if r is NEED_DATA:
            return out
        assert isinstance(r, ipc.RpcResponse)
        out.append(r)


def test_varint_round_trip_and_limits() -> None:
    for v in (0, 1, 127, 128, 300, 2**31 - 1, 2**32 - 1, 2**63):
        enc = encode_varint(v)
        assert decode_varint(enc, 0) == (v, len(enc))
    with pytest.raises(ProtocolError):
        decode_varint(b"\xff" * 6, 0, max_bytes=5)
    with pytest.raises(ValueError):
        encode_varint(-1)


def test_handshake_bytes_match_the_wire_layout() -> None:
    data = ipc.encode_handshake(ZERO_ID, "alice")
    assert data[:7] == b"hrpc\x09\x00\x00"
    (total,) = struct.unpack(">I", data[7:11])
    assert total == len(data) - 11
    header, pos = read_delimited(data, 11, 1000)
    # The reference layout for a connection-context header with a zero clientId.
    assert header == b"\x08\x02\x10\x00\x18\x05\x22\x10" + ZERO_ID + b"\x28\x01"
    context_bytes, end = read_delimited(data, pos, 1000)
    assert end == len(data)
    ctx = rpc_pb2.IpcConnectionContextProto.FromString(context_bytes)
    assert ctx.userInfo.effectiveUser == "alice" and ctx.protocol == ipc.CLIENT_PROTOCOL


def test_encode_call_layout() -> None:
    frame = ipc.encode_call(7, ZERO_ID, "getFileInfo", b"\x0a\x01/")
    (total,) = struct.unpack(">I", frame[:4])
    assert total == len(frame) - 4
    h, pos = read_delimited(frame, 4, 1000)
    header = rpc_pb2.RpcRequestHeaderProto.FromString(h)
    assert (header.rpcKind, header.rpcOp, header.callId, header.retryCount) == (2, 0, 7, 0)
    m, pos = read_delimited(frame, pos, 1000)
    method = rpc_pb2.RequestHeaderProto.FromString(m)
    assert method.methodName == "getFileInfo"
    assert method.declaringClassProtocolName == ipc.CLIENT_PROTOCOL
    assert method.clientProtocolVersion == 1
    assert read_delimited(frame, pos, 1000) == (b"\x0a\x01/", len(frame))
    with pytest.raises(ValueError):
        ipc.encode_call(-1, ZERO_ID, "x", b"")


def test_success_response_whole() -> None:
    reader = ipc.ResponseReader()
    reader.feed(response_frame(5, body=b"\x0a\x00"))
    [r] = parse_all(reader)
    assert (r.call_id, r.status, r.body) == (5, ipc.SUCCESS, b"\x0a\x00")
    assert reader.buffered == 0


def test_empty_success_body_is_one_zero_byte() -> None:
    frame = response_frame(1, body=b"")
    assert frame.endswith(b"\x00")
    reader = ipc.ResponseReader()
    reader.feed(frame)
    assert parse_all(reader)[0].body == b""


def test_response_byte_by_byte_with_trailing_bytes() -> None:
    frames = response_frame(1, body=b"abc") + response_frame(2, body=b"") + response_frame(3, body=b"z")
    trailing = response_frame(4, body=b"never complete")[:-3]
    reader = ipc.ResponseReader()
    seen = []
    for i in range(len(frames + trailing)):
        reader.feed((frames + trailing)[i : i + 1])
        seen += parse_all(reader)
    assert [(r.call_id, r.body) for r in seen] == [(1, b"abc"), (2, b""), (3, b"z")]
    assert reader.buffered == len(trailing)
    assert reader.next_response() is NEED_DATA


def test_negative_call_id_quirk() -> None:
    reader = ipc.ResponseReader()
    # Java writes -1 into the uint32 field as a 5-byte varint: 4294967295.
    reader.feed(response_frame(0, ipc.FATAL, None, raw_call_id=4294967295,
                               exception_class="org.apache.hadoop.security.AccessControlException",
                               error_msg="SIMPLE authentication is not enabled.  Available:[TOKEN, KERBEROS]"))
    reader.feed(response_frame(0, raw_call_id=4294967263, body=b""))  # -33
    r1, r2 = parse_all(reader)
    assert r1.call_id == -1 and r1.fatal and r1.body is None
    assert r1.first_line.startswith("SIMPLE authentication is not enabled")
    assert r2.call_id == -33


def test_error_frame_has_no_body() -> None:
    reader = ipc.ResponseReader()
    reader.feed(response_frame(9, ipc.ERROR, None, exception_class="java.io.FileNotFoundException",
                               error_msg="File does not exist: /x\n\tat org.apache..."))
    [r] = parse_all(reader)
    assert r.status == ipc.ERROR and r.body is None
    assert r.exception_class == "java.io.FileNotFoundException"
    assert r.first_line == "File does not exist: /x"


def test_error_frame_with_extra_bytes_is_a_protocol_error() -> None:
    frame = response_frame(9, ipc.ERROR, b"junk", exception_class="x.Y", error_msg="m")
    reader = ipc.ResponseReader()
    reader.feed(frame)
    with pytest.raises(ProtocolError, match="unexpected bytes"):
        reader.next_response()


def test_oversized_frame_refused_from_its_length() -> None:
    reader = ipc.ResponseReader(max_frame=1024)
    reader.feed(struct.pack(">I", 1025))
    with pytest.raises(ProtocolError, match="exceeds"):
        reader.next_response()
    huge = ipc.ResponseReader()
    huge.feed(b"\xff\xff\xff\xff")
    with pytest.raises(ProtocolError):
        huge.next_response()


def test_body_length_beyond_frame_is_a_protocol_error() -> None:
    header = delimited(rpc_pb2.RpcResponseHeaderProto(callId=1, status=0).SerializeToString())
    payload = header + encode_varint(100) + b"short"
    reader = ipc.ResponseReader()
    reader.feed(struct.pack(">I", len(payload)) + payload)
    with pytest.raises(ProtocolError):
        reader.next_response()


def test_header_without_status_is_a_protocol_error() -> None:
    payload = delimited(rpc_pb2.RpcResponseHeaderProto(callId=1).SerializeToString())
    reader = ipc.ResponseReader()
    reader.feed(struct.pack(">I", len(payload)) + payload)
    with pytest.raises(ProtocolError, match="lacks"):
        reader.next_response()


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=512))
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    reader = ipc.ResponseReader(max_frame=4096)
    reader.feed(data)
    try:
        parse_all(reader)
    except ProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.binary(max_size=64), st.integers(0, 200))
def test_fuzz_length_fields_and_truncation(total: int, rest: bytes, cut: int) -> None:
    reader = ipc.ResponseReader(max_frame=1 << 20)
    data = struct.pack(">I", total) + rest
    reader.feed(data[: max(0, len(data) - cut)])
    try:
        parse_all(reader)
    except ProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**31 - 1), st.binary(max_size=100)), max_size=5),
       st.integers(1, 17))
def test_fuzz_valid_frames_in_random_chunks(calls: list[tuple[int, bytes]], chunk: int) -> None:
    stream = b"".join(response_frame(cid, body=body) for cid, body in calls)
    reader = ipc.ResponseReader()
    seen: list[ipc.RpcResponse] = []
    for i in range(0, len(stream), chunk):
        reader.feed(stream[i : i + chunk])
        seen += parse_all(reader)
    assert [(r.call_id, r.body) for r in seen] == calls
