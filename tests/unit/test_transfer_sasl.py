"""The DataNode SASL handshake and its layers, byte by byte (the real DataNodes are in
test_data_transfer_security.py): when to negotiate, the messages, every refusal, framing."""

from __future__ import annotations

import base64
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hdfsfuse.errors import HdfsError, InvalidBlockToken, ProtocolError
from hdfsfuse.proto import datatransfer_pb2, hdfs_pb2, rpc_pb2
from hdfsfuse.security import sasl, transfer, transfer_sasl
from hdfsfuse.wire import delimited, read_delimited

Message = datatransfer_pb2.DataTransferEncryptorMessageProto
CHALLENGE = (b'realm="0",nonce="bm9uY2Vub25jZW5vbmNlbm9uY2Vub25jZW5vbmNl",qop="auth-conf,auth-int,auth",'
             b'charset=utf-8,cipher="3des,rc4,des,rc4-56,rc4-40",algorithm=md5-sess')
TOKEN = rpc_pb2.TokenProto(identifier=b"\x8a\x01ident", password=b"p" * 20, kind="HDFS_BLOCK_TOKEN")


@pytest.mark.parametrize(("lifetime", "renewed_before_expiry"), [
    (36_000.0, 60.0),  # Hadoop's default 600 minutes: a minute early
    (600.0, 60.0),
    (60.0, 6.0),  # dfs.block.access.token.lifetime=1: 90% into its life, not at once
    (0.0, 0.0),  # already expired when it came: fetched again on the next handshake
])
def test_data_encryption_key_renewal_time(lifetime: float, renewed_before_expiry: float) -> None:
    fetched_at = 1_700_000_000.0
    expiry_ms = int((fetched_at + lifetime) * 1000)
    # Seconds after the fetch (an approx of epoch seconds would allow some 1,700 s of slack).
    after_fetch = transfer.renewal_time(fetched_at, expiry_ms) - fetched_at
    assert after_fetch == pytest.approx(lifetime - renewed_before_expiry, abs=1e-3)


@pytest.mark.parametrize(("kerberos", "encrypt", "protection", "port", "kind"), [
    (True, True, "", 50010, "encrypted"),  # encryption first, even with no protection set
    (False, True, "", 50010, "encrypted"),  # and even on a SIMPLE cluster
    (False, False, "privacy", 50010, ""),  # security off: no SASL, whatever the protection says
    (True, False, "privacy", 1004, ""),  # a privileged port is the DataNode's proof
    (True, False, "integrity", 1024, "general"),
    (True, False, "", 50010, ""),  # unset
    (True, False, "  ", 50010, ""),  # empty counts as unset, as in Java
])
def test_when_to_negotiate(kerberos: bool, encrypt: bool, protection: str, port: int, kind: str) -> None:
    got = transfer_sasl.handshake_kind(kerberos=kerberos, encrypt=encrypt, protection=protection, xfer_port=port)
    assert got == kind


def test_encryption_username_uses_a_signed_key_id() -> None:
    key = hdfs_pb2.DataEncryptionKeyProto(keyId=2**32 - 5, blockPoolId="BP-1", nonce=b"\x01" * 8)
    nonce = base64.b64encode(b"\x01" * 8).decode()
    assert transfer_sasl.encryption_username(key) == f"-5 BP-1 {nonce}"
    key.keyId = 1339729800
    assert transfer_sasl.encryption_username(key).startswith("1339729800 BP-1 ")


def _general(protection: str = "privacy", suites: str = "") -> transfer_sasl.DataTransferSaslClient:
    return transfer_sasl.DataTransferSaslClient.general(TOKEN, protection, suites, "127.0.0.1:9866")


def _parse(reply: bytes) -> Message:
    body, end = read_delimited(reply, 0, len(reply))
    assert end == len(reply)
    return Message.FromString(body)


def _server(**fields: object) -> bytes:
    return delimited(Message(**fields).SerializeToString())  # type: ignore[arg-type]


def test_the_client_messages() -> None:
    client = _general("privacy", "AES/CTR/NoPadding")
    assert client.start() == bytes.fromhex("deadbeef") + b"\x04\x08\x00\x12\x00"
    reply = client.receive(_server(status=Message.SUCCESS, payload=CHALLENGE))
    assert reply is not None
    msg = _parse(reply)
    d = sasl.parse_directives(msg.payload)
    assert d["digest-uri"] == "hdfs/0" and d["realm"] == "0" and d["qop"] == "auth-conf" and d["cipher"] == "3des"
    assert d["username"] == base64.b64encode(TOKEN.identifier).decode()
    assert [o.suite for o in msg.cipherOption] == [hdfs_pb2.AES_CTR_NOPADDING]
    for protection, suites in [("integrity", "AES/CTR/NoPadding"), ("privacy", "")]:
        reply = _general(protection, suites).receive(_server(status=0, payload=CHALLENGE))
        assert reply is not None
        # AES is offered only for auth-conf, and only when the cipher suites name it.
        assert not _parse(reply).cipherOption


def test_messages_may_arrive_in_pieces() -> None:
    client = _general()
    wire = _server(status=Message.SUCCESS, payload=CHALLENGE)
    assert all(client.receive(wire[i : i + 1]) is None for i in range(len(wire) - 1))
    assert client.receive(wire[-1:]) is not None


