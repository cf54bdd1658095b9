"""A/B of two code trees through the mount: this checkout against a baseline git revision.

    python -m tests.bench.ab --baseline REV [--rounds N] [--reads N] [--size BYTES] [--out FILE]

One cluster, two mounts with default options: this checkout's daemon, and the baseline's (a git
worktree of REV, its C extensions built in place, run with PYTHONPATH pointing at it). W1 (4 KiB
random aligned reads) and W3 (a sequential read of a large file) are measured with the main
bench's rule (`tests.bench.run.measure`: warm-up outside the referee, caches dropped first),
interleaved round by round, with the order of the two mounts alternating. Prints medians, CPU per
operation and the ratio new/baseline for each round; `--out` keeps them as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.bench.run import (
    WARMUP_READS,
    Contender,
    Result,
    _worker,
    daemon_pid,
    measure,
    random_reads,
    write_random_file,
)
from tests.minidfs import ClusterOptions, MiniDfs
from tests.mounting import Mount

REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20


def baseline_tree(revision: str, into: Path) -> Path:
    """A worktree of `revision` with its C extensions built in place."""
    tree = into / "baseline"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), revision], cwd=REPO, check=True,
                   capture_output=True)
    build = "from setuptools import setup; setup(script_args=['build_ext', '--inplace'])"
    subprocess.run([sys.executable, "-c", build], cwd=tree, check=True, capture_output=True)
    return tree


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", required=True, help="the git revision to compare against")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--reads", type=int, default=5000, help="W1 reads per round")
    p.add_argument("--size", type=int, default=512 * MiB, help="the W3 file's size (W1 reads a quarter of it)")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as work_dir:
        work = Path(work_dir)
        tree = baseline_tree(a.baseline, work)
        try:
            return run(a, work, tree)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, capture_output=True)


def run(a: argparse.Namespace, work: Path, tree: Path) -> int:
    small = a.size // 4
    with MiniDfs(ClusterOptions(datanodes=3, block_size=128 * MiB), heap="2g") as cluster:
        write_random_file(cluster, work, "/ab/small", small, 1)
        write_random_file(cluster, work, "/ab/large", a.size, 2)

        def offsets(name: str, reads: list[tuple[int, int]]) -> str:
            path = work / name
            path.write_text("".join(f"{o} {n}\n" for o, n in reads))
            return str(path)

        w1 = offsets("w1", random_reads(small, a.reads, 4096, True, 11))
        warm = offsets("warm", random_reads(small, WARMUP_READS, 4096, True, 99))
        # -P: the baseline daemon imports from PYTHONPATH, not from this checkout (the working directory).
        baseline_command = [sys.executable, "-P", "-m", "hdfsfuse.cli"]
        mounts = {
            "new": Mount(cluster),
            "baseline": Mount(cluster, command=baseline_command, env={"PYTHONPATH": str(tree)}),
        }
        results: dict[tuple[str, str], list[Result]] = {}
        try:
            for name, m in mounts.items():  # each daemon runs its own tree's C extensions
                maps = Path(f"/proc/{daemon_pid(m)}/maps").read_text()
                want = str(tree) if name == "baseline" else str(REPO / "hdfsfuse")
                assert f"{want}/" in maps and "_chunked_crc" in maps, f"the {name} daemon does not run {want}"
            contenders = {name: Contender(name, _worker("mount", cluster, m), lambda m=m: daemon_pid(m))
                          for name, m in mounts.items()}
            for rnd in range(a.rounds):
                order = ["new", "baseline"] if rnd % 2 == 0 else ["baseline", "new"]
                for workload, path, reads, ops in (("W1", "/ab/small", w1, a.reads), ("W3", "/ab/large", "seq", 1)):
                    for name in order:
                        c = contenders[name]
                        r = measure(cluster, workload, c, ops, c.argv(path, reads, warm, 1))
                        results.setdefault((workload, name), []).append(r)
                        if workload == "W1":
                            figure = f"{r.rate:8.0f} reads/s  daemon {r.daemon_cpu_us_per_op:5.0f} us/read"
                        else:
                            figure = f"{r.mbps:8.1f} MB/s  daemon {r.daemon_cpu_seconds * 1e9 / r.app_bytes:5.3f} ms/MB"
                        print(f"round {rnd + 1} {workload} {name:8s} {figure}", flush=True)
        finally:
            for m in mounts.values():
                m.unmount()
    report = summarize(results)
    print(json.dumps(report, indent=1))
    if a.out is not None:
        a.out.write_text(json.dumps(report | {"baseline": a.baseline, "rounds": a.rounds}, indent=1))
    return 0


def summarize(results: dict[tuple[str, str], list[Result]]) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for workload in ("W1", "W3"):
        figure = (lambda r: r.rate) if workload == "W1" else (lambda r: r.mbps)
        new, old = results[(workload, "new")], results[(workload, "baseline")]
        per_round = [figure(n) / figure(o) for n, o in zip(new, old, strict=True)]
        out[workload] = {
            "new": round(statistics.median(figure(r) for r in new), 1),
            "baseline": round(statistics.median(figure(r) for r in old), 1),
            "ratio_of_medians": round(statistics.median(figure(r) for r in new)
                                      / statistics.median(figure(r) for r in old), 3),
            "ratio_by_round": [round(x, 3) for x in per_round],
        }
        for name, rs in (("new", new), ("baseline", old)):
            if workload == "W1":
                out[workload][f"daemon_cpu_us_per_read_{name}"] = round(statistics.median(
                    r.daemon_cpu_us_per_op for r in rs), 1)
            else:
                out[workload][f"daemon_cpu_ms_per_mb_{name}"] = round(statistics.median(
                    r.daemon_cpu_seconds * 1e3 / (r.app_bytes / 1e6) for r in rs), 3)
    return out


if __name__ == "__main__":
    sys.exit(main())
