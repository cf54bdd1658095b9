"""The pure parts of encryption-zone reads: AES/CTR at any offset, the file's encryption facts,
data keys in memory, and the KMS protocol (URIs, requests, HTTP/1.1 answers byte by byte, errors)."""

from __future__ import annotations

import base64
import json
import os

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from hypothesis import given
from hypothesis import strategies as st

from hdfsfuse.encryption.ctr import CtrDecryptor, counter_block
from hdfsfuse.encryption.info import FileEncryption, encryption_of
from hdfsfuse.encryption.keys import DataKey, KeyCache
from hdfsfuse.encryption.kms_protocol import (
    HttpProtocolError,
    KmsEndpoints,
    ResponseParser,
    auth_cookie,
    data_key,
    decrypt_request,
    encode_request,
    error_for,
    provider_uri,
    select_kms_token,
    token_url_string,
)
from hdfsfuse.errors import (
    AccessDenied,
    AuthenticationRequired,
    ConfigError,
    KeyUnavailable,
    NotSupported,
    ProtocolError,
)
from hdfsfuse.proto import hdfs_pb2, rpc_pb2
from hdfsfuse.security.tokens import parse_token_storage, write_vlong

KEY = bytes(range(16))
IV = bytes.fromhex("00112233445566778899aabbccddeeff")
PLAIN = os.urandom(5000)
CIPHER = Cipher(algorithms.AES(KEY), modes.CTR(IV)).encryptor().update(PLAIN)  # as Hadoop writes a file


# ----- AES/CTR ------------------------------------------------------------------------------------

def test_counter_block_adds_the_block_number_with_carry_through_all_16_bytes() -> None:
    assert counter_block(IV, 0) == IV
    assert counter_block(IV, 15) == IV
    assert counter_block(IV, 16) == bytes.fromhex("00112233445566778899aabbccddef00")
    assert counter_block(b"\xff" * 16, 16) == bytes(16)  # mod 2^128
    low_full = bytes(8) + b"\xff" * 8
    assert counter_block(low_full, 16) == bytes(7) + b"\x01" + bytes(8)  # out of the low 64 bits


@given(st.integers(0, len(PLAIN)), st.integers(0, 600))
def test_any_range_decrypts_to_the_same_bytes_as_the_whole_file(offset: int, length: int) -> None:
    decryptor = CtrDecryptor(DataKey(KEY), IV)
    assert decryptor.decrypt(CIPHER[offset : offset + length], offset) == PLAIN[offset : offset + length]


def test_a_counter_not_advanced_by_the_offset_gives_garbage() -> None:
    wrong = Cipher(algorithms.AES(KEY), modes.CTR(IV)).decryptor().update(CIPHER[4096:4196])
    assert wrong != PLAIN[4096:4196]
    assert CtrDecryptor(DataKey(KEY), IV).decrypt(CIPHER[4096:4196], 4096) == PLAIN[4096:4196]


def test_key_material_never_shows_in_reprs() -> None:
    key = DataKey(KEY)
    for text in (repr(key), repr(CtrDecryptor(key, IV)), repr(_encryption())):
        assert KEY.hex() not in text and repr(KEY) not in text and "edek" not in text


# ----- the file's encryption facts -------------------------------------------------------------------

def _info(**fields: object) -> hdfs_pb2.FileEncryptionInfoProto:
    values = {"suite": hdfs_pb2.AES_CTR_NOPADDING, "cryptoProtocolVersion": hdfs_pb2.ENCRYPTION_ZONES,
              "key": b"E" * 16, "iv": IV, "keyName": "ezkey", "ezKeyVersionName": "ezkey@0", **fields}
    return hdfs_pb2.FileEncryptionInfoProto(**{k: v for k, v in values.items() if v is not None})


def _encryption() -> FileEncryption:
    return FileEncryption.from_proto("/ez/f", _info())