@pytest.mark.parametrize(("fields", "error", "text"), [
    ({"status": Message.ERROR_UNKNOWN_KEY, "message": "Can't re-compute encryption key"},
     transfer_sasl.UnknownEncryptionKey, "does not know the data-encryption key"),
    ({"status": Message.ERROR, "accessTokenError": True, "message": "Block token ... is expired."},
     InvalidBlockToken, "refused the block token"),
    ({"status": Message.ERROR, "message": "DIGEST-MD5: digest response format violation."},
     transfer_sasl.DataTransferSaslError, r"dfs\.data\.transfer\.protection=privacy"),
])
def test_refusals_are_typed(fields: dict[str, object], error: type[Exception], text: str) -> None:
    client = _general()
    with pytest.raises(error, match=text):
        client.receive(_server(**fields))


def test_a_wrong_rspauth_is_refused() -> None:
    client = _general()
    client.receive(_server(status=0, payload=CHALLENGE))
    with pytest.raises(sasl.SaslError, match="rspauth"):
        client.receive(_server(status=0, payload=b"rspauth=" + b"0" * 32))


def test_qop_the_datanode_does_not_offer_names_the_setting() -> None:
    client = _general("integrity")
    only_privacy = CHALLENGE.replace(b'qop="auth-conf,auth-int,auth"', b'qop="auth-conf"')
    with pytest.raises(transfer_sasl.DataTransferSaslError,
                       match=r"requires protection privacy, but dfs\.data\.transfer\.protection here is integrity"):
        client.receive(_server(status=0, payload=only_privacy))


@given(st.binary(max_size=200))
def test_fuzz_handshake_raises_only_typed_errors(data: bytes) -> None:
    try:
        _general().receive(data)
    except (ProtocolError, HdfsError, UnicodeDecodeError):
        pass


def _digest_pair(cipher: str) -> tuple[transfer_sasl.DigestFramedLayer, transfer_sasl.DigestFramedLayer]:
    ha1 = bytes(range(16))
    return (transfer_sasl.DigestFramedLayer(sasl.DigestLayer(ha1, cipher)),
            transfer_sasl.DigestFramedLayer(sasl.DigestLayer(ha1, cipher, server=True)))


@pytest.mark.parametrize("cipher", ["", "3des", "rc4"])
@given(chunks=st.lists(st.binary(min_size=1, max_size=500), min_size=1, max_size=5), cut=st.integers(1, 97))
def test_digest_frames_survive_any_cut(cipher: str, chunks: list[bytes], cut: int) -> None:
    client, server = _digest_pair(cipher)
    wire = b"".join(server.seal(c) for c in chunks)
    got = b"".join(client.open(wire[i : i + cut]) for i in range(0, len(wire), cut))
    assert got == b"".join(chunks)
    assert server.open(client.seal(b"status")) == b"status"


def test_a_huge_digest_frame_is_refused() -> None:
    client, _ = _digest_pair("")
    with pytest.raises(ProtocolError, match="exceeds"):
        client.open(struct.pack(">I", transfer_sasl.MAX_FRAME + 1))


@given(st.lists(st.binary(max_size=300), max_size=6))
def test_aes_ctr_is_one_stream_per_direction(pieces: list[bytes]) -> None:
    k_in, iv_in, k_out, iv_out = b"i" * 16, b"\x00" * 15 + b"\xff", b"o" * 32, b"\xff" * 16  # carries across 2**128
    client = transfer_sasl.AesCtrLayer(k_in, iv_in, k_out, iv_out)
    datanode = transfer_sasl.AesCtrLayer(k_out, iv_out, k_in, iv_in)  # the DataNode's view: in and out swapped
    sealed = b"".join(client.seal(p) for p in pieces)
    assert datanode.open(sealed) == b"".join(pieces)
    assert client.open(datanode.seal(b"packet")) == b"packet"


@given(st.lists(st.binary(max_size=300), max_size=6), st.integers(0, 40))
def test_aes_ctr_opens_into_a_buffer_as_it_opens_into_bytes(pieces: list[bytes], extra: int) -> None:
    keys = b"o" * 32, b"\x00" * 15 + b"\xfe", b"i" * 16, b"\x07" * 16
    datanode = transfer_sasl.AesCtrLayer(*keys)
    into, to_bytes = transfer_sasl.AesCtrLayer(*keys[2:], *keys[:2]), transfer_sasl.AesCtrLayer(*keys[2:], *keys[:2])
    for piece in pieces:
        sealed = datanode.seal(piece)
        out = bytearray(b"\xaa" * (len(sealed) + into.open_into_slack + extra))
        n = into.open_into(memoryview(sealed), memoryview(out))
        assert n == len(piece) and bytes(out[:n]) == piece == to_bytes.open(sealed)
        assert out[n:] == b"\xaa" * (len(out) - n)  # nothing written past the plaintext


def test_only_a_stream_cipher_layer_opens_into_a_buffer() -> None:
    client, _ = _digest_pair("3des")
    assert client.open_into_slack is None
    assert transfer_sasl.AesCtrLayer(b"k" * 16, b"\x00" * 16, b"k" * 16, b"\x00" * 16).open_into_slack == 15
