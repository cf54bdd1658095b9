"""Protobuf wire helpers shared by the RPC and DataTransfer codecs. Pure code, no I/O.

Hadoop frames most messages with Java's `writeDelimitedTo`: an unsigned varint32 length
followed by the message bytes.

    varint:  1xxxxxxx 1xxxxxxx ... 0xxxxxxx      (7 bits per byte, least significant first)
"""

from __future__ import annotations

from hdfsfuse.errors import ProtocolError


class NeedData(Exception):
    """Internal signal: the buffer ends before a complete item."""


def encode_varint(value: int) -> bytes:
    if value < 0:
        raise ValueError("varint must be non-negative")
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int = 10) -> tuple[int, int]:
    """Decode a varint at `pos`; return (value, new_pos).

    Raises NeedData if the buffer ends inside the varint, ProtocolError if it is longer than
    `max_bytes` (5 for a varint32).
    """
    result = 0
    shift = 0
    end = len(buf)
    for i in range(max_bytes):
        if pos + i >= end:
            raise NeedData
        b = buf[pos + i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos + i + 1
        shift += 7
    raise ProtocolError(f"varint longer than {max_bytes} bytes")


def delimited(message: bytes) -> bytes:
    """`writeDelimitedTo` framing: varint32 length, then the bytes."""
    return encode_varint(len(message)) + message


def read_delimited(
    buf: bytes | bytearray | memoryview, pos: int, max_len: int
) -> tuple[bytes, int]:
    """Read one varint32-delimited message at `pos`; return (message, new_pos).

    The length is checked against `max_len` before anything is copied.
    """
    length, start = decode_varint(buf, pos, max_bytes=5)
    if length > max_len:
        raise ProtocolError(f"delimited message of {length} bytes exceeds the {max_len}-byte limit")
    end = start + length
    if end > len(buf):
        raise NeedData
    return bytes(buf[start:end]), end


class _NeedDataType:
    """Returned by a parser when it needs more bytes before it can produce the next event."""

    _instance: _NeedDataType | None = None

    def __new__(cls) -> _NeedDataType:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = _NeedDataType()