def test_the_live_bytes_of_field_15_parse() -> None:
    live = (bytes.fromhex("0802100 21a10".replace(" ", "")) + b"E" * 16 + b"\x22\x10" + IV
            + b"\x2a\x05ezkey\x32\x07ezkey@0")
    info = hdfs_pb2.FileEncryptionInfoProto.FromString(live)
    assert FileEncryption.from_proto("/f", info) == FileEncryption(edek=b"E" * 16, iv=IV, key_name="ezkey",
                                                                   key_version="ezkey@0")
    assert encryption_of("/f", None) is None


@pytest.mark.parametrize(("fields", "error", "says"), [
    ({"suite": hdfs_pb2.SM4_CTR_NOPADDING}, NotSupported, "SM4/CTR/NoPadding"),
    ({"suite": None}, NotSupported, "UNKNOWN"),
    ({"cryptoProtocolVersion": hdfs_pb2.UNKNOWN_PROTOCOL_VERSION}, NotSupported, "version 1"),
    ({"iv": b"short"}, ProtocolError, "iv 5 bytes"),
    ({"ezKeyVersionName": None}, ProtocolError, "version ''"),
])
def test_what_hadoop_cannot_read_is_refused(fields: dict[str, object], error: type[Exception], says: str) -> None:
    with pytest.raises(error, match=says.replace("/", ".")):
        FileEncryption.from_proto("/ez/f", _info(**fields))


def test_the_xattr_description_names_keys_and_holds_no_secret() -> None:
    assert _encryption().describe() == {"key": "ezkey", "key_version": "ezkey@0", "suite": "AES/CTR/NoPadding"}


# ----- data keys in memory ------------------------------------------------------------------------

def test_a_key_lasts_its_keep_time_after_the_last_ask_unless_a_file_still_holds_it() -> None:
    cache = KeyCache(keep_seconds=10)
    alice = ("alice", b"E" * 16, "k@0")
    key = DataKey(KEY)
    cache.put(alice, key, now=0)
    assert cache.get(alice, now=9) is key
    assert cache.get(alice, now=18) is key  # asked at 9: kept until 19
    held = CtrDecryptor(key, IV)  # an open file
    del key
    assert cache.get(alice, now=100) is not None  # past its time, but an open file holds it
    del held
    cache.put(("bob", b"F" * 16, "k@0"), DataKey(KEY), now=200)  # the sweep drops alice's kept entry
    assert cache.get(alice, now=200) is None


def test_a_key_one_user_was_given_is_never_handed_to_another() -> None:
    cache = KeyCache()
    cache.put(("alice", b"E" * 16, "k@0"), DataKey(KEY), now=0)
    assert cache.get(("bob", b"E" * 16, "k@0"), now=1) is None
    assert cache.get(("alice", b"E" * 16, "k@1"), now=1) is None  # another key version: ask the KMS


def test_the_cache_holds_a_bounded_number_of_keys() -> None:
    cache = KeyCache(keep_seconds=1000, max_entries=3)
    for i in range(10):
        cache.put(("u", bytes([i]) * 16, "k@0"), DataKey(KEY), now=i)
    assert len(cache) == 3


# ----- KMS URIs and requests ------------------------------------------------------------------------

def test_kms_uris() -> None:
    one = KmsEndpoints.parse("kms://http@127.0.0.1:9600/kms")
    assert (one.hosts, one.port, one.url("127.0.0.1")) == (("127.0.0.1",), 9600, "http://127.0.0.1:9600/kms")
    two = KmsEndpoints.parse("kms://https@h1;h2:9700/kms/")
    assert (two.scheme, two.hosts, two.path, two.url("h2")) == ("https", ("h1", "h2"), "/kms", "https://h2:9700/kms")
    assert KmsEndpoints.parse("kms://https@h").port == 443
    for bad in ("http://h:9600/kms", "kms://ftp@h:1/kms", "kms://http@:9600/kms", "kms://http@h:99999/kms"):
        with pytest.raises(ConfigError, match="kms"):
            KmsEndpoints.parse(bad)
    assert provider_uri("jceks://file/tmp/k.jceks, kms://http@h:9600/kms") == "kms://http@h:9600/kms"
    assert provider_uri("jceks://file/tmp/k.jceks") is None and provider_uri("") is None


