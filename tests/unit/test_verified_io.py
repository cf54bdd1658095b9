"""Verified reads of local block files (verified_io.read_verified): the C extension's one-call read
(`read_chunks`: both preads and the check without the GIL, 256 KiB at a time) against the
Python path, on real files: exact bytes, the first bad chunk named, short files, RWF_NOWAIT; and
large reads through an O_DIRECT open (`read_verified_direct`): the same answers, no page kept."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hdfsfuse.datanode.checksum import CHECKSUM_CRC32, CHECKSUM_CRC32C, CHECKSUM_NULL, Checksum, chunked_crc
from hdfsfuse.errors import ChecksumMismatch
from hdfsfuse.local import verified_io
from hdfsfuse.local.verified_io import ShortRead, WouldBlock, read_verified
from tests.page_residency import (
    drop_pages,
    page_cache_bypass_unavailable,
    resident_pages,
    until_a_read_meets_a_cold_page,
)

pytestmark = pytest.mark.skipif(chunked_crc is None, reason="the _chunked_crc extension is not built")

BLOCK = random.Random(3).randbytes(1_100_000)  # more than four 256 KiB pieces
HEADER = 7  # a meta file's header: the checksums start after it


class Files:
    def __init__(self, directory: Path, kind: int, bpc: int, block: bytes = BLOCK) -> None:
        self.checksum = Checksum(kind, bpc)
        self.block = block
        self.data, self.sums = directory / f"blk-{kind}-{bpc}", directory / f"blk-{kind}-{bpc}.meta"
        self.data.write_bytes(block)
        self.sums.write_bytes(b"H" * HEADER + self.checksum.compute(block))
        self.data_fd, self.sums_fd = os.open(self.data, os.O_RDONLY), os.open(self.sums, os.O_RDONLY)

    def read(self, offset: int, length: int, *, native: bool, nowait: bool = False) -> object:
        """The bytes, or the error's type and message."""
        checksum = Checksum(self.checksum.kind, self.checksum.bytes_per_checksum, native=native)
        try:
            return bytes(read_verified(self.data_fd, 0, self.sums_fd, HEADER, checksum, len(self.block), offset,
                                       length, "blk_1", nowait=nowait))
        except (ChecksumMismatch, ShortRead, WouldBlock) as e:
            return (type(e).__name__, str(e))

    def close(self) -> None:
        os.close(self.data_fd)
        os.close(self.sums_fd)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[int, int], Files]]:
    directory = tmp_path_factory.mktemp("localio")
    made = {(k, b): Files(directory, k, b) for k in (CHECKSUM_CRC32C, CHECKSUM_CRC32, CHECKSUM_NULL)
            for b in (512, 4096)}
    yield made
    for f in made.values():
        f.close()


def test_the_native_read_is_taken_when_built() -> None:
    assert verified_io._read_chunks is not None and verified_io._READ_PIECE == 256 * 1024


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from([CHECKSUM_CRC32C, CHECKSUM_CRC32, CHECKSUM_NULL]), st.sampled_from([512, 4096]),
       st.integers(0, len(BLOCK) - 1), st.integers(1, len(BLOCK)))
def test_native_and_python_reads_agree_on_every_range(files: dict[tuple[int, int], Files], kind: int, bpc: int,
                                                      offset: int, length: int) -> None:
    f = files[(kind, bpc)]
    length = min(length, len(BLOCK) - offset)
    native = f.read(offset, length, native=True)
    assert native == BLOCK[offset : offset + length]
    assert f.read(offset, length, native=False) == native


@pytest.mark.parametrize("kind", [CHECKSUM_CRC32C, CHECKSUM_CRC32])
@pytest.mark.parametrize("at", [0, 511, 262_143, 262_144, 700_000, len(BLOCK) - 1])
def test_a_flipped_bit_is_found_at_its_chunk_whichever_piece_it_is_in(tmp_path: Path, kind: int, at: int) -> None:
    block = bytearray(BLOCK)
    f = Files(tmp_path, kind, 512, BLOCK)
    try:
        block[at] ^= 0x10
        f.data.write_bytes(block)  # the data changes under the checksums
        chunk = at - at % 512
        for native in (True, False):
            assert f.read(0, len(BLOCK), native=native) == (
                "ChecksumMismatch", f"{f.checksum.name} checksum mismatch in blk_1 at block offset {chunk}")
            # a read that ends before the bad chunk never sees it
            if chunk:
                assert f.read(0, chunk, native=native) == BLOCK[:chunk]
    finally:
        f.close()


@pytest.mark.parametrize("cut", ["data", "sums"])
def test_files_that_end_early_are_a_short_read(tmp_path: Path, cut: str) -> None:
    f = Files(tmp_path, CHECKSUM_CRC32C, 512)
    try:
        os.truncate(f.data if cut == "data" else f.sums, 600_000 if cut == "data" else HEADER + 100)
        for native in (True, False):
            got = f.read(0, len(BLOCK), native=native)
            assert got == ("ShortRead", f"blk_1: the local files end before block offset {len(BLOCK)}")
    finally:
        f.close()


def test_nowait_reads_come_from_memory_or_would_block(tmp_path: Path) -> None:
    f = Files(tmp_path, CHECKSUM_CRC32C, 512)
    try:
        f.read(0, len(BLOCK), native=True)  # everything in memory
        assert f.read(300_000, 5000, native=True, nowait=True) == BLOCK[300_000:305_000]

        def nowait_read() -> bool:
            got = f.read(300_000, 5000, native=True, nowait=True)
            if got == ("WouldBlock", ""):
                return True
            assert got == BLOCK[300_000:305_000]  # from memory after all: still the right bytes
            return False

        until_a_read_meets_a_cold_page([f.data, f.sums], nowait_read)
        assert f.read(300_000, 5000, native=True) == BLOCK[300_000:305_000]  # a plain read waits
    finally:
        f.close()


