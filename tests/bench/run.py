"""Side-by-side benchmarks: hdfsfuse against the Java client, hdfs-native and colinmarc/hdfs, on one cluster.

    .venv/bin/python -m tests.bench.run [--quick | --tiny] [--reps N] [--out DIR]

Starts a 3-DataNode MiniDFSCluster, writes the data sets with the Java client, runs every
workload for every contender, and writes `report.md`, `results.json` and PNG plots to DIR
(default tests/bench/results). Referees: the DataNodes' own BytesRead / ReadBlockOpNumOps, the
nftables wire-byte and SYN counters on the xfer ports, and the NameNode's operation counters.

One rule for every contender: each runs in a process of its own (`tests.bench.worker`, or the
Java `Bench` main), does the same warm-up reads (other offsets than the measured ones), and only
then does the referee read its "before" counters and start the clock. A mount's warm-up pages
are dropped from the page cache first (no other contender keeps a cache past its warm-up).
Repetitions are interleaved (every contender once per round), figures are medians over `--reps`
rounds, and CPU per read is the contender's own process CPU (for the mount, the daemon's plus
the reader's; the daemon's alone is a column of its own). The report ends with issue 15's
targets, each against the same run's referee contender.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import json
import mmap
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio

from hdfsfuse.client import HdfsClient
from tests.bench.profile import Profile, sampled
from tests.minidfs import ClusterOptions, MiniDfs, ensure_built
from tests.mounting import Mount

MiB = 1 << 20
COLINMARC = Path(__file__).resolve().parent / "colinmarc"
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
    cpu_seconds: float = 0.0  # the contender's own CPU during the timed reads (mount: daemon + reader)
    daemon_cpu_seconds: float = 0.0  # a mount's daemon alone (0 for a contender with no daemon)

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds else 0.0

    @property
    def mbps(self) -> float:
        return self.app_bytes / self.seconds / 1e6 if self.seconds else 0.0

    @property
    def cpu_us_per_op(self) -> float:
        return self.cpu_seconds / self.ops * 1e6 if self.ops else 0.0

    @property
    def daemon_cpu_us_per_op(self) -> float:
        return self.daemon_cpu_seconds / self.ops * 1e6 if self.ops else 0.0


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


# ----- contenders: each a process of its own, driven by one rule ----------------------------------

WARMUP_READS = 200


@dataclasses.dataclass
class Contender:
    """How to start one contender on a workload: its argv, and the daemon whose CPU counts too."""

    name: str
    argv: Callable[[str, str, str, int], list[str]]  # (path, offsets file or "seq", warm-up file, threads)
    daemon_pid: Callable[[], int] | None = None


class FloorMount:
    """The no-op pyfuse3 daemon (`noop_fs`): what FUSE alone costs, with hdfsfuse's kernel tuning."""

    def __init__(self, files: dict[str, int]) -> None:
        from hdfsfuse.conf.mount_options import MountOptions
        from hdfsfuse.daemon import tune_kernel
        from tests.mounting import is_mounted

        self.dir = tempfile.mkdtemp(prefix="hdfsfuse-floor-")
        argv = [sys.executable, "-m", "tests.bench.noop_fs", self.dir, *(f"--file={p}={n}" for p, n in files.items())]
        self.proc = subprocess.Popen(argv, cwd=REPO)
        deadline = time.monotonic() + 60
        while not is_mounted(self.dir):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the no-op FUSE daemon did not mount")
            time.sleep(0.05)
        os.stat(self.dir)  # returns once FUSE_INIT is answered; the kernel sets the readahead then
        tune_kernel(self.dir, MountOptions())  # the same read_ahead_kb and max_background as hdfsfuse

    def unmount(self) -> None:
        subprocess.run(["fusermount3", "-u", self.dir], capture_output=True)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            subprocess.run(["fusermount3", "-uz", self.dir], capture_output=True)
        os.rmdir(self.dir)


def _worker(kind: str, cluster: MiniDfs, mount: Mount | FloorMount | None = None, *extra: str,
            ) -> Callable[[str, str, str, int], list[str]]:
    def argv(path: str, offsets: str, warmup: str, threads: int) -> list[str]:
        args = [sys.executable, "-m", "tests.bench.worker", "--kind", kind, "--path", path, "--offsets", offsets,
                "--warmup-offsets", warmup, "--threads", str(threads), "--uri", cluster.uri,
                "--conf-dir", cluster.conf_dir, *extra]
        return args + (["--mount-dir", mount.dir] if mount is not None else [])

    return argv