def test_the_decrypt_request_sends_the_files_own_key_version() -> None:
    endpoints = KmsEndpoints.parse("kms://http@127.0.0.1:9600/kms")
    info = FileEncryption(edek=b"E" * 16, iv=IV, key_name="ez key", key_version="ez key@3")
    request = decrypt_request(endpoints, info, user="alice", do_as=None)
    assert request.method == "POST"
    assert request.target == "/kms/v1/keyversion/ez%20key%403/_eek?eek_op=decrypt&user.name=alice"
    assert json.loads(request.body) == {"name": "ez key", "iv": base64.b64encode(IV).decode(),
                                        "material": base64.b64encode(b"E" * 16).decode()}
    wire = encode_request(request, "127.0.0.1", 9600)
    head, body = wire.split(b"\r\n\r\n", 1)
    assert head.startswith(b"POST /kms/v1/keyversion/ez%20key%403/_eek?") and body == request.body
    assert b"Content-Type: application/json" in head and f"Content-Length: {len(body)}".encode() in head
    proxied = decrypt_request(endpoints, info, do_as="bob", headers=(("Cookie", "hadoop.auth=x"),))
    assert proxied.target.endswith("eek_op=decrypt&doAs=bob") and ("Cookie", "hadoop.auth=x") in proxied.headers


# ----- HTTP answers -----------------------------------------------------------------------------

DEK = os.urandom(16)
KEY_JSON = json.dumps({"name": "ezkey", "versionName": "EK",
                       "material": base64.urlsafe_b64encode(DEK).decode().rstrip("=")}).encode()


def _fed(wire: bytes, step: int) -> ResponseParser:
    parser = ResponseParser()
    for i in range(0, len(wire), step):
        parser.feed(wire[i : i + step])
    return parser


@pytest.mark.parametrize("step", [1, 7, 10_000])
def test_answers_parse_byte_by_byte(step: int) -> None:
    by_length = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nSet-Cookie: hadoop.auth=\"u=a&t=simple\"; "
                 b"Path=/\r\nContent-Length: " + str(len(KEY_JSON)).encode() + b"\r\n\r\n" + KEY_JSON)
    parser = _fed(by_length, step)
    assert parser.complete and parser.response is not None
    assert data_key(parser.response, _encryption()) == DEK
    assert auth_cookie(parser.response) == '"u=a&t=simple"'
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (KEY_JSON[:10], KEY_JSON[10:]))
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"
    parser = _fed(chunked, step)
    assert parser.complete and parser.response is not None and parser.response.body == KEY_JSON
    to_close = _fed(b"HTTP/1.0 200 OK\r\n\r\n" + KEY_JSON, step)
    assert not to_close.complete and to_close.eof().body == KEY_JSON


@pytest.mark.parametrize("wire", [
    b"SSH-2.0-OpenSSH\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n",
])
def test_garbage_answers_are_protocol_errors(wire: bytes) -> None:
    with pytest.raises(HttpProtocolError):
        _fed(wire, 3)


def test_a_connection_closed_too_soon_is_a_protocol_error() -> None:
    with pytest.raises(HttpProtocolError, match="before answering"):
        _fed(b"HTTP/1.1 200", 5).eof()
    with pytest.raises(HttpProtocolError, match="middle"):
        _fed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 5).eof()


def test_an_endless_header_is_refused() -> None:
    with pytest.raises(HttpProtocolError, match="64 KiB"):
        _fed(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000, 4096)


def _answer(status: int, body: bytes) -> ResponseParser:
    return _fed(b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body), 100)


def _remote(java_class: str, message: str) -> bytes:
    return json.dumps({"RemoteException": {"message": message, "exception": java_class.rsplit(".", 1)[1],
                                           "javaClassName": java_class}}).encode()


