"""SASL DIGEST-MD5, byte for byte: RFC 2831's own example, directive parsing, and fuzzing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hdfsfuse.namenode import ipc
from hdfsfuse.proto import rpc_pb2
from hdfsfuse.security import sasl

RFC_CHALLENGE = b'realm="elwood.innosoft.com",nonce="OA6MG9tEQGm2hh",qop="auth",algorithm=md5-sess,charset=utf-8'


def test_rfc2831_example_response_and_rspauth() -> None:
    client = sasl.DigestMd5Client("chris", "secret", protocol="imap", server="elwood.innosoft.com",
                                  cnonce="OA6MHXh6VqTrRk")
    d = sasl.parse_directives(client.respond(RFC_CHALLENGE))
    assert d["response"] == "d388dad90d4bbd760a152321f2143af7"
    assert d["digest-uri"] == "imap/elwood.innosoft.com" and d["nc"] == "00000001" and d["qop"] == "auth"
    client.verify(b"rspauth=ea40f60335c427b5527b84dbabcdfffd")
    with pytest.raises(sasl.SaslError, match="rspauth"):
        client.verify(b"rspauth=00000000000000000000000000000000")


def test_hadoop_token_credentials_and_digest_uri() -> None:
    user, password = sasl.token_credentials(b"\x8a\x01id", b"\x00pw")
    assert (user, password) == ("igFpZA==", "AHB3")
    client = sasl.DigestMd5Client(user, password)  # Hadoop IPC: protocol "", server "default"
    d = sasl.parse_directives(client.respond(b'realm="default",nonce="n",qop="auth",charset=utf-8,algorithm=md5-sess'))
    assert d["digest-uri"] == "/default" and d["username"] == user and d["realm"] == "default"


@pytest.mark.parametrize(
    ("challenge", "message"),
    [(b'realm="r",qop="auth",algorithm=md5-sess', "nonce"),
     (b'nonce="n",qop="auth-conf",algorithm=md5-sess', "requires RPC protection privacy"),
     (b'nonce="n",qop="auth",algorithm=md5', "algorithm"),
     (b'nonce="n', "unterminated"), (b"garbage", "malformed")],
)
def test_bad_challenges_are_clear_errors(challenge: bytes, message: str) -> None:
    with pytest.raises(sasl.SaslError, match=message):
        sasl.DigestMd5Client("u", "p").respond(challenge)


def test_directives_with_quotes_escapes_and_lists() -> None:
    d = sasl.parse_directives(b'qop="auth-int,auth-conf,auth", realm="a \\"b\\", c",maxbuf=1024 ,nonce="x",nonce="y"')
    assert d == {"qop": "auth-int,auth-conf,auth", "realm": 'a "b", c', "maxbuf": "1024", "nonce": "x"}


@given(st.binary(max_size=300))
def test_fuzz_directives_raise_only_sasl_errors(data: bytes) -> None:
    try:
        sasl.parse_directives(data)
    except (sasl.SaslError, UnicodeDecodeError):
        pass


def test_sasl_frames() -> None:
    frame = ipc.encode_sasl(rpc_pb2.RpcSaslProto(state=rpc_pb2.RpcSaslProto.NEGOTIATE))
    reader = ipc.ResponseReader()
    assert ipc.SASL_PREAMBLE == b"hrpc\x09\x00\xdf"
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header = rpc_pb2.RpcRequestHeaderProto()
    from hdfsfuse.wire import read_delimited

    body, pos = read_delimited(memoryview(frame[4:]), 0, len(frame) - 4)
    header.ParseFromString(body)
    assert header.callId == -33 and header.retryCount == -1
    msg, _ = read_delimited(memoryview(frame[4:]), pos, len(frame) - 4)
    assert rpc_pb2.RpcSaslProto.FromString(bytes(msg)).state == rpc_pb2.RpcSaslProto.NEGOTIATE
    assert reader.buffered == 0
    context = ipc.encode_context(b"c" * 16, None, ipc.DATANODE_PROTOCOL)
    _, pos = read_delimited(memoryview(context[4:]), 0, len(context) - 4)
    ctx, _ = read_delimited(memoryview(context[4:]), pos, len(context) - 4)
    parsed = rpc_pb2.IpcConnectionContextProto.FromString(bytes(ctx))
    assert not parsed.HasField("userInfo") and parsed.protocol == ipc.DATANODE_PROTOCOL
