"""HDFS data checksums: CRC32C, CRC32 and NULL. Pure code, no I/O.

Verification checks every chunk of a buffer in one call of the `_chunked_crc` C extension
(built with the package; hardware CRC32C, and the GIL released, so a worker thread verifies
while the trio loop runs). Without it (no compiler at install time, or `native=False`), each
chunk is one call: google-crc32c (the `fast` extra) or crcmod for CRC32C, zlib for CRC32.

One checksum per `bytes_per_checksum` chunk of block data; the block's last chunk may be short
and is checksummed over its real length. Each checksum is a 4-byte big-endian integer:

    data:      |<- chunk 0 (bpc) ->|<- chunk 1 (bpc) ->| ... |<- last (<= bpc) ->|
    checksums: | crc(chunk 0) BE32 | crc(chunk 1) BE32 | ... | crc(last) BE32    |
"""

from __future__ import annotations

import functools
import struct
import zlib
from collections.abc import Callable
from types import ModuleType

import crcmod.predefined

from hdfsfuse.errors import ChecksumMismatch, ProtocolError

CHECKSUM_NULL = 0
CHECKSUM_CRC32 = 1
CHECKSUM_CRC32C = 2
TYPE_NAMES = {CHECKSUM_NULL: "NULL", CHECKSUM_CRC32: "CRC32", CHECKSUM_CRC32C: "CRC32C"}

crc32c: Callable[[bytes], int] = crcmod.predefined.mkCrcFun("crc-32c")


def _chunked() -> ModuleType | None:
    try:
        from hdfsfuse.datanode import _chunked_crc
    except ImportError:
        return None
    return _chunked_crc


chunked_crc = _chunked()


def _native_crc32c() -> Callable[[bytes], int] | None:
    """A hardware CRC32C of one buffer: google-crc32c (the `fast` extra), else our extension."""
    try:
        import google_crc32c
    except ImportError:
        google_crc32c = None
    if google_crc32c is not None and google_crc32c.implementation == "c":
        return google_crc32c.value  # type: ignore[no-any-return]
    return functools.partial(chunked_crc.crc, CHECKSUM_CRC32C) if chunked_crc is not None else None


native_crc32c = _native_crc32c()


def crc32(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


_MAX_BPC = 16 * 1024 * 1024


@functools.lru_cache(maxsize=64)
def _sums_struct(count: int) -> struct.Struct:
    """The layout of `count` big-endian checksums (a read's packets use one or two counts)."""
    return struct.Struct(f">{count}I")


class Checksum:
    """A block's checksum scheme, as announced in the DataNode's read response."""

    __slots__ = ("_bulk", "_func", "_needs_bytes", "bytes_per_checksum", "kind", "native", "size")

    def __init__(self, kind: int, bytes_per_checksum: int, *, native: bool = True) -> None:
        if kind not in TYPE_NAMES:
            raise ProtocolError(f"unknown checksum type {kind}")
        if not 0 < bytes_per_checksum <= _MAX_BPC:
            raise ProtocolError(f"bad bytesPerChecksum {bytes_per_checksum}")
        self.kind = kind
        self.bytes_per_checksum = bytes_per_checksum
        self.size = 0 if kind == CHECKSUM_NULL else 4
        self._needs_bytes = False  # google-crc32c takes bytes, not memoryview slices
        self._func: Callable[[bytes], int] | None = None
        if kind == CHECKSUM_CRC32:
            self._func = zlib.crc32
        elif kind == CHECKSUM_CRC32C:
            if native and native_crc32c is not None:
                self._func = native_crc32c
                self._needs_bytes = True
            else:
                self._func = crc32c
        self._bulk = chunked_crc if native and kind != CHECKSUM_NULL else None  # one call for every chunk
        self.native = native and chunked_crc is not None  # the extension verifies (verified_io reads with it too)

    @staticmethod
    @functools.cache
    def of(kind: int, bytes_per_checksum: int) -> Checksum:
        """The shared instance for a scheme: every read of a cluster uses one or two of them."""
        return Checksum(kind, bytes_per_checksum)

    @property
    def name(self) -> str:
        return TYPE_NAMES[self.kind]

    def compute(self, data: bytes) -> bytes:
        """The checksum bytes for `data` (used by tests and fake peers)."""
        if self._func is None:
            return b""
        bpc = self.bytes_per_checksum
        data = bytes(data)
        return b"".join(struct.pack(">I", self._func(data[i : i + bpc])) for i in range(0, len(data), bpc))

    def verify(self, data: memoryview | bytes, sums: memoryview | bytes, block_offset: int, what: str) -> None:
        """Check every chunk of `data`, which starts at `block_offset` in the block.

        Raises ChecksumMismatch naming `what` (the block and DataNode) and the chunk's offset.
        """
        func = self._func
        if func is None:
            return
        bpc = self.bytes_per_checksum
        n = len(data)
        count = -(-n // bpc)
        if len(sums) != count * 4:
            raise ProtocolError(f"{len(sums)} checksum bytes for {n} data bytes")
        if self._bulk is not None:
            bad = self._bulk.first_mismatch(self.kind, data, sums, bpc)
            if bad >= 0:
                raise self.mismatch(what, block_offset + bad * bpc)
            return
        expected = _sums_struct(count).unpack(sums)
        chunks = bytes(data) if self._needs_bytes and not isinstance(data, bytes) else data
        computed = tuple(map(func, [chunks[i : i + bpc] for i in range(0, n, bpc)]))
        if computed != expected:
            bad = next(i for i in range(count) if computed[i] != expected[i])
            raise self.mismatch(what, block_offset + bad * bpc)

    def mismatch(self, what: str, offset: int) -> ChecksumMismatch:
        """The error for the chunk at block `offset` of `what`, which does not verify."""
        return ChecksumMismatch(f"{self.name} checksum mismatch in {what} at block offset {offset}")
