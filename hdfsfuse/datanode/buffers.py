"""Keep large read buffers on the heap, where freed ones are reused (glibc only).

Every read lands in a fresh bytearray of its length: a block piece, a striped group's output, a
readahead chunk. glibc serves allocations above its mmap threshold (128 KiB at first, moving up
to the largest block freed) with a new anonymous mapping each time, and the kernel zero-fills
every 4 KiB page of it on first touch: as much CPU as the packet parsing and checksum
verification of the same bytes together. With a fixed 32 MiB threshold (glibc's maximum) and a
128 MiB trim threshold, a freed buffer stays in the heap and the next read reuses its pages.

The price is memory: the heap keeps up to 128 MiB that reads freed, beyond what is in use.
The mount calls this at start; a program using the library may call it too.

`read_buffer(n)` is such a buffer without the n zeros `bytearray(n)` writes first: for a
buffer that a read fills entirely before anyone sees it (a READ_BLOCK parser's output: done
only once packets covered every byte; a striped group's, covered by its units' spans).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable

from hdfsfuse.datanode.checksum import chunked_crc

log = logging.getLogger(__name__)

# Without the C extension, bytearray(n): zeroed, and as good.
read_buffer: Callable[[int], bytearray] = getattr(chunked_crc, "buffer", bytearray)
# aligned_buffer(n, align): the same, its bytes starting at a multiple of `align` (as O_DIRECT
# reads need); None without the C extension.
aligned_buffer: Callable[[int, int], bytearray] | None = getattr(chunked_crc, "buffer", None)

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's HEAP_MAX-bounded maximum on 64-bit
TRIM_THRESHOLD = 128 << 20


def keep_read_buffers() -> bool:
    """Tune glibc malloc so freed read buffers are reused; False where that is not possible."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):  # not glibc (musl has no mallopt)
        log.debug("no mallopt in %s: read buffers come from the default allocator", name)
        return False
    done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if not done:
        log.debug("mallopt refused the thresholds: read buffers come from the default allocator")
    return done
