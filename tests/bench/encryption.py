"""Encryption zones (issue 49): the same file outside and inside a zone, every contender in the same run:

    .venv/bin/python -m tests.bench.encryption [--reps N] [--reads N] [--size MiB]

A 3-DataNode cluster with a KMS (`ClusterOptions(kms=True)`), 128 MiB blocks. The Java client writes
one local file twice: to /plain/bench and into the zone /ez/bench (key benchkey), so the DataNodes
hold the same bytes in clear and as AES/CTR ciphertext. The referee is `tests.bench.run.measure`:
each contender in a process of its own, warm-ups (other offsets) kept out of the counters, caches
dropped, rounds interleaved (every contender on both files once per round), medians reported.

- W1: random page-aligned 4 KiB reads: hdfsfuse's mount (default page-cache mode) and Java pread;
  reads/s, CPU per read (a mount's daemon plus its reader), the daemon's own, BytesRead amplification.
- W3: one sequential read of the whole file: the mount and Java's stream read; MB/s, CPU per MB.

Each contender's zone/plain ratio is the figure (issue 49: the mount's W1 >= 0.95, W3 >= 0.85), with
Java's own ratio beside it. After the rounds both files are read whole through the mount and
compared. Prints one JSON document; wall-clock figures on a noisy machine: read the ratios.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
from pathlib import Path

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
FILES = {"plain": "/plain/bench", "zone": "/ez/bench"}
TARGETS = {"W1": ("reads_per_s", 0.95), "W3": ("mb_per_s", 0.85)}


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(8 * MiB):
            h.update(chunk)
    return h.hexdigest()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--reads", type=int, default=2000)
    p.add_argument("--size", type=int, default=256, help="file size in MiB")
    a = p.parse_args()
    size = a.size * MiB
    raw: dict[tuple[str, str, str], list[Result]] = {}
    with MiniDfs(ClusterOptions(kms=True, block_size=128 * MiB), heap="2g") as cluster, \
            tempfile.TemporaryDirectory() as work:
        cluster.create_key("benchkey")
        cluster.create_encryption_zone("/ez", "benchkey")
        local = Path(work) / "data"
        random_local_file(local, size, seed=1)
        expected = _digest(local)
        for path in FILES.values():
            cluster.put(local, path)
        local.unlink()

        warm = write_offsets(Path(work) / "warm", random_reads(size, 200, 4096, True, 99))
        w1 = write_offsets(Path(work) / "w1", random_reads(size, a.reads, 4096, True, 11))
        mount = Mount(cluster)
        try:
            contenders = {
                "W1": [Contender("hdfsfuse mount", _worker("mount", cluster, mount), lambda: daemon_pid(mount)),
                       Contender("Java pread", _java(cluster, "pread"))],
                "W3": [Contender("hdfsfuse mount", _worker("mount", cluster, mount), lambda: daemon_pid(mount)),
                       Contender("Java stream read", _java(cluster, "stream"))],
            }
            java = contenders["W1"][1]
            for path in FILES.values():  # the JVM's and the KMS's first calls stay out of every round
                measure(cluster, "warm-up", java, 0, java.argv(path, w1, warm, 1))
            for rep in range(a.reps):
                for workload, offsets in (("W1", w1), ("W3", "seq")):
                    for c in contenders[workload]:
                        order = list(FILES.items()) if rep % 2 == 0 else list(reversed(FILES.items()))
                        for kind, path in order:
                            ops = a.reads if workload == "W1" else 1
                            raw.setdefault((workload, c.name, kind), []).append(
                                measure(cluster, workload, c, ops, c.argv(path, offsets, warm, 1)))
                print(f"round {rep + 1} done", flush=True)
            digests = {kind: _digest(Path(mount.path(path))) for kind, path in FILES.items()}
        finally:
            mount.unmount()
    if any(d != expected for d in digests.values()):
        raise SystemExit(f"wrong bytes through the mount: {digests} against {expected}")
    figures: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for (workload, name, kind), results in raw.items():
        app = size if workload == "W3" else a.reads * 4096
        f = summary(results, app)
        daemon = sorted(r.daemon_cpu_seconds for r in results)[len(results) // 2]
        if workload == "W3":
            f["cpu_ms_per_mb"] = round(f["cpu_us_per_read"] / 1000 / (size / 1e6), 3)
            f["daemon_cpu_ms_per_mb"] = round(daemon * 1000 / (size / 1e6), 3)
        else:
            f["daemon_cpu_us_per_read"] = round(daemon * 1e6 / a.reads, 1)
        figures.setdefault(workload, {}).setdefault(name, {})[kind] = f
    ratios = {}
    for workload, (key, target) in TARGETS.items():
        for name, kinds in figures[workload].items():
            ratio = round(kinds["zone"][key] / kinds["plain"][key], 3)
            ratios[f"{workload} {name}: zone/plain {key}"] = ratio
            if name == "hdfsfuse mount":
                ratios[f"{workload} {name}: target"] = f">= {target}: {'met' if ratio >= target else 'not met'}"
    report = {"ratios": ratios, "figures": figures, "bytes_checked": "both files whole through the mount, sha256",
              "file": {"size": size, "block_size": 128 * MiB, "reads": a.reads, "reps": a.reps}}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
