"""W8, training-data loaders: many small files, many workers, seeded shuffled epochs.

    .venv/bin/python -m tests.bench.loader [--files 2000] [--dirs 20] [--size 114688] [--workers 8]
        [--rounds 3] [--contenders mount,native,library] [--mount-option O ...] [--out FILE]

The data set: `--files` files of `--size` bytes in `--dirs` directories (ImageFolder's shape:
one directory per class), written by the Java client. Every file's bytes are unique to its path
and offset (`expected`), and every worker checks every byte it reads.

Before the first round, each contender reads one untimed epoch (its figures are not reported):
the cluster's JVMs are cold right after the data set is written, and whichever contender read
first would pay for their warm-up.

Per contender and round, each phase is timed on its own, with the page cache dropped first:
    scan          `listdir` + `stat` of every file (the libraries: their listing calls)
    epoch         `--workers` processes read whole files in a seeded shuffled order (worker k
                  takes every k-th file of the epoch's order, as a sampler shards an epoch)
    second epoch  a new shuffled order on the same mount or clients
    cold epoch    (the mount only) a fresh mount, no listing before the epoch
Contenders, interleaved each round: the mount in its default mode, hdfs-native (one Client per
worker) and hdfsfuse's own library (one HdfsClient per worker); `--contenders ...,floor` adds the
FUSE floor (`noop_fs`: the same files as zeros from memory, not checked), what FUSE and pyfuse3
alone cost per file. Each worker process sets up its
client first, then waits; the clock and the referees start when all are ready.

Referees per phase: the NameNode's RPC counts by method (harness `nn_rpc_counts`), the
DataNodes' BytesRead and the nftables wire bytes (amplification: over the bytes the workers
read), the daemon's CPU (for the mount) and the workers' own CPU. Figures are medians over
rounds. Prints the table and writes JSON to `--out`.
"""

from __future__ import annotations

import argparse
import collections
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

from hdfsfuse.client.located import SETTLED_MS
from tests.bench.run import FloorMount, _process_cpu, daemon_pid, drop_caches
from tests.minidfs import ClusterOptions, MiniDfs
from tests.mounting import Mount

PAGE = 4096
METHODS = ("GetListing", "GetFileInfo", "GetFileLinkInfo", "GetLocatedFileInfo", "GetBlockLocations",
           "GetServerDefaults", "Msync")