def test_bad_arguments_are_refused() -> None:
    assert chunked_crc is not None
    with pytest.raises(ValueError, match="kind 3"):
        chunked_crc.read_chunks(3, 512, 0, 0, 10, 0, 0, False)
    with pytest.raises(ValueError, match="bad arguments"):
        chunked_crc.read_chunks(2, 1000, 0, 0, 10, 0, 0, False)  # 1000 does not divide a 256 KiB piece
    with pytest.raises(OSError):
        chunked_crc.read_chunks(2, 512, -5, 0, 512, -5, 0, False)  # not a file descriptor


# ----- O_DIRECT reads -------------------------------------------------------------------------------


def _direct(f: Files, offset: int, length: int) -> object:
    """`read_verified_direct`'s bytes, or the error's type and message (as `Files.read`)."""
    fd = verified_io.open_direct(f.data_fd)
    if fd < 0:
        pytest.skip("this filesystem refuses O_DIRECT")
    try:
        return bytes(verified_io.read_verified_direct(fd, f.data_fd, 0, f.sums_fd, HEADER, f.checksum, len(f.block),
                                                  offset, length, "blk_1"))
    except (ChecksumMismatch, ShortRead) as e:
        return (type(e).__name__, str(e))
    finally:
        os.close(fd)


def test_aligned_buffers_start_at_a_multiple_of_their_alignment() -> None:
    import ctypes
    for n in (4097, 65_537, 2 * 1024 * 1024, 3_000_001):
        for _ in range(20):
            b = chunked_crc.buffer(n, 4096)
            assert type(b) is bytearray and len(b) == n
            assert ctypes.addressof((ctypes.c_char * n).from_buffer(b)) % 4096 == 0
            b[-1:] = b"z"  # an ordinary bytearray: writable, resizable
            b.extend(b"!")
            assert len(b) == n + 1 and b[-2:] == b"z!"
    for n, align in ((4096, 4096), (100, 4096), (10_000, 3), (10_000, 0), (-1, 4096)):
        with pytest.raises(ValueError):
            chunked_crc.buffer(n, align)


@given(offset=st.integers(0, len(BLOCK) - 1), length=st.integers(1, len(BLOCK)))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@pytest.mark.parametrize(("kind", "bpc"), [(CHECKSUM_CRC32C, 512), (CHECKSUM_CRC32, 4096), (CHECKSUM_NULL, 512)])
def test_direct_and_buffered_reads_agree_on_every_range(files: dict[tuple[int, int], Files], kind: int, bpc: int,
                                                        offset: int, length: int) -> None:
    f = files[(kind, bpc)]
    length = min(length, len(BLOCK) - offset)
    assert _direct(f, offset, length) == f.read(offset, length, native=True) == BLOCK[offset : offset + length]


def test_a_direct_read_keeps_no_page_of_the_data_in_memory(tmp_path: Path) -> None:
    unavailable = page_cache_bypass_unavailable(tmp_path)
    if unavailable is not None:
        pytest.skip(unavailable)
    f = Files(tmp_path, CHECKSUM_CRC32C, 512)
    try:
        drop_pages(f.data)
        assert _direct(f, 4096, 900_000) == BLOCK[4096:904_096]
        assert not any(resident_pages(f.data))
        assert f.read(4096, 900_000, native=True) == BLOCK[4096:904_096]  # a buffered read does keep them
        assert sum(resident_pages(f.data)) >= 900_000 // 4096
    finally:
        f.close()


@pytest.mark.parametrize("at", [4096, 300_001, len(BLOCK) - 1])
def test_a_flipped_bit_is_found_by_a_direct_read(tmp_path: Path, at: int) -> None:
    block = bytearray(BLOCK)
    block[at] ^= 0x10
    f = Files(tmp_path, CHECKSUM_CRC32C, 512, block=BLOCK)
    try:
        f.data.write_bytes(block)  # the checksums are still the good bytes'
        drop_pages(f.data)
        got = _direct(f, 0, len(BLOCK))
        assert got == f.read(0, len(BLOCK), native=True)
        assert got[0] == "ChecksumMismatch" and f"offset {at // 512 * 512}" in got[1]  # type: ignore[index]
    finally:
        f.close()


def test_a_short_file_is_a_short_read_directly(tmp_path: Path) -> None:
    f = Files(tmp_path, CHECKSUM_CRC32C, 512)
    try:
        with open(f.data, "r+b") as data:
            data.truncate(600_000)
        got = _direct(f, 0, len(BLOCK))
        assert got[0] == "ShortRead"  # type: ignore[index]
    finally:
        f.close()


def test_a_refused_direct_read_is_read_through_the_page_cache(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    def refuse(*_: object) -> int:
        raise OSError(errno.EINVAL, "Invalid argument")

    f = Files(tmp_path, CHECKSUM_CRC32C, 512)
    try:
        monkeypatch.setattr(verified_io.os, "preadv", refuse)
        assert _direct(f, 8192, 500_000) == BLOCK[8192:508_192]
    finally:
        f.close()


def test_no_direct_open_of_what_is_not_a_file() -> None:
    import socket
    with socket.socket() as s:
        assert verified_io.open_direct(s.fileno()) == -1
