"""Erasure-coded reads (issue 14), every contender in the same run, on the same EC file:

    .venv/bin/python -m tests.bench.ec [--reps N] [--reads N] [--size MiB]

A 5-DataNode cluster with RS-3-2-1024k (16 MiB internal blocks: 48 MiB groups). The Java client
writes the file (so Java computed the parity). The referee is `tests.bench.run.measure`: every
contender in a process of its own, warm-ups kept out of the counters, rounds interleaved,
medians reported, CPU per read beside reads/s.

- W1: random page-aligned 4 KiB reads: the mount (default page-cache mode), the library and
  Java pread; reads/s, CPU per read, BytesRead amplification (the DataNodes' own counter).
- W3: one sequential read of the whole file: the mount (page cache, the default, and direct_io),
  the library (two 8 MiB reads in flight) and Java's stream read; MB/s. Also, with no target, the
  page-cache mount reading a file 200 of whose pages are still cached (its warm-up's, which the
  referee otherwise drops): a sequential read after random ones, which the kernel's readahead
  splits into three times as many FUSE requests.
- Degraded: the same W1 with the DataNode of one data unit stopped, mount and Java pread.
- Decode: MB/s of `erasure.decode` rebuilding one 1 MiB unit (RS-3-2, RS-6-3, RS-LEGACY-6-3,
  XOR-2-1), in this process.

Prints one JSON document. Wall-clock figures on a noisy 2-core machine: read the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from hdfsfuse.erasure import codec as erasure
from tests.bench.run import (
    Contender,
    Result,
    _java,
    _worker,
    daemon_pid,
    measure,
    random_local_file,
    random_reads,
    summary,
    write_offsets,
)
from tests.minidfs import ClusterOptions, MiniDfs
from tests.mounting import Mount

MiB = 1 << 20
PATH = "/ec/bench"
KEPT = "hdfsfuse mount (page cache, warm-up pages kept)"


def decode_speed() -> dict[str, float]:
    """MB/s rebuilding one lost data unit of 1 MiB from k survivors (median of 5)."""
    out = {}
    for policy in (erasure.SYSTEM_POLICIES[2], erasure.SYSTEM_POLICIES[1], erasure.SYSTEM_POLICIES[3],
                   erasure.SYSTEM_POLICIES[4]):
        k, m = policy.data_units, policy.parity_units
        data = [os.urandom(MiB) for _ in range(k)]
        units = data + erasure.encode(policy.codec, data, m)
        inputs = {u: units[u] for u in range(1, k + 1)}  # unit 0 lost: one parity unit stands in
        times = []
        for _ in range(5):
            t = time.perf_counter()
            got = erasure.decode(policy.codec, k, m, inputs, [0], MiB)
            times.append(time.perf_counter() - t)
            assert got[0] == data[0]
        out[policy.name] = round(MiB / statistics.median(times) / 1e6, 1)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--reads", type=int, default=2000)
    p.add_argument("--size", type=int, default=96, help="file size in MiB")
    a = p.parse_args()
    size = a.size * MiB
    report: dict[str, object] = {"decode_mb_per_s": decode_speed()}
    with MiniDfs(ClusterOptions(datanodes=5, block_size=16 * MiB), heap="2g") as cluster, \
            tempfile.TemporaryDirectory() as work:
        cluster.set_ec_policy("/ec", "RS-3-2-1024k")
        local = Path(work) / "data"
        random_local_file(local, size, seed=1)
        cluster.put(local, PATH)
        local.unlink()

        warm = write_offsets(Path(work) / "warm", random_reads(size, 200, 4096, True, 99))
        w1 = write_offsets(Path(work) / "w1", random_reads(size, a.reads, 4096, True, 11))
        mount = Mount(cluster)
        direct = Mount(cluster, "direct_io")
        try:
            random_contenders = [
                Contender("hdfsfuse mount (page cache)", _worker("mount", cluster, mount), lambda: daemon_pid(mount)),
                Contender("hdfsfuse library", _worker("library", cluster)),
                Contender("Java pread", _java(cluster, "pread")),
            ]
            seq_contenders = [
                Contender("hdfsfuse mount (page cache)", _worker("mount", cluster, mount), lambda: daemon_pid(mount)),
                Contender("hdfsfuse mount (direct_io)", _worker("mount", cluster, direct), lambda: daemon_pid(direct)),
                Contender(KEPT, _worker("mount", cluster, mount, "--keep-warm-pages"), lambda: daemon_pid(mount)),
                Contender("hdfsfuse library", _worker("library", cluster)),
                Contender("Java stream read", _java(cluster, "stream")),
            ]
            measure(cluster, "warm-up", random_contenders[2], 0, random_contenders[2].argv(PATH, w1, warm, 1))
            raw: dict[tuple[str, str], list[Result]] = {}
            for rep in range(a.reps):  # interleaved: every contender once per round
                for c in random_contenders:
                    result = measure(cluster, "W1", c, a.reads, c.argv(PATH, w1, warm, 1))
                    raw.setdefault(("W1", c.name), []).append(result)
                for c in seq_contenders:
                    result = measure(cluster, "W3", c, 1, c.argv(PATH, "seq", warm, 1))
                    raw.setdefault(("W3", c.name), []).append(result)
                print(f"round {rep + 1} done", flush=True)
            # Degraded: the DataNode holding data unit 1 of the first group is stopped.
            lost = cluster.stop_datanode(path=PATH, block_index=0, internal_index=1)
            report["degraded_lost_datanode"] = lost
            for _ in range(a.reps):
                for c in (random_contenders[0], random_contenders[2]):
                    raw.setdefault(("W1 degraded", c.name), []).append(
                        measure(cluster, "W1 degraded", c, a.reads, c.argv(PATH, w1, warm, 1)))
        finally:
            mount.unmount()
            direct.unmount()
    app = a.reads * 4096
    figures: dict[str, dict[str, dict[str, float]]] = {}
    for (workload, name), results in raw.items():
        figures.setdefault(workload, {})[name] = summary(results, size if workload == "W3" else app)
    java_w1 = figures["W1"]["Java pread"]["reads_per_s"]
    for f in figures["W1"].values():
        f["vs_java_pread"] = round(f["reads_per_s"] / java_w1, 3)
    java_w3 = figures["W3"]["Java stream read"]["mb_per_s"]
    for f in figures["W3"].values():
        f["vs_java_stream"] = round(f["mb_per_s"] / java_w3, 3)
    report["figures"] = figures
    report["file"] = {"size": size, "policy": "RS-3-2-1024k", "internal_block_size": 16 * MiB, "reads": a.reads,
                      "reps": a.reps}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