def test_kms_errors_map_to_the_errors_users_see() -> None:
    acl = _remote("org.apache.hadoop.security.authorize.AuthorizationException",
                  "User [bob] is not authorized to perform [DECRYPT_EEK] on key with ACL name [k1]!!")
    denied = error_for(_answer(403, acl).response, "/ez/f: key k1@0 from KMS kms://x as bob")  # type: ignore[arg-type]
    assert isinstance(denied, AccessDenied) and "bob" in str(denied) and "k1@0" in str(denied)
    hidden = _remote("java.io.IOException", "org.apache.hadoop.security.authorize.AuthorizationException: "
                                            "User:bob not allowed to do 'DECRYPT_EEK' on 'k1'")
    assert isinstance(error_for(_answer(500, hidden).response, "w"), AccessDenied)  # type: ignore[arg-type]
    broken = _remote("java.io.IOException", "keystore unreadable")
    assert isinstance(error_for(_answer(500, broken).response, "w"), KeyUnavailable)  # type: ignore[arg-type]
    html = b"<html><body><h2>HTTP ERROR 401 Authentication required</h2></body></html>"
    unauthenticated = error_for(_answer(401, html).response, "w")  # type: ignore[arg-type]
    assert isinstance(unauthenticated, AuthenticationRequired) and "Authentication required" in str(unauthenticated)
    wrong = _remote("java.lang.IllegalArgumentException", "KeyVersion 'k1@0' does not belong to the key 'k2'")
    failed = error_for(_answer(400, wrong).response, "w")  # type: ignore[arg-type]
    assert isinstance(failed, KeyUnavailable) and "HTTP 400" in str(failed) and "does not belong" in str(failed)


def test_a_key_of_the_wrong_size_is_refused() -> None:
    body = json.dumps({"material": base64.urlsafe_b64encode(b"x" * 20).decode()}).encode()
    with pytest.raises(HttpProtocolError, match="20-byte key"):
        data_key(_answer(200, body).response, _encryption())  # type: ignore[arg-type]
    with pytest.raises(HttpProtocolError, match="not a key"):
        data_key(_answer(200, b"{}").response, _encryption())  # type: ignore[arg-type]


# ----- KMS delegation tokens -----------------------------------------------------------------------

def test_a_kms_token_travels_as_hadoops_url_string() -> None:
    token = rpc_pb2.TokenProto(identifier=b"\x00id", password=b"pw" * 10, kind="kms-dt",
                               service="kms://http@127.0.0.1:9600/kms")
    raw = base64.urlsafe_b64decode(token_url_string(token) + "==")
    stored = b"HDTS\x00" + write_vlong(1) + write_vlong(len(token.service)) + token.service.encode() + raw
    stored += write_vlong(0)
    assert parse_token_storage(stored) == [token]  # the same bytes Hadoop's Writable token has
    assert "=" not in token_url_string(token) and "+" not in token_url_string(token)


def test_the_token_for_this_kms_is_chosen() -> None:
    endpoints = KmsEndpoints.parse("kms://http@127.0.0.1:9600/kms")
    hdfs = rpc_pb2.TokenProto(kind="HDFS_DELEGATION_TOKEN", service="127.0.0.1:8020")
    other = rpc_pb2.TokenProto(kind="kms-dt", service="kms://http@10.0.0.9:9600/kms")
    ours = rpc_pb2.TokenProto(kind="kms-dt", service="kms://http@127.0.0.1:9600/kms")
    by_address = rpc_pb2.TokenProto(kind="kms-dt", service="127.0.0.1:9600")
    assert select_kms_token([hdfs, other, ours], endpoints, {"127.0.0.1:9600"}) is ours
    assert select_kms_token([hdfs, other, by_address], endpoints, {"127.0.0.1:9600"}) is by_address
    assert select_kms_token([hdfs, other], endpoints, {"127.0.0.1:9600"}) is None
