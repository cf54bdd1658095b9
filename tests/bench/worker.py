"""One benchmark contender in a process of its own, driven by the referee (`tests.bench.run`).

    python -m tests.bench.worker --kind mount|library|native|disk --path P --offsets FILE
        [--warmup-offsets FILE] [--threads N] [--mount-dir D [--keep-warm-pages]] [--uri U --conf-dir C]

The same rule as the Java contender (`Bench.java`): do the warm-up reads, print `warmed`, wait
for a line on stdin (the referee reads its counters in between, so warm-ups are kept out of
them), do the timed reads, print one JSON line {seconds, bytes, cpu_seconds}. `cpu_seconds` is
this process's own CPU during the timed reads (for the mount, the referee adds the daemon's).
An offsets file holds "offset length" per line; `--offsets seq` streams the whole file.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

MiB = 1 << 20
Reads = list[tuple[int, int]]


def _offsets(path: str | None) -> Reads:
    if not path:
        return []
    with open(path) as f:
        return [(int(a), int(b)) for a, b in (line.split() for line in f if line.strip())]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _threads(work: Callable[[Reads], int], reads: Reads, threads: int) -> int:
    parts = [reads[i::threads] for i in range(threads)]
    done: list[int] = []
    ts = [threading.Thread(target=lambda p=p: done.append(work(p))) for p in parts]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(done)


def _sync_and_time(warm: Callable[[], object], timed: Callable[[], int]) -> None:
    warm()
    print("warmed", flush=True)
    sys.stdin.readline()
    c0, t0 = _cpu(), time.perf_counter()
    n = timed()
    seconds, cpu = time.perf_counter() - t0, _cpu() - c0
    print(json.dumps({"seconds": seconds, "bytes": n, "cpu_seconds": cpu}), flush=True)


def mount(a: argparse.Namespace, reads: Reads, warmup: Reads) -> None:
    path = os.path.join(a.mount_dir, a.path.lstrip("/"))

    def work(part: Reads) -> int:
        fd = os.open(path, os.O_RDONLY)
        try:
            return sum(len(os.pread(fd, n, off)) for off, n in part)
        finally:
            os.close(fd)

    def sequential() -> int:
        total = 0
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(MiB):
                total += len(chunk)
        return total

    def warm() -> None:
        work(warmup)
        if not a.keep_warm_pages:
            # The warm-up's pages leave the page cache, so the timed reads start from the same
            # place as every other contender's (none of them keeps a cache past its warm-up). Kept,
            # a sequential read of a file with 200 scattered 4 KiB pages cached becomes three times
            # as many FUSE requests: the kernel's readahead splits its window at every cached page.
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)

    _sync_and_time(warm, sequential if a.offsets == "seq" else lambda: _threads(work, reads, a.threads))


def library(a: argparse.Namespace, reads: Reads, warmup: Reads) -> None:
    import trio

    from hdfsfuse.client import HdfsClient
    from hdfsfuse.datanode.buffers import keep_read_buffers

    keep_read_buffers()  # as the mount does

    async def main() -> None:
        async with HdfsClient.connect(a.uri, conf_dir=a.conf_dir) as client:
            f = await client.open(a.path)

            async def run(rs: Reads, threads: int) -> int:
                got: list[int] = []

                async def work(part: Reads) -> None:
                    for off, n in part:
                        got.append(len(await client.read_range(f, off, n)))

                async with trio.open_nursery() as nursery:
                    for i in range(threads):
                        nursery.start_soon(work, rs[i::threads])
                return sum(got)

            async def sequential() -> int:
                chunk, total = 8 * MiB, 0
                for start in range(0, f.length, 2 * chunk):  # two chunks in flight
                    results: list[int] = []

                    async def fetch(off: int, out: list[int] = results) -> None:
                        out.append(len(await client.read_range(f, off, chunk)))

                    async with trio.open_nursery() as nursery:
                        for off in (start, start + chunk):
                            if off < f.length:
                                nursery.start_soon(fetch, off)
                    total += sum(results)
                return total

            await run(warmup, 1)
            print("warmed", flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)
            c0, t0 = _cpu(), time.perf_counter()
            n = await (sequential() if a.offsets == "seq" else run(reads, a.threads))
            seconds, cpu = time.perf_counter() - t0, _cpu() - c0
            print(json.dumps({"seconds": seconds, "bytes": n, "cpu_seconds": cpu}), flush=True)

    trio.run(main)


def native(a: argparse.Namespace, reads: Reads, warmup: Reads) -> None:
    from hdfs_native import Client

    client = Client(a.uri)

    def work(part: Reads) -> int:
        with client.read(a.path) as f:
            return sum(len(f.read_range(off, n)) for off, n in part)

    def sequential() -> int:
        total = 0
        with client.read(a.path) as f:
            while chunk := f.read(8 * MiB):
                total += len(chunk)
        return total

    _sync_and_time(lambda: work(warmup), sequential if a.offsets == "seq" else lambda: _threads(work, reads, a.threads))


def disk(a: argparse.Namespace, reads: Reads, warmup: Reads) -> None:
    """The local disk alone, the floor under any read of a file on it: `--path` a directory,
    each read 4 KiB-aligned somewhere in one of its files (picked by the offset). Each read is
    polled for, not slept on (through io_uring where it is built, else RWF_NOWAIT retries): a
    thread that sleeps on a disk pays for waking a halted vCPU besides, so this is the fastest
    a cold 4 KiB read comes off this disk. One thread: the ring has one slot."""
    import glob

    files = [f for f in sorted(glob.glob(os.path.join(a.path, "**", "*"), recursive=True))
             if os.path.isfile(f) and os.path.getsize(f) >= 1 * MiB]
    fds = [os.open(f, os.O_RDONLY) for f in files]
    sizes = [os.fstat(fd).st_size for fd in fds]
    for fd in fds:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    ring: Any = None
    try:
        from hdfsfuse.local._uring import Ring

        ring = Ring(1)
    except (ImportError, OSError):
        pass

    def read(fd: int, buf: bytearray, pos: int) -> int:
        if ring is not None:
            ring.read(0, fd, buf, pos)
            ring.submit()
            while not (done := ring.reap()):
                pass
            got = int(done[0][1])
            if got < 0:
                raise OSError(-got, os.strerror(-got))
            return got
        while True:
            try:
                return os.preadv(fd, [buf], pos, os.RWF_NOWAIT)
            except BlockingIOError:
                pass

    def work(part: Reads) -> int:
        total = 0
        for off, n in part:
            i = off // 4096 % len(fds)
            total += read(fds[i], bytearray(n), off % (sizes[i] - n) // 4096 * 4096)
        return total

    _sync_and_time(lambda: work(warmup), lambda: work(reads))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--kind", choices=["mount", "library", "native", "disk"], required=True)
    p.add_argument("--path", required=True)
    p.add_argument("--offsets", required=True)
    p.add_argument("--warmup-offsets")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--mount-dir")
    p.add_argument("--uri")
    p.add_argument("--conf-dir")
    p.add_argument("--keep-warm-pages", action="store_true",
                   help="mount: leave the warm-up's pages in the page cache for the timed reads")
    a = p.parse_args()
    reads = [] if a.offsets == "seq" else _offsets(a.offsets)
    {"mount": mount, "library": library, "native": native, "disk": disk}[a.kind](a, reads, _offsets(a.warmup_offsets))


if __name__ == "__main__":
    main()
