"""Read buffers reused from the heap (hdfsfuse.datanode.buffers): counted in page faults, not time."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Eight rounds of six 4 MiB read buffers in flight at once, touched and freed, as a sequential
# read's pieces and chunks are; prints the minor page faults the last eight rounds took.
ROUNDS = """
import resource, sys
from hdfsfuse.datanode.buffers import keep_read_buffers
if sys.argv[1] == "tuned":
    assert keep_read_buffers()
def read_round():
    buffers = [bytearray(4 << 20) for _ in range(6)]
    for b in buffers:
        b[::4096] = b"x" * len(range(0, len(b), 4096))
for i in range(10):
    if i == 2:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    read_round()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", ROUNDS, mode], capture_output=True, text=True, check=True)
    return int(out.stdout)


def test_freed_read_buffers_are_reused_without_page_faults() -> None:
    pages = 8 * 6 * (4 << 20) // 4096
    assert faults("default") > pages // 2  # glibc maps fresh pages for most buffers, every round
    assert faults("tuned") < pages // 100  # the heap keeps them: next to no faults


def test_read_buffers_are_bytearrays_of_their_size_left_unzeroed() -> None:
    from hdfsfuse.datanode import buffers
    from hdfsfuse.datanode.checksum import chunked_crc

    assert buffers.read_buffer is (bytearray if chunked_crc is None else chunked_crc.buffer)
    for n in (0, 1, 4096, 3 << 20):
        b = buffers.read_buffer(n)
        assert type(b) is bytearray and len(b) == n
        b[-1:] = b"x"  # resizable and writable like any bytearray
    if chunked_crc is not None:
        with pytest.raises(ValueError, match="negative"):
            chunked_crc.buffer(-1)
