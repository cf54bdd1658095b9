"""Side-by-side benchmarks: hdfsfuse against the Java client and hdfs-native, on one cluster.

    .venv/bin/python -m tests.bench.run [--quick | --tiny] [--reps N] [--out DIR]

Starts a 3-DataNode MiniDFSCluster, writes the data sets with the Java client, runs every
workload for every contender, and writes `report.md`, `results.json` and PNG plots to DIR
(default tests/bench/results). Referees: the DataNodes' own BytesRead / ReadBlockOpNumOps, the
nftables wire-byte and SYN counters on the xfer ports, and the NameNode's operation counters.
Figures are medians over `--reps` repetitions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import trio

from hdfsfuse.client import HdfsClient
from tests.minidfs import ClusterOptions, MiniDfs, ensure_built
from tests.mounting import Mount

MiB = 1 << 20
REPO = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class Sizes:
    big: int  # the random-read file (W1, W2, W4, W6, W7)
    huge: int  # the sequential file (W3)
    entries: int  # W5 directory
    reads: int  # W1/W2 reads
    small_reads: int  # W6 reads
    threads: int = 8
    block_size: int = 128 * MiB


FULL = Sizes(big=256 * MiB, huge=1024 * MiB, entries=10_000, reads=10_000, small_reads=10_000)
QUICK = Sizes(big=128 * MiB, huge=256 * MiB, entries=10_000, reads=2_000, small_reads=5_000)
TINY = Sizes(big=8 * MiB, huge=16 * MiB, entries=300, reads=100, small_reads=200, block_size=4 * MiB)


@dataclasses.dataclass
class Result:
    workload: str
    contender: str
    seconds: float
    app_bytes: int
    ops: int
    wire_bytes: int
    bytes_read: int
    dn_read_ops: int
    connects: int
    nn_rpcs: int

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds else 0.0

    @property
    def mbps(self) -> float:
        return self.app_bytes / self.seconds / 1e6 if self.seconds else 0.0


# ----- workloads: lists of (offset, length) ------------------------------------------------------


def random_reads(size: int, n: int, length: int, aligned: bool, seed: int) -> list[tuple[int, int]]:
    rnd = random.Random(seed)
    if aligned:
        return [(rnd.randrange(size // length) * length, length) for _ in range(n)]
    return [(rnd.randrange(size - length), length) for _ in range(n)]


def footer_then_columns(size: int, seed: int) -> list[tuple[int, int]]:
    rnd = random.Random(seed)
    return [(size - 8, 8), (size - 65536, 65536)] + [(rnd.randrange(size - MiB), MiB) for _ in range(20)]


def seek_back_small(size: int, n: int, seed: int) -> list[tuple[int, int]]:
    """HDFS-7966: repeatedly seek backwards and read 200 bytes."""
    rnd = random.Random(seed)
    pos = size - 200
    reads = []
    for _ in range(n):
        pos -= rnd.randrange(200, 64 * 1024)
        if pos < 0:
            pos = size - 200 - rnd.randrange(64 * 1024)
        reads.append((pos, 200))
    return reads


# ----- contenders ----------------------------------------------------------------------------------


def _split(reads: list[tuple[int, int]], threads: int) -> list[list[tuple[int, int]]]:
    return [reads[i::threads] for i in range(threads)]


def _in_threads(work: Callable[[list[tuple[int, int]]], int], reads: list[tuple[int, int]],
                threads: int) -> tuple[float, int]:
    """Run `work` on `threads` shares of the reads at once; (seconds, bytes read)."""
    done: list[int] = []
    ts = [threading.Thread(target=lambda p=p: done.append(work(p))) for p in _split(reads, threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - t0, sum(done)


def mount_reader(mount: Mount, path: str, reads: list[tuple[int, int]], threads: int) -> tuple[float, int]:
    def work(part: list[tuple[int, int]]) -> int:
        fd = os.open(mount.path(path), os.O_RDONLY)
        try:
            return sum(len(os.pread(fd, length, off)) for off, length in part)
        finally:
            os.close(fd)

    return _in_threads(work, reads, threads)


def library_reader(cluster: MiniDfs, path: str, reads: list[tuple[int, int]], threads: int) -> tuple[float, int]:
    async def main() -> tuple[float, int]:
        async with HdfsClient.connect(cluster.uri, conf_dir=cluster.conf_dir) as client:
            f = await client.open(path)
            got: list[int] = []

            async def work(part: list[tuple[int, int]]) -> None:
                for off, length in part:
                    data = await client.read_range(f, off, length)
                    got.append(len(data))

            t0 = time.perf_counter()
            async with trio.open_nursery() as n:
                for part in _split(reads, threads):
                    n.start_soon(work, part)
            return time.perf_counter() - t0, sum(got)

    return trio.run(main)


def library_sequential(cluster: MiniDfs, path: str, size: int) -> tuple[float, int]:
    async def main() -> tuple[float, int]:
        async with HdfsClient.connect(cluster.uri, conf_dir=cluster.conf_dir) as client:
            f = await client.open(path)
            chunk = 8 * MiB
            total = 0
            t0 = time.perf_counter()
            # Two chunks in flight: a simple pipeline, as a streaming caller would do.
            results: dict[int, int] = {}

            async def fetch(off: int) -> None:
                results[off] = len(await client.read_range(f, off, chunk))

            for start in range(0, size, 2 * chunk):
                async with trio.open_nursery() as n:
                    for off in (start, start + chunk):
                        if off < size:
                            n.start_soon(fetch, off)
            total = sum(results.values())
            return time.perf_counter() - t0, total

    return trio.run(main)


def native_reader(cluster: MiniDfs, path: str, reads: list[tuple[int, int]], threads: int) -> tuple[float, int]:
    from hdfs_native import Client

    client = Client(cluster.uri)

    def work(part: list[tuple[int, int]]) -> int:
        with client.read(path) as f:
            return sum(len(f.read_range(off, length)) for off, length in part)

    return _in_threads(work, reads, threads)


def native_sequential(cluster: MiniDfs, path: str) -> tuple[float, int]:
    from hdfs_native import Client

    client = Client(cluster.uri)
    t0 = time.perf_counter()
    n = 0
    with client.read(path) as f:
        while chunk := f.read(8 * MiB):
            n += len(chunk)
    return time.perf_counter() - t0, n


def java(cluster: MiniDfs, mode: str, path: str, reads: list[tuple[int, int]] | None, threads: int = 1,
         count: int = 0) -> tuple[float, int]:
    classpath = ensure_built()
    args = ["java", "-Xmx1g", "-cp", classpath, "hdfsfuse.minidfs.Bench", "--conf-dir", cluster.conf_dir,
            "--uri", cluster.uri, "--mode", mode, "--path", path, "--threads", str(threads), "--count", str(count),
            "--warmup", str(min(200, len(reads or []) // 10))]
    with tempfile.NamedTemporaryFile("w", suffix=".offsets") as f:
        if reads is not None:
            f.write("".join(f"{o} {n}\n" for o, n in reads))
            f.flush()
            args += ["--offsets", f.name]
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return float(r["seconds"]), int(r["bytes"])


def drop_caches() -> None:
    subprocess.run(["sync"])
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        pass


# ----- measuring -----------------------------------------------------------------------------------


def measure(cluster: MiniDfs, workload: str, contender: str, ops: int, fn: Callable[[], tuple[float, int]]) -> Result:
    drop_caches()
    m0 = cluster.metrics_total()
    nn0 = cluster.nn_metrics()
    with cluster.wire() as wire:
        seconds, app = fn()
        time.sleep(0.3)  # let in-flight packets and the DataNodes' accounting land
    m1 = cluster.metrics_total()
    nn1 = cluster.nn_metrics()
    return Result(
        workload=workload, contender=contender, seconds=seconds, app_bytes=app, ops=ops,
        wire_bytes=wire.bytes, bytes_read=m1["BytesRead"] - m0["BytesRead"],
        dn_read_ops=m1["ReadBlockOpNumOps"] - m0["ReadBlockOpNumOps"], connects=wire.connects,
        nn_rpcs=sum(nn1.values()) - sum(nn0.values()),
    )


def median_result(results: list[Result]) -> Result:
    best = sorted(results, key=lambda r: r.seconds)[len(results) // 2]
    return dataclasses.replace(best, seconds=statistics.median(r.seconds for r in results))


def daemon_rss_kib(mount: Mount) -> int:
    """RSS of the hdfsfuse process serving `mount`."""
    out = subprocess.run(["pgrep", "-f", f"hdfsfuse.cli mount .* {mount.dir}"], capture_output=True, text=True)
    pids = [int(p) for p in out.stdout.split()]
    rss = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = max(rss, int(line.split()[1]))
    return rss


def run(sizes: Sizes, reps: int, out_dir: Path) -> dict[str, object]:
    results: list[Result] = []
    extra: dict[str, object] = {}
    with MiniDfs(ClusterOptions(datanodes=3, block_size=sizes.block_size), heap="2g") as cluster, \
            tempfile.TemporaryDirectory() as work:
        print(f"cluster up: {cluster.uri}", flush=True)
        for name, size, seed in (("/bench/big", sizes.big, 1), ("/bench/huge", sizes.huge, 2)):
            local = Path(work) / name.rsplit("/", 1)[1]
            with open(local, "wb") as f:
                rnd = random.Random(seed)
                for _ in range(size // (16 * MiB) or 1):
                    f.write(rnd.randbytes(min(16 * MiB, size)))
            cluster.put(local, name)
            local.unlink()
        cluster.touch_many("/bench/dir", sizes.entries)
        print("data sets written", flush=True)

        mounts = {"mount-pagecache": Mount(cluster), "mount-directio": Mount(cluster, "direct_io")}
        try:
            big = sizes.big
            # Warm the DataNodes' JIT and page cache so the first contender is not penalised.
            warm = random_reads(big, min(3000, sizes.reads), 4096, True, 99)
            library_reader(cluster, "/bench/big", warm, 1)
            java(cluster, "pread", "/bench/big", warm)
            print("warmed up", flush=True)
            workloads: dict[str, list[tuple[int, int]]] = {
                "W1 random 4KiB aligned": random_reads(big, sizes.reads, 4096, True, 11),
                "W2 random 4KiB unaligned": random_reads(big, sizes.reads, 4096, False, 12),
                "W4 8 readers x W1": random_reads(big, sizes.reads, 4096, True, 14),
                "W6 seek back, read 200 B": seek_back_small(big, sizes.small_reads, 16),
                "W7 footer then columns": footer_then_columns(big, 17),
            }
            for wname, reads in workloads.items():
                threads = sizes.threads if wname.startswith("W4") else 1
                stream_mode = "seekread" if wname.startswith("W6") else "stream"
                contenders: dict[str, Callable[[], tuple[float, int]]] = {
                    "hdfsfuse mount (page cache)":
                        lambda r=reads, t=threads: mount_reader(mounts["mount-pagecache"], "/bench/big", r, t),
                    "hdfsfuse mount (direct_io)":
                        lambda r=reads, t=threads: mount_reader(mounts["mount-directio"], "/bench/big", r, t),
                    "hdfsfuse library": lambda r=reads, t=threads: library_reader(cluster, "/bench/big", r, t),
                    "Java stream read": lambda r=reads, t=threads, m=stream_mode: java(cluster, m, "/bench/big", r, t),
                    "Java pread": lambda r=reads, t=threads: java(cluster, "pread", "/bench/big", r, t),
                    "hdfs-native": lambda r=reads, t=threads: native_reader(cluster, "/bench/big", r, t),
                }
                for cname, fn in contenders.items():
                    reps_results = [measure(cluster, wname, cname, len(reads), fn) for _ in range(reps)]
                    res = median_result(reps_results)
                    results.append(res)
                    amp = res.wire_bytes / max(1, res.app_bytes)
                    print(f"{wname:28s} {cname:28s} {res.rate:9.0f} reads/s  wire x{amp:.3f}", flush=True)
                if wname.startswith("W4"):
                    extra["rss_kib_after_W4"] = daemon_rss_kib(mounts["mount-pagecache"])

            huge = sizes.huge
            seq: dict[str, Callable[[], tuple[float, int]]] = {
                "hdfsfuse mount (page cache)": lambda: _dd(mounts["mount-pagecache"], "/bench/huge"),
                "hdfsfuse mount (direct_io)": lambda: _dd(mounts["mount-directio"], "/bench/huge"),
                "hdfsfuse library": lambda: library_sequential(cluster, "/bench/huge", huge),
                "Java stream read": lambda: java(cluster, "seq", "/bench/huge", None),
                "hdfs-native": lambda: native_sequential(cluster, "/bench/huge"),
            }
            for cname, fn in seq.items():
                res = median_result([measure(cluster, "W3 sequential", cname, 1, fn) for _ in range(reps)])
                results.append(res)
                amp = res.wire_bytes / max(1, res.app_bytes)
                print(f"{'W3 sequential':28s} {cname:28s} {res.mbps:9.1f} MB/s  wire x{amp:.3f}", flush=True)

            ls = {
                "hdfsfuse mount (page cache)": lambda: _ls(mounts["mount-pagecache"], "/bench/dir", sizes.entries),
                "hdfs-native": lambda: _native_ls(cluster, "/bench/dir"),
            }
            for cname, fn in ls.items():
                res = median_result([measure(cluster, "W5 ls -l", cname, 1, fn) for _ in range(reps)])
                results.append(res)
                print(f"{'W5 ls -l':28s} {cname:28s} {res.seconds:9.3f} s  NN RPCs {res.nn_rpcs}", flush=True)
            stat_java = java(cluster, "stat", "/bench/big", None, count=2000)
            stat_ours = _library_stats(cluster, "/bench/big", 2000)
            extra["getFileInfo_us"] = {"Java": stat_java[0] / 2000 * 1e6, "hdfsfuse": stat_ours * 1e6}
        finally:
            for m in mounts.values():
                m.unmount()
    report = {"machine": machine(), "sizes": dataclasses.asdict(sizes), "reps": reps,
              "results": [dataclasses.asdict(r) | {"rate": r.rate, "mbps": r.mbps} for r in results],
              "extra": extra}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(report, indent=1))
    (out_dir / "report.md").write_text(render(report))
    plot(report, out_dir)
    return report


def _dd(mount: Mount, path: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    r = subprocess.run(["dd", f"if={mount.path(path)}", "of=/dev/null", "bs=1M"], capture_output=True, text=True,
                       check=True)
    seconds = time.perf_counter() - t0
    return seconds, int(r.stderr.split(" bytes", 1)[0].splitlines()[-1])


def _ls(mount: Mount, path: str, entries: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    out = subprocess.run(["ls", "-l", mount.path(path)], capture_output=True, text=True, check=True).stdout
    seconds = time.perf_counter() - t0
    assert len(out.splitlines()) == entries + 1
    return seconds, 0


def _native_ls(cluster: MiniDfs, path: str) -> tuple[float, int]:
    from hdfs_native import Client

    client = Client(cluster.uri)
    t0 = time.perf_counter()
    n = sum(1 for _ in client.list_status(path))
    assert n > 0
    return time.perf_counter() - t0, 0


def _library_stats(cluster: MiniDfs, path: str, count: int) -> float:
    async def main() -> float:
        async with HdfsClient.connect(cluster.uri, conf_dir=cluster.conf_dir) as client:
            await client.namenode.get_file_info(path)
            t0 = time.perf_counter()
            for _ in range(count):
                await client.namenode.get_file_info(path)
            return (time.perf_counter() - t0) / count

    return trio.run(main)


def machine() -> dict[str, str]:
    cpu = ""
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                   if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    java_version = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    return {"cpu": cpu, "cores": str(os.cpu_count()), "kernel": platform.release(),
            "python": platform.python_version(), "java": java_version,
            "memory_gib": str(round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def render(report: dict) -> str:  # type: ignore[type-arg]
    lines = ["# hdfsfuse benchmarks", "",
             "Generated by `.venv/bin/python -m tests.bench.run`. Medians over "
             f"{report['reps']} repetitions. Amplification = bytes on the wire (or BytesRead) / bytes "
             "the application read. Wire bytes are whole IP packets from the DataNodes' xfer ports "
             "(nftables); BytesRead is the DataNodes' own metric (Hadoop 3.5 counts data plus checksums). "
             "Ratios are against Java pread (or Java stream read for W3) measured in the same run.", "",
             "Machine: " + ", ".join(f"{k} {v}" for k, v in report["machine"].items()), "",
             "Sizes: " + ", ".join(f"{k} {v}" for k, v in report["sizes"].items()), ""]
    by_wl: dict[str, list[dict]] = {}  # type: ignore[type-arg]
    for r in report["results"]:
        by_wl.setdefault(r["workload"], []).append(r)
    for wl, rows in by_wl.items():
        lines += [f"## {wl}", ""]
        seq = wl.startswith("W3")
        ls = wl.startswith("W5")
        base_name = "Java stream read" if seq else "Java pread"
        base = next((r for r in rows if r["contender"] == base_name), None)
        unit = "MB/s" if seq else ("seconds" if ls else "reads/s")
        lines += [f"| contender | {unit} | ratio to {base_name if base else '-'} | wire amp | BytesRead amp | "
                  "DN read ops | TCP connects | NN RPCs |", "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            value = r["mbps"] if seq else (r["seconds"] if ls else r["rate"])
            ratio = ""
            if base:
                bval = base["mbps"] if seq else base["rate"]
                ratio = f"{value / bval:.2f}x" if bval else ""
            app = max(1, r["app_bytes"])
            amp_w = f"{r['wire_bytes'] / app:.3f}" if r["app_bytes"] else "-"
            amp_b = f"{r['bytes_read'] / app:.3f}" if r["app_bytes"] else "-"
            lines.append(f"| {r['contender']} | {value:,.1f} | {ratio} | {amp_w} | {amp_b} | {r['dn_read_ops']} | "
                         f"{r['connects']} | {r['nn_rpcs']} |")
        lines.append("")
    if report.get("extra"):
        lines += ["## Other figures", "", "```", json.dumps(report["extra"], indent=1), "```", ""]
    return "\n".join(lines)


def plot(report: dict, out_dir: Path) -> None:  # type: ignore[type-arg]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["results"] if not r["workload"].startswith(("W3", "W5"))]
    workloads = sorted({r["workload"] for r in rows})
    contenders = sorted({r["contender"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(15, 6))
    width = 0.8 / max(1, len(contenders))
    for i, c in enumerate(contenders):
        rates = [next((r["rate"] for r in rows if r["workload"] == w and r["contender"] == c), 0) for w in workloads]
        amps = [next((r["wire_bytes"] / max(1, r["app_bytes"]) for r in rows
                      if r["workload"] == w and r["contender"] == c), 0) for w in workloads]
        xs = [x + i * width for x in range(len(workloads))]
        axes[0].bar(xs, rates, width, label=c)
        axes[1].bar(xs, amps, width, label=c)
    for ax, title in zip(axes, ("reads per second", "wire amplification (log)"), strict=True):
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(workloads))])
        ax.set_xticklabels([w.split(" ", 1)[0] for w in workloads])
        ax.set_title(title)
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "random-reads.png", dpi=90)
    plt.close(fig)

    seq = [r for r in report["results"] if r["workload"].startswith("W3")]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.barh([r["contender"] for r in seq], [r["mbps"] for r in seq])
    ax.set_xlabel("MB/s")
    ax.set_title("W3 sequential read")
    fig.tight_layout()
    fig.savefig(out_dir / "sequential.png", dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.bench.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="smaller files and fewer reads")
    g.add_argument("--tiny", action="store_true", help="tiny sizes (the smoke test)")
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--out", type=Path, default=REPO / "tests" / "bench" / "results")
    a = p.parse_args(argv)
    sizes = TINY if a.tiny else QUICK if a.quick else FULL
    reps = a.reps or (1 if a.tiny else 3)  # the full run takes about 16 minutes here
    t0 = time.monotonic()
    run(sizes, reps, a.out)
    print(f"report written to {a.out / 'report.md'} in {time.monotonic() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
