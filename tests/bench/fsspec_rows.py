"""The fsspec rows: hdfsfuse's `HdfsFileSystem` against hdfs-native's fsspec class, same cluster, same run.

    .venv/bin/python -m tests.bench.fsspec_rows [--rounds N] [--size-mib N] [--out FILE]

Workloads, each contender in a fresh process of its own (`worker`), with a warm-up that reads
other bytes before the clock starts, rounds interleaved:

- `scan`: a column-projected `pyarrow.dataset` scan (2 of 24 columns) of a 4-file parquet data set:
  seconds, and the DataNodes' BytesRead;
- `ranges`: 4 KiB `cat_file` ranges at random offsets of a large file: ops/s and CPU per op;
- `whole`: `cat_file` of the whole large file: MB/s and CPU per MB.

BytesRead comes from the DataNodes' own counters, read after the worker exits. Figures are
medians over the rounds; the report gives each workload's ratio to hdfs-native.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.minidfs import ClusterOptions, MiniDfs

MiB = 1024 * 1024
COLUMNS = ["c3", "c17"]
WORKLOADS = ("scan", "ranges", "whole")
CONTENDERS = ("hdfsfuse", "hdfs-native")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _filesystem(contender: str, uri: str, conf_dir: str) -> Any:
    if contender == "hdfsfuse":
        from hdfsfuse.fsspec import HdfsFileSystem

        return HdfsFileSystem(uri=uri, hadoop_conf=conf_dir)
    os.environ["HADOOP_CONF_DIR"] = conf_dir
    from hdfs_native.fsspec import HdfsFileSystem as NativeFileSystem

    host, port = uri.removeprefix("hdfs://").split(":")
    return NativeFileSystem(host=host, port=int(port))


def _warm() -> None:
    """Tell the parent the warm-up is done; start when it has read the counters."""
    print("warm", flush=True)
    sys.stdin.readline()


def worker(a: argparse.Namespace) -> None:
    import pyarrow.dataset as ds

    fs = _filesystem(a.contender, a.uri, a.conf_dir)
    size = fs.info("/bench/large")["size"]
    rng = random.Random(a.seed)
    ops = 0
    if a.workload == "scan":
        ds.dataset("/bench/warm", filesystem=fs, format="parquet").to_table(columns=COLUMNS)
        _warm()
        t0, c0 = time.perf_counter(), _cpu()
        table = ds.dataset("/bench/parquet", filesystem=fs, format="parquet").to_table(columns=COLUMNS)
        ops, app = 1, table.nbytes
    elif a.workload == "ranges":
        for _ in range(50):
            off = rng.randrange(size - 4096)
            fs.cat_file("/bench/warm-large", off, off + 4096)
        _warm()
        t0, c0 = time.perf_counter(), _cpu()
        for _ in range(a.ranges):
            off = rng.randrange(size - 4096)
            assert len(fs.cat_file("/bench/large", off, off + 4096)) == 4096
        ops, app = a.ranges, a.ranges * 4096
    else:
        fs.cat_file("/bench/warm-large", 0, 8 * MiB)
        _warm()
        t0, c0 = time.perf_counter(), _cpu()
        data = fs.cat_file("/bench/large")
        assert len(data) == size
        ops, app = 1, size
    print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": _cpu() - c0, "ops": ops, "app_bytes": app}),
          flush=True)
    os._exit(0)  # hdfs-native's runtime can abort while the interpreter tears down ("terminate called ...")


def _write_data(cluster: MiniDfs, size_mib: int) -> None:
    import numpy as np
    import pandas as pd

    with tempfile.TemporaryDirectory() as work:
        large = Path(work) / "large"
        with large.open("wb") as f:
            for _ in range(size_mib):
                f.write(os.urandom(MiB))
        cluster.put(large, "/bench/large")
        cluster.put(large, "/bench/warm-large")
        rng = np.random.default_rng(5)
        for name, files in (("parquet", 4), ("warm", 1)):
            for i in range(files):
                frame = pd.DataFrame({f"c{j}": rng.standard_normal(200_000) for j in range(24)})
                local = Path(work) / f"{name}-{i}.parquet"
                frame.to_parquet(local, compression="snappy", row_group_size=50_000)
                cluster.put(local, f"/bench/{name}/part-{i}.parquet")


def _run(cluster: MiniDfs, contender: str, workload: str, seed: int, ranges: int) -> dict[str, float]:
    """One worker: its warm-up, then (counters read) the measured part."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.fsspec_rows", "worker", "--contender", contender, "--workload", workload,
         "--uri", cluster.uri, "--conf-dir", cluster.conf_dir, "--seed", str(seed), "--ranges", str(ranges)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    assert proc.stdout.readline().strip() == "warm", f"{contender} {workload}: the worker failed its warm-up"
    time.sleep(0.5)  # the DataNodes account a read just after they send it
    before = cluster.metrics_total()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    out, _ = proc.communicate(timeout=1800)
    if proc.returncode:
        raise RuntimeError(f"{contender} {workload}: the worker failed ({proc.returncode})")
    figures = json.loads(out.strip().splitlines()[-1])
    time.sleep(0.5)
    after = cluster.metrics_total()
    figures["bytes_read"] = after["BytesRead"] - before["BytesRead"]
    return figures


