"""The pure parts of secure-cluster support, byte by byte: tokens, token files, SASL layers,
GSSAPI layer choice, WRAP framing, principals, keytabs and options."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hdfsfuse.conf.hadoop import ClusterSettings
from hdfsfuse.conf.mount_options import parse_options
from hdfsfuse.errors import ConfigError, ProtocolError
from hdfsfuse.namenode import ipc
from hdfsfuse.proto import rpc_pb2
from hdfsfuse.security import sasl, tokens
from hdfsfuse.security.credentials import expand_principal, short_name
from hdfsfuse.security.kerberos import keytab_principals
from hdfsfuse.wire import NEED_DATA, delimited, read_delimited

# ----- Writable numbers and delegation identifiers ----------------------------------------------

# A delegation token identifier written by Hadoop (hdfs-native's test vector).
HADOOP_IDENTIFIER = (
    b"\x00\x1ahdfs/localhost@EXAMPLE.COM\x00\x00"
    b"\x8a\x01\x89\x7f\xe1\x82\x14\x8a\x01\x89\xa3\xee\x06\x14\x01\x02"
)


def test_hadoop_identifier_decodes() -> None:
    ident = tokens.parse_delegation_identifier(HADOOP_IDENTIFIER)
    assert ident == tokens.DelegationIdentifier(
        "hdfs/localhost@EXAMPLE.COM", "", "", 1690067632660, 1690672432660, 1, 2,
    )


@pytest.mark.parametrize(("value", "encoded"), [
    (0, b"\x00"), (127, b"\x7f"), (-112, b"\x90"), (128, b"\x8f\x80"), (-113, b"\x87\x70"),
    (1690067632660, b"\x8a\x01\x89\x7f\xe1\x82\x14"), (-(2**63), b"\x80\x7f\xff\xff\xff\xff\xff\xff\xff"),
])
def test_vlong_known_encodings(value: int, encoded: bytes) -> None:
    assert tokens.write_vlong(value) == encoded
    assert tokens.read_vlong(encoded, 0) == (value, len(encoded))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_vlong_round_trip(value: int) -> None:
    encoded = tokens.write_vlong(value)
    assert tokens.read_vlong(encoded + b"tail", 0) == (value, len(encoded))


# ----- token storage files ----------------------------------------------------------------------


def _text(s: str) -> bytes:
    raw = s.encode()
    return tokens.write_vlong(len(raw)) + raw


def _writable_file(toks: list[rpc_pb2.TokenProto]) -> bytes:
    out = b"HDTS\x00" + tokens.write_vlong(len(toks))
    for t in toks:
        out += _text("alias") + tokens.write_vlong(len(t.identifier)) + t.identifier
        out += tokens.write_vlong(len(t.password)) + t.password + _text(t.kind) + _text(t.service)
    return out + tokens.write_vlong(1) + _text("secret") + tokens.write_vlong(3) + b"abc"


TOKEN = rpc_pb2.TokenProto(identifier=HADOOP_IDENTIFIER, password=b"p" * 20, kind="HDFS_DELEGATION_TOKEN",
                           service="127.0.0.1:8020")
OTHER = rpc_pb2.TokenProto(identifier=b"x", password=b"y", kind="kms-dt", service="kms://x")


def test_writable_token_file() -> None:
    assert tokens.parse_token_storage(_writable_file([OTHER, TOKEN])) == [OTHER, TOKEN]


def test_protobuf_token_file() -> None:
    creds = rpc_pb2.CredentialsProto(tokens=[rpc_pb2.CredentialsKVProto(alias="a", token=TOKEN)])
    assert tokens.parse_token_storage(b"HDTS\x01" + delimited(creds.SerializeToString())) == [TOKEN]


@pytest.mark.parametrize(("data", "message"), [
    (b"", "no HDTS header"), (b"HDTZ\x00", "no HDTS header"), (b"HDTS\x07", "unknown token storage format 7"),
    (b"HDTS\x00\x01\x05ali", "truncated"), (b"HDTS\x01\x50\x01", "bad protobuf"),
])
def test_bad_token_files_are_clear_errors(data: bytes, message: str) -> None:
    with pytest.raises(tokens.TokenFileError, match=message):
        tokens.parse_token_storage(data, "token file t")


@given(st.binary(max_size=200))
def test_fuzz_token_files_raise_only_token_file_errors(data: bytes) -> None:
    try:
        tokens.parse_token_storage(b"HDTS" + data)
    except tokens.TokenFileError:
        pass


def test_token_selection_by_service() -> None:
    ha = rpc_pb2.TokenProto(identifier=b"i", password=b"p", kind="HDFS_DELEGATION_TOKEN", service="ha-hdfs:ns1")
    services = tokens.token_services("ns1", [("nn1", 8020), ("nn2", 8020)], "ns1")
    assert tokens.select_delegation_token([OTHER, TOKEN, ha], services) is ha
    services = tokens.token_services("127.0.0.1:8020", [("127.0.0.1", 8020)], None)
    assert tokens.select_delegation_token([OTHER, ha, TOKEN], services) is TOKEN
    assert tokens.select_delegation_token([OTHER, ha], services) is None


# ----- QOP choice and the GSSAPI layer -----------------------------------------------------------


def test_protection_names() -> None:
    assert sasl.parse_protection("privacy, integrity,authentication") == ("auth-conf", "auth-int", "auth")
    with pytest.raises(sasl.SaslError, match=r"hadoop\.rpc\.protection"):
        sasl.parse_protection("secret")


@pytest.mark.parametrize(("offer", "wanted", "qop", "reply"), [
    (b"\x01\x01\x00\x00", ("auth",), "auth", b"\x01\x00\x00\x00"),
    (b"\x04\x01\x00\x00", ("auth-conf",), "auth-conf", b"\x04\x01\x00\x00"),
    (b"\x07\x01\x00\x00", ("auth-int", "auth-conf"), "auth-int", b"\x02\x01\x00\x00"),
    (b"\x07\x01\x00\x00", None, "auth-conf", b"\x04\x01\x00\x00"),  # nothing configured: the strongest
])
def test_gss_layer_reply(offer: bytes, wanted: tuple[str, ...] | None, qop: str, reply: bytes) -> None:
    assert sasl.gss_layer_reply(offer, wanted, "nn:8020") == (qop, reply)


def test_gss_layer_mismatch_names_both_sides() -> None:
    with pytest.raises(sasl.SaslError, match=r"nn:8020 requires RPC protection privacy, but "
                                             r"hadoop\.rpc\.protection here is authentication"):
        sasl.gss_layer_reply(b"\x04\x01\x00\x00", ("auth",), "nn:8020")
    with pytest.raises(sasl.SaslError, match="3-byte"):
        sasl.gss_layer_reply(b"\x04\x01\x00", None, "nn:8020")


# ----- DIGEST-MD5 layers ----------------------------------------------------------------------------

CONF_CHALLENGE = (b'realm="default",nonce="bm9uY2U=",qop="auth-conf,auth-int,auth",charset=utf-8,'
                  b'cipher="3des,rc4,des,rc4-56,rc4-40",algorithm=md5-sess')


@pytest.mark.parametrize(("wanted", "qop", "cipher"), [
    (("auth-int",), "auth-int", None), (("auth-conf",), "auth-conf", "3des"), (None, "auth-conf", "3des"),
])
def test_digest_response_names_the_qop_and_cipher(wanted: tuple[str, ...] | None, qop: str,
                                                   cipher: str | None) -> None:
    client = sasl.DigestMd5Client("u", "p", wanted=wanted)
    d = sasl.parse_directives(client.respond(CONF_CHALLENGE))
    assert d["qop"] == qop and d.get("cipher") == cipher


def _pair(cipher: str) -> tuple[sasl.DigestLayer, sasl.DigestLayer]:
    ha1 = bytes(range(16))
    return sasl.DigestLayer(ha1, cipher), sasl.DigestLayer(ha1, cipher, server=True)


@pytest.mark.parametrize("cipher", ["", "3des", "des", "rc4", "rc4-56", "rc4-40"])
@given(messages=st.lists(st.binary(max_size=300), min_size=1, max_size=6))
def test_digest_layer_round_trips_both_ways(cipher: str, messages: list[bytes]) -> None:
    client, server = _pair(cipher)
    for msg in messages:  # sequence numbers and cipher state run on across messages
        assert server.unwrap(client.wrap(msg)) == msg
        assert client.unwrap(server.wrap(msg)) == msg


@pytest.mark.parametrize("cipher", ["", "3des", "rc4"])
def test_digest_layer_refuses_tampering_and_replay(cipher: str) -> None:
    client, server = _pair(cipher)
    token = bytearray(client.wrap(b"getFileInfo /secret"))
    token[3] ^= 0x40
    with pytest.raises(sasl.SaslError):
        server.unwrap(bytes(token))
    client, server = _pair(cipher)
    token = client.wrap(b"one")
    server.unwrap(token)
    with pytest.raises(sasl.SaslError, match="out of sequence"):
        server.unwrap(token)


def test_digest_privacy_hides_the_message() -> None:
    client, _ = _pair("rc4")
    assert b"/secret/path" not in client.wrap(b"getFileInfo /secret/path")
    integrity, _ = _pair("")
    assert b"/secret/path" in integrity.wrap(b"getFileInfo /secret/path")


# ----- WRAP framing -------------------------------------------------------------------------------


class _Xor:
    """A stand-in layer: reversible, and visibly not the identity."""

    def wrap(self, data: bytes) -> bytes:
        return bytes(b ^ 0x5A for b in data)

    unwrap = wrap


def _response(call_id: int, body: bytes) -> bytes:
    header = rpc_pb2.RpcResponseHeaderProto(callId=call_id, status=rpc_pb2.RpcResponseHeaderProto.SUCCESS)
    frame = delimited(header.SerializeToString()) + delimited(body)
    return struct.pack(">I", len(frame)) + frame


def _wrap_frame(token: bytes) -> bytes:
    return _response(2**32 - 33, rpc_pb2.RpcSaslProto(state=rpc_pb2.RpcSaslProto.WRAP, token=token).SerializeToString())


def test_unwrapping_reader_parses_responses_across_tokens() -> None:
    plain = _response(1, b"first") + _response(2, b"second")
    layer = _Xor()
    reader = ipc.UnwrappingReader(layer.unwrap)
    wire = _wrap_frame(layer.wrap(plain[:7])) + _wrap_frame(layer.wrap(plain[7:]))
    for i in range(0, len(wire), 5):  # byte dribbles
        reader.feed(wire[i : i + 5])
    got = []
    while (r := reader.next_response()) is not NEED_DATA:
        got.append((r.call_id, r.body))
    assert got == [(1, b"first"), (2, b"second")]


def test_unwrapping_reader_refuses_plain_responses() -> None:
    reader = ipc.UnwrappingReader(_Xor().unwrap)
    reader.feed(_response(3, b"sneaked in unwrapped"))
    with pytest.raises(ProtocolError, match="unwrapped response"):
        reader.next_response()


def test_unwrapping_reader_refuses_other_sasl_states() -> None:
    reader = ipc.UnwrappingReader(_Xor().unwrap)
    challenge = rpc_pb2.RpcSaslProto(state=rpc_pb2.RpcSaslProto.CHALLENGE, token=b"late")
    reader.feed(_response(2**32 - 33, challenge.SerializeToString()))
    with pytest.raises(ProtocolError, match="expected WRAP"):
        reader.next_response()


def test_outgoing_bytes_are_cut_into_wrap_frames() -> None:
    layer = _Xor()
    data = bytes(range(256)) * 600  # more than two chunks
    wire = ipc.encode_wrapped(data, layer.wrap)
    pos, chunks = 0, []
    while pos < len(wire):
        (n,) = struct.unpack_from(">I", wire, pos)
        frame = memoryview(wire)[pos + 4 : pos + 4 + n]
        header, at = read_delimited(frame, 0, n)
        body, at = read_delimited(frame, at, n)
        assert at == n and rpc_pb2.RpcRequestHeaderProto.FromString(header).callId == -33
        msg = rpc_pb2.RpcSaslProto.FromString(body)
        assert msg.state == rpc_pb2.RpcSaslProto.WRAP
        chunks.append(layer.unwrap(msg.token))
        pos += 4 + n
    assert b"".join(chunks) == data
    assert [len(c) for c in chunks] == [ipc.WRAP_CHUNK, ipc.WRAP_CHUNK, len(data) - 2 * ipc.WRAP_CHUNK]


# ----- principals, keytabs, settings, options ---------------------------------------------------


@pytest.mark.parametrize(("template", "host", "expected"), [
    ("nn/_HOST@EXAMPLE.COM", "NN1.Example.com.", "nn/nn1.example.com@EXAMPLE.COM"),
    ("nn/fixed.host@EXAMPLE.COM", "other", "nn/fixed.host@EXAMPLE.COM"),
    ("nn@EXAMPLE.COM", "other", "nn@EXAMPLE.COM"),
    ("_HOST/_HOST@R", "h", "_HOST/h@R"),
])
def test_host_expansion(template: str, host: str, expected: str) -> None:
    assert expand_principal(template, host) == expected


def test_short_names() -> None:
    assert [short_name(p) for p in ("alice@R", "nn/host@R", "bob")] == ["alice", "nn", "bob"]


def _keytab_entry(realm: str, *components: str) -> bytes:
    def counted(s: str) -> bytes:
        return struct.pack(">H", len(s)) + s.encode()

    body = struct.pack(">H", len(components)) + counted(realm) + b"".join(counted(c) for c in components)
    body += struct.pack(">IIBH", 1, 0, 1, 17) + counted("k" * 16) + struct.pack(">I", 1)
    return struct.pack(">i", len(body)) + body


def test_keytab_principals() -> None:
    data = b"\x05\x02" + _keytab_entry("EXAMPLE.COM", "hdfs", "localhost") + struct.pack(">i", -8) + b"\0" * 8
    data += _keytab_entry("EXAMPLE.COM", "alice")
    assert keytab_principals(data) == {"hdfs/localhost@EXAMPLE.COM", "alice@EXAMPLE.COM"}
    assert keytab_principals(b"not a keytab") is None


def test_cluster_security_settings() -> None:
    s = ClusterSettings.from_conf({
        "hadoop.security.authentication": "Kerberos", "hadoop.rpc.protection": "privacy",
        "dfs.namenode.kerberos.principal": "nn/_HOST@R", "ipc.client.fallback-to-simple-auth-allowed": "true",
    })
    assert (s.kerberos, s.rpc_protection, s.namenode_principal, s.fallback_to_simple) == (
        True, "privacy", "nn/_HOST@R", True)
    with pytest.raises(ConfigError, match="must be simple or kerberos"):
        ClusterSettings.from_conf({"hadoop.security.authentication": "token"})


def test_security_options() -> None:
    o = parse_options(["keytab=/etc/hdfsfuse.keytab,principal=hfuse/host.example.com@EXAMPLE.COM",
                       "allow_other,identity=caller"])
    assert (o.keytab, o.principal, o.identity) == ("/etc/hdfsfuse.keytab", "hfuse/host.example.com@EXAMPLE.COM",
                                                   "caller")
    fuse = o.fuse_options("hdfs://nn")
    assert "allow_other" in fuse and "default_permissions" not in fuse  # the NameNode decides per caller
    for bad, message in [("keytab=/k", "go together"), ("principal=a@R", "go together"),
                         ("identity=caller", "needs allow_other"), ("allow_other,identity=root", "must be mount"),
                         ("principal=bad principal@R,keytab=/k", "not a Kerberos principal")]:
        with pytest.raises(ConfigError, match=message):
            parse_options([bad])