def _java(cluster: MiniDfs, mode: str) -> Callable[[str, str, str, int], list[str]]:
    def argv(path: str, offsets: str, warmup: str, threads: int) -> list[str]:
        args = ["java", "-Xmx1g", "-cp", ensure_built(), "hdfsfuse.minidfs.Bench", "--conf-dir", cluster.conf_dir,
                "--uri", cluster.uri, "--mode", "seq" if offsets == "seq" else mode, "--path", path,
                "--threads", str(threads), "--warmup-offsets", warmup]
        return args + ([] if offsets == "seq" else ["--offsets", offsets])

    return argv


def build_colinmarc() -> Path:
    """Build the colinmarc/hdfs contender (Go modules from the module proxy) once."""
    binary = COLINMARC / ".build" / "colinmarc-bench"
    sources = [COLINMARC / n for n in ("main.go", "go.mod", "go.sum")]
    if not binary.exists() or binary.stat().st_mtime < max(p.stat().st_mtime for p in sources):
        subprocess.run(["go", "build", "-o", str(binary), "."], cwd=COLINMARC, check=True)
    return binary


def colinmarc_argv(cluster: MiniDfs) -> Callable[[str, str, str, int], list[str]]:
    binary = str(build_colinmarc())
    namenode = cluster.namenodes[0]["rpc"]

    def argv(path: str, offsets: str, warmup: str, threads: int) -> list[str]:
        return [binary, "--namenode", namenode, "--path", path, "--offsets", offsets, "--warmup-offsets", warmup,
                "--threads", str(threads)]

    return argv


def java(cluster: MiniDfs, mode: str, path: str, count: int) -> float:
    """Seconds for `count` operations of a non-read Java mode (stat), timed inside the JVM."""
    args = ["java", "-Xmx1g", "-cp", ensure_built(), "hdfsfuse.minidfs.Bench", "--conf-dir", cluster.conf_dir,
            "--uri", cluster.uri, "--mode", mode, "--path", path, "--count", str(count)]
    out = subprocess.run(args, input="go\n", capture_output=True, text=True, check=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["seconds"])


def drop_caches() -> None:
    subprocess.run(["sync"])
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        pass


def _process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def daemon_pid(mount: Mount) -> int:
    out = subprocess.run(["pgrep", "-f", f"hdfsfuse.cli mount .* {mount.dir}"], capture_output=True, text=True)
    return min(int(p) for p in out.stdout.split())


