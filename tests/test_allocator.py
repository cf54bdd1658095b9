"""Read buffers reused from the heap (hdfsfuse.allocator): counted in page faults, not time."""

from __future__ import annotations

import subprocess
import sys

# Eight rounds of six 4 MiB read buffers in flight at once, touched and freed, as a sequential
# read's pieces and chunks are; prints the minor page faults the last eight rounds took.
ROUNDS = """
import resource, sys
from hdfsfuse.allocator import keep_read_buffers
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