def expected(rel: str, size: int, touched: bool = False) -> bytes:
    """The bytes of the data set file `rel`: every 4 KiB page names the file and its own index
    (`--touch`: the harness's touch_many pattern instead, byte i % 256 in the i-th file of a directory)."""
    if touched:
        return bytes([int(rel.rsplit("-", 1)[1]) % 256]) * size
    pages = -(-size // PAGE)
    return b"".join((f"{rel}@{k:05d}".ljust(PAGE // 64 - 1) + "\n").encode() * 64 for k in range(pages))[:size]


def names(files: int, dirs: int, touched: bool = False) -> list[str]:
    per_dir = -(-files // dirs)
    if touched:
        return [f"class-{i // per_dir:03d}/img-{i % per_dir:05d}" for i in range(files)]
    return [f"class-{i // per_dir:03d}/img-{i:06d}.bin" for i in range(files)]


def write_data_set(cluster: MiniDfs, root: str, rels: list[str], size: int, touched: bool = False) -> None:
    if touched:  # in the harness's JVM, one command per directory: fast enough for 100,000 files
        per_dir = collections.Counter(rel.split("/")[0] for rel in rels)
        for directory, count in per_dir.items():
            cluster.touch_many(f"{root}/{directory}", count, size=size, prefix="img-")
        return
    with tempfile.TemporaryDirectory() as work:
        local = Path(work) / "f"
        for rel in rels:
            local.write_bytes(expected(rel, size))
            cluster.put(local, f"{root}/{rel}")


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# ----- the worker process ---------------------------------------------------------------------------


def worker(args: argparse.Namespace) -> None:
    rels = Path(args.list).read_text().split()
    if args.kind == "library":
        _library_worker(args, rels)
        return
    if args.kind == "native":
        from hdfs_native import Client

        client = Client(args.uri)

        def read(rel: str) -> bytes:
            with client.read(f"{args.root}/{rel}") as f:
                return bytes(f.read())

        def scan() -> int:
            return sum(1 for d in {r.split("/")[0] for r in rels} for _ in client.list_status(f"{args.root}/{d}"))
    else:
        def read(rel: str) -> bytes:
            with open(f"{args.mount_dir}/{rel}", "rb") as f:
                return f.read()

        def scan() -> int:
            n = 0
            for d in sorted({r.split("/")[0] for r in rels}):
                for name in os.listdir(f"{args.mount_dir}/{d}"):
                    os.stat(f"{args.mount_dir}/{d}/{name}")
                    n += 1
            return n

    print("ready", flush=True)
    sys.stdin.readline()
    c0, t0 = _cpu(), time.perf_counter()
    if args.scan:
        done, wrong, total = scan(), 0, 0
    else:
        done = wrong = total = 0
        for rel in rels:
            data = read(rel)
            total += len(data)
            wrong += args.kind != "floor" and data != expected(rel, args.size, args.touch)
            done += 1
    print(json.dumps({"seconds": time.perf_counter() - t0, "cpu_seconds": _cpu() - c0, "files": done,
                      "bytes": total, "wrong": wrong}), flush=True)


def _library_worker(args: argparse.Namespace, rels: list[str]) -> None:
    import trio

    from hdfsfuse.client import HdfsClient

    async def main() -> None:
        async with HdfsClient.connect(args.uri, conf_dir=args.conf_dir) as client:
            print("ready", flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)
            c0, t0 = _cpu(), time.perf_counter()
            done = wrong = total = 0
            if args.scan:
                for d in sorted({r.split("/")[0] for r in rels}):
                    done += len(await client.namenode.list_dir(f"{args.root}/{d}"))
            else:
                for rel in rels:
                    file = await client.open(f"{args.root}/{rel}")
                    data = await client.read_range(file, 0, file.length)
                    total += len(data)
                    wrong += data != expected(rel, args.size, args.touch)
                    done += 1
            print(json.dumps({"seconds": time.perf_counter() - t0, "cpu_seconds": _cpu() - c0, "files": done,
                              "bytes": total, "wrong": wrong}), flush=True)

    trio.run(main)


# ----- the referee -----------------------------------------------------------------------------------


class Phase:
    """One timed phase: `workers` processes, each given its share of `order`."""

    def __init__(self, cluster: MiniDfs, kind: str, order: list[str], workers: int, *, scan: bool,
                 root: str, size: int, touch: bool, mount: Mount | FloorMount | None) -> None:
        self.cluster = cluster
        self.work = tempfile.TemporaryDirectory()
        self.procs = []
        for k in range(workers):
            listing = Path(self.work.name) / f"w{k}"
            listing.write_text("\n".join(order[k::workers]))
            argv = [sys.executable, "-m", "tests.bench.loader", "worker", "--kind", kind, "--list", str(listing),
                    "--root", root, "--size", str(size), "--uri", cluster.uri, "--conf-dir", cluster.conf_dir,
                    *(["--mount-dir", mount.dir] if mount is not None else []), *(["--scan"] if scan else []),
                    *(["--touch"] if touch else [])]
            self.procs.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        self.daemon = (mount.proc.pid if isinstance(mount, FloorMount) else daemon_pid(mount)) if mount else 0

    def run(self) -> dict[str, Any]:
        for p in self.procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                raise RuntimeError("a worker failed to start")
        drop_caches()
        rpc0, m0, cpu0 = self.cluster.rpc_counts(), self.cluster.metrics_total(), self._daemon_cpu()
        with self.cluster.wire() as wire:
            t0 = time.perf_counter()
            for p in self.procs:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            outs = [json.loads(p.stdout.readline()) for p in self.procs]  # type: ignore[union-attr]
            seconds = time.perf_counter() - t0
            time.sleep(0.3)  # in-flight packets and the DataNodes' accounting land
        daemon_cpu = self._daemon_cpu() - cpu0
        peak_rss = _peak_rss_mib(self.daemon) if self.daemon else 0.0
        rpc1, m1 = self.cluster.rpc_counts(), self.cluster.metrics_total()
        for p in self.procs:
            p.stdin.close()  # type: ignore[union-attr]
            if p.wait(timeout=60) != 0:
                raise RuntimeError("a worker failed")
        self.work.cleanup()
        files = sum(o["files"] for o in outs)
        app = sum(o["bytes"] for o in outs)
        return {
            "seconds": seconds, "files": files, "files_per_s": files / seconds, "wrong": sum(o["wrong"] for o in outs),
            "worker_cpu_us_per_file": 1e6 * sum(o["cpu_seconds"] for o in outs) / max(1, files),
            "daemon_cpu_us_per_file": 1e6 * daemon_cpu / max(1, files),
            "rpcs_per_file": {m: (rpc1[m] - rpc0[m]) / max(1, files) for m in METHODS if rpc1[m] - rpc0[m]},
            "rpcs": sum(rpc1[m] - rpc0[m] for m in METHODS),
            "bytesread_amp": (m1["BytesRead"] - m0["BytesRead"]) / max(1, app),
            "wire_amp": wire.bytes / max(1, app),
            "daemon_peak_rss_mib": peak_rss,
        }

    def _daemon_cpu(self) -> float:
        return _process_cpu(self.daemon) if self.daemon else 0.0


def _peak_rss_mib(pid: int) -> float:
    """The process's peak resident set so far (VmHWM), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def shuffled(rels: list[str], seed: int) -> list[str]:
    """An epoch's seeded order."""
    order = list(rels)
    random.Random(seed).shuffle(order)
    return order


def contender_mount(cluster: MiniDfs, kind: str, rels: list[str], a: argparse.Namespace,
                    mount_options: list[str]) -> Mount | FloorMount | None:
    """A fresh mount for the contenders that read through one (None for the libraries)."""
    if kind == "mount":
        return Mount(cluster, *mount_options, root=a.root)
    if kind == "floor":
        return FloorMount({f"/{rel}": a.size for rel in rels})
    return None


def contender_phases(cluster: MiniDfs, kind: str, rels: list[str], a: argparse.Namespace, seed: int,
                     mount_options: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    common = {"root": a.root, "size": a.size, "touch": a.touch}
    mount = contender_mount(cluster, kind, rels, a, mount_options)
    try:
        if kind != "floor":  # (the no-op daemon lists no directories)
            out["scan"] = Phase(cluster, kind, rels, 1, scan=True, mount=mount, **common).run()
        out["epoch"] = Phase(cluster, kind, shuffled(rels, seed), a.workers, scan=False, mount=mount, **common).run()
        out["second epoch"] = Phase(cluster, kind, shuffled(rels, seed + 1), a.workers, scan=False, mount=mount,
                                    **common).run()
    finally:
        if mount is not None:
            mount.unmount()
    if kind == "mount":
        mount = Mount(cluster, *mount_options, root=a.root)
        try:
            out["cold epoch"] = Phase(cluster, kind, shuffled(rels, seed + 2), a.workers, scan=False, mount=mount,
                                      **common).run()
        finally:
            mount.unmount()
    return out


def warm_up(cluster: MiniDfs, kind: str, rels: list[str], a: argparse.Namespace, mount_options: list[str]) -> float:
    """One untimed epoch of a contender before the first round, outside every referee: the
    cluster's JVMs are cold right after the data set is written, and whoever read first would
    pay for their warm-up. Returns its files/s (for the log only)."""
    mount = contender_mount(cluster, kind, rels, a, mount_options)
    try:
        figures = Phase(cluster, kind, shuffled(rels, -1), a.workers, scan=False, mount=mount, root=a.root,
                        size=a.size, touch=a.touch).run()
    finally:
        if mount is not None:
            mount.unmount()
    if figures["wrong"]:
        raise RuntimeError(f"{kind}: {figures['wrong']} files read wrong in the warm-up")
    return figures["files_per_s"]


def median_phase(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("seconds", "files_per_s", "worker_cpu_us_per_file", "daemon_cpu_us_per_file", "rpcs",
                "bytesread_amp", "wire_amp", "daemon_peak_rss_mib"):
        out[key] = round(statistics.median(r[key] for r in runs), 4)
    out["files"] = runs[0]["files"]
    out["wrong"] = sum(r["wrong"] for r in runs)
    methods = {m for r in runs for m in r["rpcs_per_file"]}
    out["rpcs_per_file"] = {m: round(statistics.median(r["rpcs_per_file"].get(m, 0.0) for r in runs), 4)
                            for m in sorted(methods)}
    out["rpcs_per_file_total"] = round(sum(out["rpcs_per_file"].values()), 4)
    return out


NAMES = {"mount": "hdfsfuse mount", "native": "hdfs-native", "library": "hdfsfuse library",
         "floor": "FUSE floor (no-op pyfuse3 daemon)"}


def render(report: dict[str, Any]) -> str:
    lines = ["| contender | phase | files/s | NameNode RPCs per file (by method) | daemon CPU/file | "
             "worker CPU/file | BytesRead amp | wire amp | wrong |", "|---|---|---|---|---|---|---|---|---|"]
    for kind, phases in report["figures"].items():
        for phase, f in phases.items():
            methods = ", ".join(f"{m} {v:g}" for m, v in f["rpcs_per_file"].items()) or "0"
            lines.append(
                f"| {NAMES[kind]} | {phase} | {f['files_per_s']:,.0f} | {f['rpcs_per_file_total']:g} ({methods}) | "
                f"{f['daemon_cpu_us_per_file']:,.0f} µs | {f['worker_cpu_us_per_file']:,.0f} µs | "
                f"{f['bytesread_amp']:.3f} | {f['wire_amp']:.3f} | {f['wrong']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command")
    w = sub.add_parser("worker")
    w.add_argument("--kind", choices=("mount", "native", "library", "floor"), required=True)
    w.add_argument("--list", required=True)
    w.add_argument("--root", required=True)
    w.add_argument("--size", type=int, required=True)
    w.add_argument("--uri", required=True)
    w.add_argument("--conf-dir", required=True)
    w.add_argument("--mount-dir")
    w.add_argument("--scan", action="store_true")
    w.add_argument("--touch", action="store_true")
    p.add_argument("--files", type=int, default=2000)
    p.add_argument("--dirs", type=int, default=20)
    p.add_argument("--size", type=int, default=112 * 1024)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--contenders", default="mount,native,library")
    p.add_argument("--mount-option", action="append", default=[], help="extra -o option for the mount")
    p.add_argument("--root", default="/w8")
    p.add_argument("--touch", action="store_true",
                   help="write the data set with the harness's touch_many (fast: for 100,000 files); "
                        "files then hold byte i %% 256, checked as such")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)

    if a.command == "worker":
        worker(a)
        return
    kinds = a.contenders.split(",")
    rels = names(a.files, a.dirs, a.touch)
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {k: collections.defaultdict(list) for k in kinds}
    with MiniDfs(ClusterOptions(datanodes=3)) as cluster:
        t0 = time.perf_counter()
        write_data_set(cluster, a.root, rels, a.size, a.touch)
        print(f"wrote {len(rels)} files in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        # A training set is read long after it was written: let the last file settle (a mount opens
        # on kept statuses only files unchanged for a minute) before the first round.
        time.sleep(SETTLED_MS / 1000)
        for kind in kinds:
            print(f"warm-up {kind}: {warm_up(cluster, kind, rels, a, a.mount_option):.0f} files/s (not reported)",
                  file=sys.stderr)
        for r in range(a.rounds):
            for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
                for phase, figures in contender_phases(cluster, kind, rels, a, 1000 * r, a.mount_option).items():
                    raw[kind][phase].append(figures)
                    print(f"round {r} {kind} {phase}: {figures['files_per_s']:.0f} files/s, "
                          f"{figures['rpcs'] / max(1, figures['files']):.3f} RPCs/file", file=sys.stderr)
    report = {
        "workload": "W8", "files": a.files, "dirs": a.dirs, "size": a.size, "workers": a.workers,
        "rounds": a.rounds, "mount_options": a.mount_option,
        "figures": {k: {ph: median_phase(runs) for ph, runs in phases.items()} for k, phases in raw.items()},
        "raw": raw,
    }
    print(render(report))
    if a.out is not None:
        a.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
