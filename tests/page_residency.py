"""Which pages of a file the kernel holds in memory (mincore), for tests of reads that ask the
kernel to read ahead: looking must not read anything in, as a RWF_NOWAIT probe would (a nowait
read that misses still starts the read)."""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest


def resident_pages(path: Path) -> list[bool]:
    """Which pages of a file are in the kernel's memory (mincore), without reading any in."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = path.stat().st_size
    pages = -(-size // mmap.PAGESIZE)
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        try:
            vec = ctypes.create_string_buffer(pages)
            assert libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
            return [b & 1 == 1 for b in vec.raw]
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def drop_pages(path: Path) -> None:
    """Write a file's dirty pages out, then drop all of its pages from memory.

    A page still being read in (the kernel's own readahead after an earlier read, which may
    finish after that read returned) cannot be dropped and shows up once it arrives: drop
    again until none is left 50 ms after a drop (at most 5 s)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        for _ in range(100):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            time.sleep(0.05)
            if not any(resident_pages(path)):
                return
    finally:
        os.close(fd)
    raise AssertionError(f"pages of {path} stayed in memory after 100 drops")


def until_a_read_meets_a_cold_page(paths: list[Path], attempt: Callable[[], bool], tries: int = 50) -> None:
    """Drop the files' pages, then `attempt` a read, until one meets a cold page (it returns True).

    One try may find the bytes in memory after all: a readahead that lands after `drop_pages`
    brings a dropped page back, and this VM's disk sometimes finishes the read a RWF_NOWAIT miss
    starts before the kernel looks again. `attempt` then checks the bytes and returns False.
    A disk that answers every try that fast cannot show a cold page: the test is skipped."""
    for _ in range(tries):
        for path in paths:
            drop_pages(path)
        if attempt():
            return
    pytest.skip(f"this disk answered all {tries} reads of dropped pages before the kernel looked again")


def wait_until_resident(path: Path, pages: list[int]) -> None:
    """Wait (at most 5 s) until the kernel has read these pages in, in the background."""
    for _ in range(500):
        resident = resident_pages(path)
        if all(resident[p] for p in pages):
            return
        time.sleep(0.01)
    raise AssertionError(f"pages {pages} of {path} were never read in: {[p for p in pages if not resident[p]]}")


def page_cache_bypass_unavailable(path: Path) -> str | None:
    """Why an O_DIRECT read of files under `path` would still leave their pages in memory (or
    could not be made), or None: a filesystem whose files live in memory (tmpfs), or one that
    refuses O_DIRECT."""
    fstype = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True).stdout.strip()
    if fstype in ("tmpfs", "ramfs"):
        return f"{path} is on {fstype}: its files are pages in memory"
    probe = path / ".o_direct_probe" if path.is_dir() else path
    created = not probe.exists()
    try:
        if created:
            probe.write_bytes(b"\0" * 8192)
        os.close(os.open(probe, os.O_RDONLY | os.O_DIRECT))
    except OSError as e:
        return f"{path}: O_DIRECT refused ({e.strerror})"
    finally:
        if created:
            probe.unlink(missing_ok=True)
    return None
