"""Hadoop delegation tokens: token storage files and token selection. Pure code, no I/O.

A token storage file (what `hdfs fetchdt` writes and HADOOP_TOKEN_FILE_LOCATION names) holds
tokens under aliases, in one of two formats (Hadoop's Credentials.readTokenStorageStream):

    "HDTS" 0x00  WRITABLE:  VInt n, n x (Text alias, Token), VInt m, m x (Text alias, VInt len, bytes)
                 Token:     VInt idLen, identifier, VInt pwLen, password, Text kind, Text service
    "HDTS" 0x01  PROTOBUF:  varint-delimited CredentialsProto

    Text = VInt length + UTF-8.   VInt/VLong = Hadoop's WritableUtils zero-compressed encoding:
    -112..127 is one byte; else a lead byte (-113..-120: positive, -121..-128: negative) giving
    the count of big-endian bytes that follow (negative values stored one's-complemented).

A delegation token identifier (AbstractDelegationTokenIdentifier) is:

    byte version 0, Text owner, Text renewer, Text realUser, VLong issueDate, VLong maxDate,
    VInt sequenceNumber, VInt masterKeyId

A NameNode accepts a token whose service names it: "ip:port", "host:port", or under HA
"ha-hdfs:<nameservice>" for every NameNode of that nameservice.
"""

from __future__ import annotations

import dataclasses

from google.protobuf.message import DecodeError

from hdfsfuse.errors import ConfigError, ProtocolError
from hdfsfuse.proto import rpc_pb2
from hdfsfuse.wire import NeedData, read_delimited

MAGIC = b"HDTS"
WRITABLE = 0
PROTOBUF = 1
DELEGATION_KIND = "HDFS_DELEGATION_TOKEN"
MAX_TOKEN_FILE = 1024 * 1024


class TokenFileError(ConfigError):
    """A token file that cannot be read as Hadoop token storage."""


def read_vlong(data: bytes, pos: int) -> tuple[int, int]:
    """One WritableUtils VLong at `pos`: (value, next position)."""
    if pos >= len(data):
        raise TokenFileError("truncated number")
    first = data[pos] - 256 if data[pos] >= 128 else data[pos]
    if first >= -112:
        return first, pos + 1
    negative = first < -120
    n = (-120 - first) if negative else (-112 - first)
    if pos + 1 + n > len(data):
        raise TokenFileError("truncated number")
    value = int.from_bytes(data[pos + 1 : pos + 1 + n], "big")
    return (~value if negative else value), pos + 1 + n


def write_vlong(value: int) -> bytes:
    """WritableUtils.writeVLong (the inverse of `read_vlong`)."""
    if -112 <= value <= 127:
        return (value & 0xFF).to_bytes(1, "big")
    lead = -112
    if value < 0:
        value = ~value
        lead = -120
    n = max(1, (value.bit_length() + 7) // 8)
    return ((lead - n) & 0xFF).to_bytes(1, "big") + value.to_bytes(n, "big")


def _read_bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = read_vlong(data, pos)
    if n < 0 or pos + n > len(data):
        raise TokenFileError("truncated field")
    return data[pos : pos + n], pos + n


def _read_text(data: bytes, pos: int) -> tuple[str, int]:
    raw, pos = _read_bytes(data, pos)
    try:
        return raw.decode("utf-8"), pos
    except UnicodeDecodeError:
        raise TokenFileError("a text field is not UTF-8") from None


@dataclasses.dataclass(frozen=True)
class DelegationIdentifier:
    owner: str
    renewer: str
    real_user: str
    issue_date_ms: int
    max_date_ms: int
    sequence_number: int
    master_key_id: int


def parse_delegation_identifier(identifier: bytes) -> DelegationIdentifier:
    if not identifier or identifier[0] != 0:
        raise TokenFileError("not a version-0 delegation token identifier")
    owner, pos = _read_text(identifier, 1)
    renewer, pos = _read_text(identifier, pos)
    real_user, pos = _read_text(identifier, pos)
    issue, pos = read_vlong(identifier, pos)
    max_date, pos = read_vlong(identifier, pos)
    seq, pos = read_vlong(identifier, pos)
    key_id, pos = read_vlong(identifier, pos)
    return DelegationIdentifier(owner, renewer, real_user, issue, max_date, seq, key_id)


def parse_token_storage(data: bytes, source: str = "token file") -> list[rpc_pb2.TokenProto]:
    """Every token in a Hadoop token storage file (either format)."""
    if len(data) > MAX_TOKEN_FILE:
        raise TokenFileError(f"{source}: larger than {MAX_TOKEN_FILE} bytes")
    if len(data) < 5 or data[:4] != MAGIC:
        raise TokenFileError(f"{source}: not a Hadoop token storage file (no HDTS header)")
    try:
        if data[4] == WRITABLE:
            return _parse_writable(data, 5)
        if data[4] == PROTOBUF:
            return _parse_protobuf(data, 5)
    except TokenFileError as e:
        raise TokenFileError(f"{source}: {e}") from None
    raise TokenFileError(f"{source}: unknown token storage format {data[4]}")


def _parse_writable(data: bytes, pos: int) -> list[rpc_pb2.TokenProto]:
    count, pos = read_vlong(data, pos)
    if count < 0:
        raise TokenFileError("negative token count")
    tokens = []
    for _ in range(count):
        _alias, pos = _read_text(data, pos)
        identifier, pos = _read_bytes(data, pos)
        password, pos = _read_bytes(data, pos)
        kind, pos = _read_text(data, pos)
        service, pos = _read_text(data, pos)
        tokens.append(rpc_pb2.TokenProto(identifier=identifier, password=password, kind=kind, service=service))
    return tokens  # the secret keys that follow are of no use to a reader


def _parse_protobuf(data: bytes, pos: int) -> list[rpc_pb2.TokenProto]:
    try:
        body, _ = read_delimited(memoryview(data), pos, len(data))
        creds = rpc_pb2.CredentialsProto.FromString(bytes(body))
    except (NeedData, ProtocolError, DecodeError, ValueError) as e:
        raise TokenFileError(f"bad protobuf token storage: {e}") from None
    return [kv.token for kv in creds.tokens if kv.HasField("token")]


def token_services(label: str, addresses: list[tuple[str, int]], nameservice: str | None) -> set[str]:
    """Every token service string a NameNode of this target accepts a token for."""
    services = {f"{host}:{port}" for host, port in addresses}
    if nameservice:
        services.add(f"ha-hdfs:{nameservice}")
    services.add(label)
    return services


def select_delegation_token(tokens: list[rpc_pb2.TokenProto], services: set[str]) -> rpc_pb2.TokenProto | None:
    """The first HDFS delegation token whose service is one of `services`."""
    for token in tokens:
        if token.kind == DELEGATION_KIND and token.service in services:
            return token
    return None
