"""The persistent block cache (issue 18), every contender in the same run:

    .venv/bin/python -m tests.bench.cache [--reps N] [--reads N] [--size MiB]

A 3-DataNode cluster, 128 MiB blocks, one file of `--size` MiB (1 GiB by default) written by the
Java client. Each round mounts hdfsfuse (default page-cache mode) with an empty cache directory,
then, with the referee of `tests.bench.run.measure` (contenders in their own processes, warm-ups
kept out of the counters, caches dropped before each measurement, so the second read comes from
the cache's files on local disk, not from memory):

- W3 first: the whole file sequentially, cache empty (it fills as it goes);
- W3 second: the whole file again, from the cache;
- W1 cached: random page-aligned 4 KiB reads on the cached mount;
- W1 hdfs-native and W1 without a cache (a plain mount), the same offsets;
- W1 warm, for the mount with its cache and for hdfs-native: caches not dropped, the cache's
  files (or, for hdfs-native, the DataNodes' block files, by one sequential read) in the
  kernel's memory beforehand, other offsets than W1's;
- the ceiling of a cold cached W1 for any pyfuse3 daemon: a cold cached read is a FUSE round
  trip, then a disk read, so no daemon answers faster than the no-op one (`noop_fs`, W1's
  offsets) plus the local disk alone (the same number of random 4 KiB reads of the cache's
  files, each polled for: the fastest this disk gives them).

Rounds are interleaved; medians are reported with CPU per read and DataNode BytesRead.
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from tests.bench.run import (
    Contender,
    FloorMount,
    Result,
    _worker,
    daemon_pid,
    measure,
    random_reads,
    summary,
    write_random_file,
)
from tests.minidfs import ClusterOptions, MiniDfs
from tests.mounting import Mount

MiB = 1 << 20
PATH = "/cache/big"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--reads", type=int, default=2000)
    p.add_argument("--size", type=int, default=1024, help="file size in MiB")
    a = p.parse_args()
    size = a.size * MiB
    raw: dict[str, list[Result]] = {}
    with MiniDfs(ClusterOptions(datanodes=3, block_size=128 * MiB), heap="2g") as cluster, \
            tempfile.TemporaryDirectory() as work:
        write_random_file(cluster, Path(work), PATH, size, 1)
        offsets = Path(work) / "w1"
        offsets.write_text("".join(f"{o} {n}\n" for o, n in random_reads(size, a.reads, 4096, True, 11)))
        offsets2 = Path(work) / "w1-warm"  # other offsets: the kernel's FUSE page cache has none of them
        offsets2.write_text("".join(f"{o} {n}\n" for o, n in random_reads(size, a.reads, 4096, True, 12)))
        no_warmup = Path(work) / "none"
        no_warmup.write_text("")
        warm = Path(work) / "warm"
        warm.write_text("".join(f"{o} {n}\n" for o, n in random_reads(size, 200, 4096, True, 99)))
        plain = Mount(cluster)
        floor: FloorMount | None = None
        try:
            floor = FloorMount({PATH: size})
            floor_contender = Contender("FUSE floor", _worker("mount", cluster, floor), lambda f=floor: f.proc.pid)
            disk = Contender("local disk", _worker("disk", cluster))
            native = Contender("hdfs-native", _worker("native", cluster))
            uncached = Contender("hdfsfuse mount, no cache", _worker("mount", cluster, plain),
                                 lambda: daemon_pid(plain))
            for rep in range(a.reps):
                cache_dir = Path(work) / f"cache-{rep}"
                cached = Mount(cluster, f"cache_dir={cache_dir}", "cache_size=2G")
                try:
                    c = Contender("hdfsfuse mount + cache", _worker("mount", cluster, cached),
                                  lambda m=cached: daemon_pid(m))  # type: ignore[misc]
                    # No warm-up reads for the first pass: they would fill the cache.
                    raw.setdefault("W3 first (cache empty)", []).append(
                        measure(cluster, "W3 first", c, 1, c.argv(PATH, "seq", str(no_warmup), 1)))
                    raw.setdefault("W3 second (from the cache)", []).append(
                        measure(cluster, "W3 second", c, 1, c.argv(PATH, "seq", str(no_warmup), 1)))
                    raw.setdefault("W1 hdfsfuse mount + cache", []).append(
                        measure(cluster, "W1", c, a.reads, c.argv(PATH, str(offsets), str(warm), 1)))
                    # Warm: the cache's files already in the kernel's memory (a machine with RAM
                    # to spare, re-reading); hdfs-native's rival is the DataNodes' files in memory.
                    for blk in cache_dir.rglob("*.blk"):  # the cache's files into memory, not the mount's pages
                        blk.read_bytes()
                    raw.setdefault("W1 warm: hdfsfuse mount + cache", []).append(
                        measure(cluster, "W1", c, a.reads, c.argv(PATH, str(offsets2), str(warm), 1), cold=False))
                finally:
                    cached.unmount()
                raw.setdefault("W1 local disk alone (the cache's files)", []).append(
                    measure(cluster, "W1", disk, a.reads, disk.argv(str(cache_dir), str(offsets), str(warm), 1)))
                raw.setdefault("W1 FUSE floor (no-op daemon)", []).append(
                    measure(cluster, "W1", floor_contender, a.reads,
                            floor_contender.argv(PATH, str(offsets), str(warm), 1)))
                for name, contender in (("W1 hdfs-native", native), ("W1 hdfsfuse mount, no cache", uncached)):
                    raw.setdefault(name, []).append(
                        measure(cluster, "W1", contender, a.reads, contender.argv(PATH, str(offsets), str(warm), 1)))
                measure(cluster, "warming", native, 1, native.argv(PATH, "seq", str(no_warmup), 1), cold=False)
                raw.setdefault("W1 warm: hdfs-native", []).append(
                    measure(cluster, "W1", native, a.reads, native.argv(PATH, str(offsets2), str(warm), 1), cold=False))
                print(f"round {rep + 1} done", flush=True)
        finally:
            plain.unmount()
            if floor is not None:
                floor.unmount()
    figures = {name: summary(rs, size if name.startswith("W3") else a.reads * 4096) for name, rs in raw.items()}
    first, second = figures["W3 first (cache empty)"], figures["W3 second (from the cache)"]
    ceiling = 1 / sum(1 / figures[name]["reads_per_s"]
                      for name in ("W1 FUSE floor (no-op daemon)", "W1 local disk alone (the cache's files)"))
    report = {
        "file": {"size": size, "block_size": 128 * MiB, "reads": a.reads, "reps": a.reps},
        "figures": figures,
        "second_vs_first_sequential": round(second["mb_per_s"] / first["mb_per_s"], 3),
        "cached_w1_vs_hdfs_native": round(figures["W1 hdfsfuse mount + cache"]["reads_per_s"]
                                          / figures["W1 hdfs-native"]["reads_per_s"], 3),
        "cold_w1_ceiling_reads_per_s": round(ceiling, 1),
        "cold_w1_ceiling_vs_hdfs_native": round(ceiling / figures["W1 hdfs-native"]["reads_per_s"], 3),
        "cached_w1_vs_ceiling": round(figures["W1 hdfsfuse mount + cache"]["reads_per_s"] / ceiling, 3),
        "warm_cached_w1_vs_warm_hdfs_native": round(figures["W1 warm: hdfsfuse mount + cache"]["reads_per_s"]
                                                    / figures["W1 warm: hdfs-native"]["reads_per_s"], 3),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
