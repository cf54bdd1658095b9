"""Short-circuit local reads (issue 17), every contender in the same run:

    .venv/bin/python -m tests.bench.short_circuit [--reps N] [--reads N] [--size MiB] [--seq-size MiB]

A 3-DataNode --short-circuit cluster (every DataNode on this host, each with its domain socket),
128 MiB blocks, files written by the Java client. With the referee of `tests.bench.run.measure`
(each contender in its own process, the same warm-ups kept out of the counters, interleaved
rounds, medians, CPU per read: the mount's daemon plus its reader):

- W1: random page-aligned 4 KiB reads of a `--size` MiB file;
- W3: one sequential read of a `--seq-size` MiB file;

for the FUSE floor (a no-op pyfuse3 daemon answering from memory: what FUSE alone costs here),
hdfsfuse's mount (default page-cache mode) with short-circuit on (the default) and off,
hdfs-native (Rust; it has no short-circuit reads), colinmarc/hdfs (Go, ReadAt and Read; none
either), and the Java client with short-circuit on (`-Djava.library.path` at the same
libhadoop.so as the DataNodes), which is the only other reader that can do it.

Both "cold" (caches dropped before each measurement: the block files come from disk, for the
DataNodes and for short-circuit readers alike) and "warm" (every replica's block and meta files
in the kernel's memory, read beforehand; the mount's own pages are never warm: W1 warm uses other
offsets than W1 cold and the warm-ups).
Prints one JSON document; DataNode BytesRead and wire bytes show who went over TCP.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

from tests.bench.run import (
    Contender,
    FloorMount,
    Result,
    _worker,
    colinmarc_argv,
    daemon_pid,
    measure,
    random_reads,
    summary,
    write_random_file,
)
from tests.minidfs import ClusterOptions, MiniDfs, ensure_built, ensure_native_library
from tests.mounting import Mount

MiB = 1 << 20
RANDOM, SEQUENTIAL = "/sc/random", "/sc/sequential"


def _java_short_circuit(cluster: MiniDfs, mode: str) -> Callable[[str, str, str, int], list[str]]:
    library = str(ensure_native_library())

    def argv(path: str, offsets: str, warmup: str, threads: int) -> list[str]:
        args = ["java", "-Xmx1g", f"-Djava.library.path={library}", "-cp", ensure_built(), "hdfsfuse.minidfs.Bench",
                "--conf-dir", cluster.conf_dir, "--uri", cluster.uri, "--mode", "seq" if offsets == "seq" else mode,
                "--path", path, "--threads", str(threads), "--warmup-offsets", warmup]
        return args + ([] if offsets == "seq" else ["--offsets", offsets])

    return argv


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--reads", type=int, default=5000)
    p.add_argument("--size", type=int, default=256, help="W1 file size in MiB")
    p.add_argument("--seq-size", type=int, default=1024, help="W3 file size in MiB")
    a = p.parse_args()
    size, seq_size = a.size * MiB, a.seq_size * MiB
    raw: dict[str, list[Result]] = {}
    with MiniDfs(ClusterOptions(datanodes=3, block_size=128 * MiB, short_circuit=True), heap="2g") as cluster, \
            tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_random_file(cluster, work, RANDOM, size, 1)
        write_random_file(cluster, work, SEQUENTIAL, seq_size, 2)
        w1 = work / "w1"
        w1.write_text("".join(f"{o} {n}\n" for o, n in random_reads(size, a.reads, 4096, True, 11)))
        w1_warm = work / "w1-warm"  # other offsets: nothing of them in the mount's page cache
        w1_warm.write_text("".join(f"{o} {n}\n" for o, n in random_reads(size, a.reads, 4096, True, 12)))
        warmups = work / "warmups"
        warmups.write_text("".join(f"{o} {n}\n" for o, n in random_reads(size, 200, 4096, True, 99)))
        seq_warmups = work / "seq-warmups"
        seq_warmups.write_text("".join(f"{o} {n}\n" for o, n in random_reads(seq_size, 200, 4096, True, 98)))
        local, remote = Mount(cluster), Mount(cluster, "short_circuit=off")
        floor = FloorMount({RANDOM: size, SEQUENTIAL: seq_size})
        try:
            contenders = [
                Contender("FUSE floor (no-op pyfuse3 daemon)", _worker("mount", cluster, floor),
                          lambda: floor.proc.pid),
                Contender("hdfsfuse mount, short-circuit", _worker("mount", cluster, local), lambda: daemon_pid(local)),
                Contender("hdfsfuse mount, short_circuit=off", _worker("mount", cluster, remote),
                          lambda: daemon_pid(remote)),
                Contender("hdfs-native", _worker("native", cluster)),
                Contender("colinmarc/hdfs", colinmarc_argv(cluster)),
            ]
            java_pread = Contender("Java pread, short-circuit", _java_short_circuit(cluster, "pread"))
            java_stream = Contender("Java stream, short-circuit", _java_short_circuit(cluster, "stream"))
            for rep in range(a.reps):
                for c in [*contenders, java_pread]:
                    raw.setdefault(f"W1 cold: {c.name}", []).append(
                        measure(cluster, "W1", c, a.reads, c.argv(RANDOM, str(w1), str(warmups), 1)))
                for c in [*contenders, java_stream]:
                    raw.setdefault(f"W3 cold: {c.name}", []).append(
                        measure(cluster, "W3", c, 1, c.argv(SEQUENTIAL, "seq", str(seq_warmups), 1)))
                for replica_file in cluster.replica_files():  # every replica's files into memory
                    with open(replica_file, "rb") as f:
                        while f.read(16 * MiB):
                            pass
                for c in [*contenders, java_pread]:
                    raw.setdefault(f"W1 warm: {c.name}", []).append(
                        measure(cluster, "W1", c, a.reads, c.argv(RANDOM, str(w1_warm), str(warmups), 1), cold=False))
                print(f"round {rep + 1} done", flush=True)
        finally:
            local.unmount()
            remote.unmount()
            floor.unmount()
    figures = {name: summary(rs, seq_size if name.startswith("W3") else a.reads * 4096) for name, rs in raw.items()}

    def ratio(workload: str, key: str, rival: str) -> float:
        ours = figures[f"{workload}: hdfsfuse mount, short-circuit"][key]
        return round(ours / figures[f"{workload}: {rival}"][key], 3)

    report = {
        "files": {"w1_size": size, "w3_size": seq_size, "block_size": 128 * MiB, "reads": a.reads, "reps": a.reps},
        "figures": figures,
        "w1_cold_vs_hdfs_native": ratio("W1 cold", "reads_per_s", "hdfs-native"),
        "w1_warm_vs_hdfs_native": ratio("W1 warm", "reads_per_s", "hdfs-native"),
        "w1_cold_vs_short_circuit_off": ratio("W1 cold", "reads_per_s", "hdfsfuse mount, short_circuit=off"),
        "w1_warm_vs_java_short_circuit": ratio("W1 warm", "reads_per_s", "Java pread, short-circuit"),
        # The most any FUSE daemon written with pyfuse3 could show against hdfs-native here.
        "w1_warm_floor_vs_hdfs_native": round(figures["W1 warm: FUSE floor (no-op pyfuse3 daemon)"]["reads_per_s"]
                                              / figures["W1 warm: hdfs-native"]["reads_per_s"], 3),
        "w3_vs_colinmarc": ratio("W3 cold", "mb_per_s", "colinmarc/hdfs"),
        "w3_vs_short_circuit_off": ratio("W3 cold", "mb_per_s", "hdfsfuse mount, short_circuit=off"),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