def _summary(runs: list[dict[str, float]], workload: str) -> dict[str, float]:
    med = {k: statistics.median(r[k] for r in runs) for k in ("seconds", "cpu", "bytes_read", "app_bytes", "ops")}
    if workload == "scan":
        return {"seconds": med["seconds"], "bytes_read_mb": med["bytes_read"] / 1e6, "cpu_s": med["cpu"]}
    if workload == "ranges":
        return {"ops_per_s": med["ops"] / med["seconds"], "cpu_us_per_op": 1e6 * med["cpu"] / med["ops"],
                "amplification": med["bytes_read"] / med["app_bytes"]}
    mb = med["app_bytes"] / 1e6
    return {"mb_per_s": mb / med["seconds"], "cpu_ms_per_mb": 1e3 * med["cpu"] / mb,
            "amplification": med["bytes_read"] / med["app_bytes"]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", nargs="?", default="run", choices=["run", "worker"])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--size-mib", type=int, default=1024, help="the large file's size (default 1 GiB)")
    p.add_argument("--ranges", type=int, default=2000, help="4 KiB ranges per ranges run")
    p.add_argument("--out", type=Path)
    p.add_argument("--contender", choices=CONTENDERS)
    p.add_argument("--workload", choices=WORKLOADS)
    p.add_argument("--uri")
    p.add_argument("--conf-dir")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.command == "worker":
        worker(a)
        return
    raw: dict[str, dict[str, list[dict[str, float]]]] = {c: {w: [] for w in WORKLOADS} for c in CONTENDERS}
    with MiniDfs(ClusterOptions(datanodes=3, block_size=128 * MiB)) as cluster:
        _write_data(cluster, a.size_mib)
        for r in range(a.rounds):
            order = CONTENDERS[r % 2:] + CONTENDERS[: r % 2]
            for workload in WORKLOADS:
                for contender in order:
                    figures = _run(cluster, contender, workload, 1000 + r, a.ranges)
                    raw[contender][workload].append(figures)
                    print(f"round {r} {contender} {workload}: {figures}", file=sys.stderr)
    summary = {c: {w: _summary(runs, w) for w, runs in by.items()} for c, by in raw.items()}
    ours, native = summary["hdfsfuse"], summary["hdfs-native"]
    ratios = {
        "scan_speed": native["scan"]["seconds"] / ours["scan"]["seconds"],
        "scan_bytes": ours["scan"]["bytes_read_mb"] / native["scan"]["bytes_read_mb"],
        "ranges_ops": ours["ranges"]["ops_per_s"] / native["ranges"]["ops_per_s"],
        "whole_mb_per_s": ours["whole"]["mb_per_s"] / native["whole"]["mb_per_s"],
    }
    report = {"rounds": a.rounds, "size_mib": a.size_mib, "summary": summary, "ratios": ratios, "raw": raw}
    text = json.dumps(report, indent=1)
    if a.out:
        a.out.write_text(text + "\n")
    print(json.dumps({"summary": summary, "ratios": ratios}, indent=1))


if __name__ == "__main__":
    main()