def write_random_file(cluster: MiniDfs, work: Path, path: str, size: int, seed: int) -> None:
    """`size` seeded random bytes at `path`, written by the Java client (through a local file)."""
    local = work / "data"
    with open(local, "wb") as f:
        rnd = random.Random(seed)
        for _ in range(size // (16 * MiB) or 1):
            f.write(rnd.randbytes(min(16 * MiB, size)))
    cluster.put(local, path)
    local.unlink()


def random_local_file(path: Path, size: int, seed: int) -> None:
    """`size` seeded random bytes in a local file (written in pieces: randbytes takes at most 256 MiB)."""
    rng = random.Random(seed)
    with path.open("wb") as f:
        for start in range(0, size, 64 * MiB):
            f.write(rng.randbytes(min(64 * MiB, size - start)))


def write_offsets(path: Path, reads: list[tuple[int, int]]) -> str:
    """A contender's offsets file: one "offset length" line per read; its path."""
    path.write_text("".join(f"{o} {n}\n" for o, n in reads))
    return str(path)


# ----- measuring -----------------------------------------------------------------------------------


def measure(cluster: MiniDfs, workload: str, contender: Contender, ops: int, argv: list[str],
            *, cold: bool = True, profile: list[Profile] | None = None, profile_rate: int = 0) -> Result:
    """Run one contender process: warm-up, then counters, then the timed reads (the one rule).

    `cold` drops the kernel's caches first (every contender's files come from disk); without it
    they stay as the previous measurement left them. `profile`: sample the process that does the
    work (a mount's daemon, else the contender itself) during the timed reads, and append its
    profile, sampled `profile_rate` times a second (a profiled pass is never a timed one).
    """
    if cold:
        drop_caches()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for line in proc.stdout:
            if line.strip() == "warmed":
                break
        else:
            raise RuntimeError(f"{contender.name} exited before warming up: {' '.join(argv)}")
        pid = contender.daemon_pid() if contender.daemon_pid is not None else None
        cpu0 = _process_cpu(pid) if pid else 0.0
        m0 = cluster.metrics_total()
        nn0 = cluster.nn_metrics()
        sampling = (contextlib.nullcontext() if profile is None
                    else sampled(pid or proc.pid, profile_rate or PROFILE_RATE, profile))
        with cluster.wire() as wire, sampling:
            proc.stdin.write("go\n")
            proc.stdin.flush()
            result = None
            for line in proc.stdout:
                if line.startswith("{"):
                    result = json.loads(line)
                    break
            if result is None:
                raise RuntimeError(f"{contender.name} printed no result: {' '.join(argv)}")
            time.sleep(0.3)  # let in-flight packets and the DataNodes' accounting land
        daemon_cpu = _process_cpu(pid) - cpu0 if pid else 0.0
    finally:
        proc.stdin.close()
        if proc.wait(timeout=120) != 0:
            raise RuntimeError(f"{contender.name} failed: {' '.join(argv)}")
    m1 = cluster.metrics_total()
    nn1 = cluster.nn_metrics()
    return Result(
        workload=workload, contender=contender.name, seconds=float(result["seconds"]), app_bytes=int(result["bytes"]),
        ops=ops, wire_bytes=wire.bytes, bytes_read=m1["BytesRead"] - m0["BytesRead"],
        dn_read_ops=m1["ReadBlockOpNumOps"] - m0["ReadBlockOpNumOps"], connects=wire.connects,
        nn_rpcs=sum(nn1.values()) - sum(nn0.values()),
        cpu_seconds=float(result.get("cpu_seconds", 0.0)) + daemon_cpu, daemon_cpu_seconds=daemon_cpu,
    )


PROFILE_RATE = 100  # samples/s: low enough that the sampled process keeps its speed (tests.bench.profile)


def measure_call(cluster: MiniDfs, workload: str, contender: str, fn: Callable[[], float]) -> Result:
    """A metadata workload timed around one call (W5)."""
    drop_caches()
    nn0 = cluster.nn_metrics()
    seconds = fn()
    nn1 = cluster.nn_metrics()
    return Result(workload=workload, contender=contender, seconds=seconds, app_bytes=0, ops=1, wire_bytes=0,
                  bytes_read=0, dn_read_ops=0, connects=0, nn_rpcs=sum(nn1.values()) - sum(nn0.values()))


def summary(results: list[Result], app_bytes: int) -> dict[str, float]:
    """One contender's rounds as JSON figures (medians): rates, CPU per read, amplification."""
    r = median_result(results)
    return {"reads_per_s": round(r.rate, 1), "mb_per_s": round(r.mbps, 1), "cpu_us_per_read": round(r.cpu_us_per_op, 1),
            "bytesread_amp": round(r.bytes_read / max(1, app_bytes), 4),
            "wire_amp": round(r.wire_bytes / max(1, app_bytes), 4), "dn_read_ops": r.dn_read_ops}


def median_result(results: list[Result]) -> Result:
    best = sorted(results, key=lambda r: r.seconds)[len(results) // 2]
    return dataclasses.replace(best, seconds=statistics.median(r.seconds for r in results),
                               cpu_seconds=statistics.median(r.cpu_seconds for r in results),
                               daemon_cpu_seconds=statistics.median(r.daemon_cpu_seconds for r in results))


def run(sizes: Sizes, reps: int, out_dir: Path) -> dict[str, object]:
    raw: dict[tuple[str, str], list[Result]] = {}
    extra: dict[str, object] = {}
    with MiniDfs(ClusterOptions(datanodes=3, block_size=sizes.block_size), heap="2g") as cluster, \
            tempfile.TemporaryDirectory() as work:
        print(f"cluster up: {cluster.uri}", flush=True)
        for name, size, seed in (("/bench/big", sizes.big, 1), ("/bench/huge", sizes.huge, 2)):
            write_random_file(cluster, Path(work), name, size, seed)
        cluster.touch_many("/bench/dir", sizes.entries)
        print("data sets written", flush=True)

        def offsets_file(name: str, reads: list[tuple[int, int]]) -> str:
            return write_offsets(Path(work) / name, reads)

        mounts = {"page cache": Mount(cluster), "direct_io": Mount(cluster, "direct_io")}
        floor = FloorMount({"/bench/big": sizes.big, "/bench/huge": sizes.huge})
        try:
            big, huge = sizes.big, sizes.huge
            warm_big = offsets_file("warm-big", random_reads(big, WARMUP_READS, 4096, True, 99))
            warm_huge = offsets_file("warm-huge", random_reads(huge, WARMUP_READS, 4096, True, 98))
            workloads: dict[str, list[tuple[int, int]]] = {
                "W1 random 4KiB aligned": random_reads(big, sizes.reads, 4096, True, 11),
                "W2 random 4KiB unaligned": random_reads(big, sizes.reads, 4096, False, 12),
                "W4 8 readers x W1": random_reads(big, sizes.reads, 4096, True, 14),
                "W6 seek back, read 200 B": seek_back_small(big, sizes.small_reads, 16),
                "W7 footer then columns": footer_then_columns(big, 17),
            }

            colinmarc = colinmarc_argv(cluster)

            def contenders(stream_mode: str, sequential: bool) -> list[Contender]:
                out = [
                    Contender(FLOOR, _worker("mount", cluster, floor),
                              lambda: floor.proc.pid),
                    Contender("hdfsfuse mount (page cache)", _worker("mount", cluster, mounts["page cache"]),
                              lambda: daemon_pid(mounts["page cache"])),
                    Contender("hdfsfuse mount (direct_io)", _worker("mount", cluster, mounts["direct_io"]),
                              lambda: daemon_pid(mounts["direct_io"])),
                    Contender("hdfsfuse library", _worker("library", cluster)),
                    Contender("Java stream read", _java(cluster, stream_mode)),
                    Contender("hdfs-native", _worker("native", cluster)),
                    Contender("colinmarc/hdfs", colinmarc),
                ]
                if not sequential:
                    out.insert(4, Contender("Java pread", _java(cluster, "pread")))
                return out

            # Warm the DataNodes (JIT, page cache of block files) before any contender is measured,
            # so the first one measured in round 1 is not penalised.
            warm_dn = offsets_file("warm-datanodes", random_reads(big, min(3000, sizes.reads), 4096, True, 97))
            measure(cluster, "warm-up", Contender("warm-up", _java(cluster, "pread")), 0,
                    _java(cluster, "pread")("/bench/big", warm_dn, warm_big, 1))

            plan: list[tuple[str, int, Contender, list[str]]] = []
            for wname, reads in workloads.items():
                threads = sizes.threads if wname.startswith("W4") else 1
                stream_mode = "seekread" if wname.startswith("W6") else "stream"
                offsets = offsets_file(wname.split()[0], reads)
                for c in contenders(stream_mode, sequential=False):
                    plan.append((wname, len(reads), c, c.argv("/bench/big", offsets, warm_big, threads)))
            for c in contenders("stream", sequential=True):
                plan.append(("W3 sequential", 1, c, c.argv("/bench/huge", "seq", warm_huge, 1)))

            for rep in range(reps):  # interleaved: every contender once per round
                for wname, ops, c, argv in plan:
                    res = measure(cluster, wname, c, ops, argv)
                    raw.setdefault((wname, c.name), []).append(res)
                    amp = res.wire_bytes / max(1, res.app_bytes)
                    figure = f"{res.mbps:9.1f} MB/s" if wname.startswith("W3") else f"{res.rate:9.0f} reads/s"
                    print(f"round {rep + 1} {wname:28s} {c.name:28s} {figure}  wire x{amp:.3f}  "
                          f"cpu {res.cpu_us_per_op:.0f} us/op", flush=True)
                extra.setdefault("rss_kib_after_round", []).append(  # type: ignore[union-attr]
                    daemon_rss_kib(mounts["page cache"]))

            for _ in range(reps):
                for cname, fn in (("hdfsfuse mount (page cache)",
                                   lambda: _ls(mounts["page cache"], "/bench/dir", sizes.entries)),
                                  ("hdfs-native", lambda: _native_ls(cluster, "/bench/dir"))):
                    raw.setdefault(("W5 ls -l", cname), []).append(measure_call(cluster, "W5 ls -l", cname, fn))
            extra["profiles"] = profiled_passes(cluster, {c.name: c for c in contenders("stream", False)},
                                                big, offsets_file, warm_big, warm_huge)
            extra["page_floor"] = {w.split()[0]: page_floor(reads) for w, reads in workloads.items()
                                   if w.startswith(("W2", "W6"))}
            extra["shared_mmap"] = {mode: shared_mmap(m.path("/bench/big")) for mode, m in mounts.items()}
            stat_java = java(cluster, "stat", "/bench/big", 2000)
            stat_ours = _library_stats(cluster, "/bench/big", 2000)
            extra["getFileInfo_us"] = {"Java": stat_java / 2000 * 1e6, "hdfsfuse": stat_ours * 1e6}
        finally:
            for m in mounts.values():
                m.unmount()
            floor.unmount()
    results = [median_result(rs) for rs in raw.values()]
    report = {"machine": machine(), "sizes": dataclasses.asdict(sizes), "reps": reps,
              "results": [dataclasses.asdict(r) | {"rate": r.rate, "mbps": r.mbps, "cpu_us_per_op": r.cpu_us_per_op,
                                                   "daemon_cpu_us_per_op": r.daemon_cpu_us_per_op}
                          for r in results],
              "extra": extra}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(report, indent=1))
    (out_dir / "report.md").write_text(render(report))
    plot(report, out_dir)
    return report


def profiled_passes(cluster: MiniDfs, contenders: dict[str, Contender], big: int,
                    offsets_file: Callable[[str, list[tuple[int, int]]], str], warm_big: str,
                    warm_huge: str) -> dict[str, dict[str, object]]:
    """Untimed passes under py-spy: W1 for the mount, the library and the floor, W3 for the mount.

    Each W1 pass reads fresh random offsets, enough for a few hundred busy samples; W3 (one
    read of the big file, about a second) is sampled faster.
    """
    w1 = offsets_file("W1-profiled", random_reads(big, 20_000, 4096, True, 21))
    w1_floor = offsets_file("W1-profiled-floor", random_reads(big, 100_000, 4096, True, 22))
    passes = [("W1", MOUNT, "/bench/big", w1, warm_big, PROFILE_RATE),
              ("W1", LIBRARY, "/bench/big", w1, warm_big, PROFILE_RATE),
              ("W1", FLOOR, "/bench/big", w1_floor, warm_big, PROFILE_RATE),
              ("W3", MOUNT, "/bench/huge", "seq", warm_huge, 4 * PROFILE_RATE)]
    out: dict[str, dict[str, object]] = {}
    for workload, name, path, offsets, warm, rate in passes:
        got: list[Profile] = []
        c = contenders[name]
        measure(cluster, f"{workload} profiled", c, 1, c.argv(path, offsets, warm, 1), profile=got, profile_rate=rate)
        out[f"{workload} {name}"] = dataclasses.asdict(got[0])
        print(f"profiled {workload} {name}: {got[0].busy} samples", flush=True)
    return out


def page_floor(reads: list[tuple[int, int]]) -> float:
    """The 4 KiB pages these reads touch (each once), over the bytes they ask for."""
    pages = {p for off, n in reads for p in range(off // 4096, (off + n - 1) // 4096 + 1)}
    return len(pages) * 4096 / sum(n for _, n in reads)


def shared_mmap(path: str) -> str:
    """Whether a MAP_SHARED mapping of `path` works: "ok", or the error it fails with."""
    with open(path, "rb") as f:
        try:
            mapped = mmap.mmap(f.fileno(), 4096, mmap.MAP_SHARED, mmap.PROT_READ)
        except OSError as e:
            return f"{errno.errorcode.get(e.errno or 0, e.errno)}: {e.strerror}"
        mapped.close()
    return "ok"


def daemon_rss_kib(mount: Mount) -> int:
    """RSS of the hdfsfuse process serving `mount`."""
    for line in Path(f"/proc/{daemon_pid(mount)}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _ls(mount: Mount, path: str, entries: int) -> float:
    t0 = time.perf_counter()
    out = subprocess.run(["ls", "-l", mount.path(path)], capture_output=True, text=True, check=True).stdout
    seconds = time.perf_counter() - t0
    assert len(out.splitlines()) == entries + 1
    return seconds


def _native_ls(cluster: MiniDfs, path: str) -> float:
    from hdfs_native import Client

    client = Client(cluster.uri)
    t0 = time.perf_counter()
    n = sum(1 for _ in client.list_status(path))
    assert n > 0
    return time.perf_counter() - t0


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
             "Ratios are against Java pread (or Java stream read for W3) measured in the same run. "
             "Every contender runs in its own process and does the same 200 warm-up reads (at other "
             "offsets) before the referee reads its counters (a mount's warm-up pages are then dropped from "
             "the page cache, as no other contender keeps a cache past its warm-up); rounds are interleaved. "
             "CPU is the contender's own process CPU per operation (the mount: the daemon's plus the reader's). "
             "\"Java stream read\" opens a new stream, seeks and reads for every read (W6: one stream, "
             "seek then read), which is how it over-reads. \"FUSE floor\" is a no-op pyfuse3 daemon "
             "answering reads from memory (page-cache mode, hdfsfuse's kernel tuning): what FUSE alone "
             "costs here, a ceiling for any pyfuse3 mount.", "",
             "Machine: " + ", ".join(f"{k} {v}" for k, v in report["machine"].items()), "",
             "Sizes: " + ", ".join(f"{k} {v}" for k, v in report["sizes"].items()), ""]
    lines += ["## Headline", "", *headline(report), "", "## Issue 15's targets (same run)", "", *targets(report), "",
              "## Why each missed target is missed (profiles and the floor, same run)", "",
              "Profiles are py-spy samples of the process doing the work (the mount's daemon, the "
              f"library's process), in a pass of their own at {PROFILE_RATE} samples/s (W3: "
              f"{4 * PROFILE_RATE}; `tests.bench.profile`). Each sample counts for the innermost frame "
              "that names a bucket.", "", *why_missed(report)]
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
        lines += [f"| contender | {unit} | ratio to {base_name if base else '-'} | CPU µs/op | of which daemon | "
                  "wire amp | BytesRead amp | DN read ops | TCP connects | NN RPCs |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            value = r["mbps"] if seq else (r["seconds"] if ls else r["rate"])
            ratio = ""
            if base:
                bval = base["mbps"] if seq else base["rate"]
                ratio = f"{value / bval:.2f}x" if bval else ""
            app = max(1, r["app_bytes"])
            amp_w = f"{r['wire_bytes'] / app:.3f}" if r["app_bytes"] else "-"
            amp_b = f"{r['bytes_read'] / app:.3f}" if r["app_bytes"] else "-"
            cpu = f"{r['cpu_us_per_op']:,.0f}" if r.get("cpu_us_per_op") else "-"
            daemon = f"{r['daemon_cpu_us_per_op']:,.0f}" if r.get("daemon_cpu_us_per_op") else "-"
            lines.append(f"| {r['contender']} | {value:,.1f} | {ratio} | {cpu} | {daemon} | {amp_w} | {amp_b} | "
                         f"{r['dn_read_ops']} | {r['connects']} | {r['nn_rpcs']} |")
        lines.append("")
    if report.get("extra"):
        lines += ["## Other figures", "", "```", json.dumps(report["extra"], indent=1), "```", ""]
    return "\n".join(lines)


MOUNT, LIBRARY, NATIVE, GO = "hdfsfuse mount (page cache)", "hdfsfuse library", "hdfs-native", "colinmarc/hdfs"
FLOOR = "FUSE floor (no-op pyfuse3 daemon)"
HEADLINE_ROWS = [FLOOR, "hdfsfuse mount (page cache)", "hdfsfuse mount (direct_io)",
                 "hdfsfuse library", "Java pread",
                 "Java stream read", "hdfs-native", "colinmarc/hdfs"]


def headline(report: dict) -> list[str]:  # type: ignore[type-arg]
    """One row per contender; the mount's default (page cache) first and direct_io on its own row."""
    rows = {(r["workload"].split()[0], r["contender"]): r for r in report["results"]}

    def get(w: str, c: str) -> dict | None:  # type: ignore[type-arg]
        return rows.get((w, c))

    def amp(w: str, c: str) -> str:
        r = get(w, c)
        return f"{r['wire_bytes'] / max(1, r['app_bytes']):.2f}" if r and r["app_bytes"] else "-"

    def ratio(w: str, c: str, base: str, key: str) -> str:
        r, b = get(w, c), get(w, base)
        if not r or not b or not b[key]:
            return "-"
        return f"{r[key]:,.0f} ({r[key] / b[key]:.2f}x)"

    out = ["| contender | W1 4 KiB random reads/s (x Java pread) | CPU us per W1 read | W1 wire amp | "
           "W4 8 readers reads/s (x Java pread) | W6 200 B reads, wire amp | W7 columns reads/s (x Java pread) | "
           "W3 sequential MB/s (x Java stream) |", "|---|---|---|---|---|---|---|---|"]
    for c in HEADLINE_ROWS:
        w1_row = get("W1", c)
        cpu = f"{w1_row['cpu_us_per_op']:,.0f}" if w1_row and w1_row.get("cpu_us_per_op") else "-"
        name = c.replace("(page cache)", "(page cache, the default)")
        w1, w4, w7 = (ratio(w, c, "Java pread", "rate") for w in ("W1", "W4", "W7"))
        w3 = ratio("W3", c, "Java stream read", "mbps")
        out.append(f"| {name} | {w1} | {cpu} | {amp('W1', c)} | {w4} | {amp('W6', c)} | {w7} | {w3} |")
    return out


@dataclasses.dataclass
class Target:
    key: str  # what `why_missed` explains it by
    name: str
    text: str
    value: float | None
    met: bool | None


def target_checks(report: dict) -> list[Target]:  # type: ignore[type-arg]
    """Issue 15's targets, each measured against its referee contender in this run (default mode)."""
    rows = {(r["workload"].split()[0], r["contender"]): r for r in report["results"]}

    def ratio(w: str, c: str, base: str, key: str) -> tuple[str, float | None]:
        r, b = rows.get((w, c)), rows.get((w, base))
        if not r or not b or not b[key]:
            return "-", None
        return f"{r[key]:,.0f} against {b[key]:,.0f}: {r[key] / b[key]:.2f}x", r[key] / b[key]

    def amp(w: str, c: str, key: str) -> tuple[str, float | None]:
        r = rows.get((w, c))
        if not r or not r["app_bytes"]:
            return "-", None
        value = r[key] / r["app_bytes"]
        return f"{value:.2f}", value

    def cpu(w: str) -> tuple[str, float | None]:
        r, b = rows.get((w, MOUNT)), rows.get((w, NATIVE))
        if not r or not b or not b["cpu_us_per_op"]:
            return "-", None
        d = r["daemon_cpu_us_per_op"]
        return f"{d:,.0f} against {b['cpu_us_per_op']:,.0f} us: {d / b['cpu_us_per_op']:.2f}x", d / b["cpu_us_per_op"]

    checks: list[tuple[str, str, tuple[str, float | None], Callable[[float], bool]]] = [
        ("W1 mount", "W1 reads/s, mount x hdfs-native >= 1.0", ratio("W1", MOUNT, NATIVE, "rate"),
         lambda v: v >= 1.0),
        ("W1 library", "W1 reads/s, library x hdfs-native >= 1.2", ratio("W1", LIBRARY, NATIVE, "rate"),
         lambda v: v >= 1.2),
        ("W4", "W4 reads/s, mount x hdfs-native >= 1.0", ratio("W4", MOUNT, NATIVE, "rate"), lambda v: v >= 1.0),
        ("W3", "W3 MB/s, mount x colinmarc/hdfs >= 1.0", ratio("W3", MOUNT, GO, "mbps"), lambda v: v >= 1.0),
        ("W6", "W6 wire amplification, mount <= 8", amp("W6", MOUNT, "wire_bytes"), lambda v: v <= 8),
        ("W2", "W2 BytesRead amplification, mount <= 1.2", amp("W2", MOUNT, "bytes_read"), lambda v: v <= 1.2),
        ("CPU", "W1 CPU per read, mount daemon x hdfs-native <= 1.0", cpu("W1"), lambda v: v <= 1.0),
    ]
    return [Target(key, name, text, value, None if value is None else met(value))
            for key, name, (text, value), met in checks]


def targets(report: dict) -> list[str]:  # type: ignore[type-arg]
    out = ["| target (the mount in its default mode) | measured | met |", "|---|---|---|"]
    for t in target_checks(report):
        out.append(f"| {t.name} | {t.text} | {'-' if t.met is None else ('yes' if t.met else 'no')} |")
    return out


def why_missed(report: dict) -> list[str]:  # type: ignore[type-arg]
    """For each missed target, what this run's profiles, floor and referees say about it."""
    rows = {(r["workload"].split()[0], r["contender"]): r for r in report["results"]}
    extra = report.get("extra", {})
    profiles = {k: Profile(**v) for k, v in extra.get("profiles", {}).items()}

    def row(w: str, c: str) -> dict:  # type: ignore[type-arg]
        return rows.get((w, c)) or {}

    def per_op(r: dict, key: str = "cpu_us_per_op") -> float:  # type: ignore[type-arg]
        return float(r.get(key) or 0.0)

    def wall(r: dict) -> float:  # type: ignore[type-arg]
        return 1e6 / r["rate"] if r.get("rate") else 0.0

    def breakdown(name: str, us: float, unit: str = "us") -> str:
        p = profiles.get(name)
        if p is None or not p.busy:
            return "(no profile)"
        digits = 2 if unit == "ms" else 0
        parts = ", ".join(f"{bucket} {share * 100:.0f}% ({share * us:,.{digits}f} {unit})"
                          for bucket, share in p.shares().items())
        return f"{parts}; {p.busy} samples"

    def busiest(name: str) -> str:
        p = profiles.get(name)
        if p is None or not p.busy or not p.functions:
            return ""
        return "; busiest hdfsfuse functions: " + ", ".join(
            f"{f.split(' (')[0]} {n / p.busy * 100:.1f}%" for f, n in list(p.functions.items())[:5])

    def split(r: dict) -> str:  # type: ignore[type-arg]
        return f"{wall(r):,.0f} us: {per_op(r):,.0f} CPU and {wall(r) - per_op(r):,.0f} waiting"

    def profiled(whose: str, name: str, us: float, unit: str = "us") -> str:
        amount = f"{us:.2f} ms per MB" if unit == "ms" else f"{us:,.0f} us"
        return f"{whose} {amount} (profile): {breakdown(name, us, unit)}{busiest(name)}."

    def runtime_us(name: str, us: float) -> float:
        p = profiles.get(name)
        return 0.0 if p is None else sum(v for b, v in p.shares().items() if b != "hdfsfuse") * us

    mount, lib, native, floor = row("W1", MOUNT), row("W1", LIBRARY), row("W1", NATIVE), row("W1", FLOOR)
    d, f = per_op(mount, "daemon_cpu_us_per_op"), per_op(floor, "daemon_cpu_us_per_op")
    explain: dict[str, list[str]] = {}
    if mount and native:
        waiting = wall(mount) - per_op(mount)
        explain["W1 mount"] = [
            f"One reader waits for every read: {wall(mount):,.0f} us each, of which {per_op(mount):,.0f} us are CPU "
            f"(the daemon {d:,.0f}, the reader {per_op(mount) - d:,.0f}) and {waiting:,.0f} us waiting (for the "
            f"DataNode and the kernel's hand-offs, on the same cores). hdfs-native's read takes {split(native)}.",
            f"With the same wait, 1.0x needs at most {wall(native) - waiting:,.0f} us of CPU per read; the daemon "
            f"alone spends {d:,.0f}, and a no-op pyfuse3 daemon (the floor) {f:,.0f}.",
            profiled("The daemon's", "W1 " + MOUNT, d),
            profiled("The floor's daemon's", "W1 " + FLOOR, f),
        ]
        explain["CPU"] = [
            f"Of the daemon's {d:,.0f} us per read, {runtime_us('W1 ' + MOUNT, d):,.0f} are outside hdfsfuse's own "
            f"code (trio, with the cancel scopes and checkpoints the read path enters; pyfuse3 and libfuse; "
            f"socket system calls; profile above), against "
            f"{per_op(native):,.0f} us for hdfs-native's whole read (its process, Rust, no FUSE)."]
    if lib and native:
        waiting = wall(lib) - per_op(lib)
        explain["W1 library"] = [
            f"The library's read takes {split(lib)}; hdfs-native's {split(native)}. "
            f"1.2x needs at most {wall(native) / 1.2:,.0f} us per read, so at most "
            f"{wall(native) / 1.2 - waiting:,.0f} us of CPU with the same wait.",
            profiled("The library's", "W1 " + LIBRARY, per_op(lib))]
    w4m, w4n = row("W4", MOUNT), row("W4", NATIVE)
    if w4m and w4n and w4m.get("seconds"):
        d4 = per_op(w4m, "daemon_cpu_us_per_op")
        explain["W4"] = [
            f"With 8 readers the daemon was busy {w4m['daemon_cpu_seconds'] / w4m['seconds']:.2f} of a core "
            f"(one process, one GIL: at most 1) at {d4:,.0f} us per read, which caps it near "
            f"{1e6 / d4 if d4 else 0:,.0f} reads/s; hdfs-native spent {per_op(w4n):,.0f} us per read across its "
            f"threads. The W1 profile above says where the daemon's time goes."]
    w3m, w3l, w3f, w3g = row("W3", MOUNT), row("W3", LIBRARY), row("W3", FLOOR), row("W3", GO)
    if w3m and w3l and w3f and w3g and w3l.get("mbps") and w3f.get("mbps"):
        ceiling = 1 / (1 / w3l["mbps"] + 1 / w3f["mbps"])
        ms_per_mb = w3m["daemon_cpu_seconds"] / (w3m["app_bytes"] / 1e6) * 1e3
        busy = w3m["daemon_cpu_seconds"] / w3m["seconds"] if w3m.get("seconds") else 0.0
        overlap = (f" The mount made more than that ({w3m['mbps']:,.0f}): the library's figure includes waits "
                   "for the DataNodes, which the mount overlaps with its replies." if w3m["mbps"] > ceiling
                   else f" The mount made {w3m['mbps']:,.0f}.")
        explain["W3"] = [
            f"The daemon spent {ms_per_mb:.2f} ms of CPU per MB and was busy {busy:.2f} of a core (one process, "
            f"one GIL: at most 1); at colinmarc/hdfs's {w3g['mbps']:,.0f} MB/s that would be "
            f"{ms_per_mb * w3g['mbps'] / 1e3:.2f} of a core, beside the DataNodes streaming on the same two cores.",
            f"One GIL both fetches (the library alone: {w3l['mbps']:,.0f} MB/s) and answers FUSE (the floor alone: "
            f"{w3f['mbps']:,.0f} MB/s); one after the other they allow about {ceiling:,.0f} MB/s.{overlap}",
            profiled("The daemon's", "W3 " + MOUNT, ms_per_mb, "ms")]
    floors = extra.get("page_floor", {})
    mmap_probe = extra.get("shared_mmap", {})
    for w, key, what in (("W6", "wire_bytes", "wire"), ("W2", "bytes_read", "BytesRead")):
        direct = row(w, "hdfsfuse mount (direct_io)")
        if w in floors and direct.get("app_bytes"):
            explain[w] = [
                f"In page-cache mode (the default) the kernel asks the daemon for whole 4 KiB pages: the pages these "
                f"reads touch are {floors[w]:.2f}x the bytes asked for, before checksums and framing. direct_io, "
                f"which asks for the bytes read, made {direct[key] / direct['app_bytes']:.2f} ({what}) in this run.",
                f"direct_io is not the default because a shared mmap of a direct_io file fails here "
                f"({mmap_probe.get('direct_io', '-')}; page cache: {mmap_probe.get('page cache', '-')}): "
                "libfuse 3.14 cannot ask for FUSE_DIRECT_IO_ALLOW_MMAP."]
    out: list[str] = []
    for t in target_checks(report):
        if t.met is False:
            out += [f"**{t.name}** ({t.text})", ""]
            out += [f"- {line}" for line in explain.get(t.key, ["(nothing measured explains it)"])]
            out.append("")
    return out or ["Every target is met."]


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
