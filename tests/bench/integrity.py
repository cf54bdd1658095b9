"""Benchmarks for the integrity and scaling work (issue 11), each on a fresh cluster:

    .venv/bin/python -m tests.bench.integrity [--reads N] [--entries N] [--blocks N] [--only NAME]

- `hedging`: p50/p99 of random 4 KiB preads through the mount (default page-cache mode) with
  every DataNode healthy and with one DataNode slowed by tc on its port; default (adaptive)
  hedging against `hedge_after=off`. Rounds are interleaved; each mount's first 200 reads
  are a warm-up kept out of the figures.
- `listing`: `ls` of a directory of N entries through the mount: time to the first entry
  (os.scandir), time to the last, and the daemon's peak RSS (VmHWM).
- `open`: opening a file of N blocks: NameNode bytes and time for the windowed open, against
  one whole-file getBlockLocations (what every open did before).

Prints one JSON document; figures are wall-clock on a noisy 2-core machine: read ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import trio

from hdfsfuse.client import ClientOptions, HdfsClient
from tests.bench.run import daemon_pid
from tests.minidfs import ClusterOptions, MiniDfs, slow_port
from tests.mounting import Mount

MiB = 1 << 20
WHOLE_FILE = 1 << 62  # a getBlockLocations length that covers any file
WARMUP = 200


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {"p50_ms": round(statistics.median(s) * 1000, 3), "p99_ms": round(s[int(len(s) * 0.99) - 1] * 1000, 3),
            "max_ms": round(s[-1] * 1000, 3), "reads": len(s), "over_100ms": sum(1 for x in s if x > 0.1)}


def hedging(reads: int, rate: str) -> dict[str, object]:
    size = 64 * MiB
    with MiniDfs(ClusterOptions(datanodes=3)) as c, tempfile.NamedTemporaryFile() as f:
        f.write(random.Random(1).randbytes(size))
        f.flush()
        c.put(f.name, "/hedge")
        slow = c.blocks("/hedge")[0]["xfer"][0]  # the first replica of several blocks
        slow_port_ = int(slow.rsplit(":", 1)[1])
        mounts = {"auto": Mount(c), "off": Mount(c, "hedge_after=off")}
        samples: dict[tuple[str, str], list[float]] = {}
        try:
            fds = {k: os.open(m.path("/hedge"), os.O_RDONLY) for k, m in mounts.items()}
            rnd = random.Random(2)
            for fd in fds.values():  # warm-up, not measured
                for _ in range(WARMUP):
                    os.pread(fd, 4096, rnd.randrange(size // 4096) * 4096)
            for phase in ("healthy", "one slow DataNode"):
                ctx = slow_port(slow_port_, rate) if phase != "healthy" else contextlib.nullcontext()
                with ctx:
                    for _ in range(reads // 100):  # interleave rounds of 100 reads per mount
                        for k, fd in fds.items():
                            out = samples.setdefault((k, phase), [])
                            for _ in range(100):
                                off = rnd.randrange(size // 4096) * 4096
                                t0 = time.perf_counter()
                                os.pread(fd, 4096, off)
                                out.append(time.perf_counter() - t0)
            stats = {k: json.loads(os.getxattr(m.dir, "user.hdfsfuse.stats")) for k, m in mounts.items()}
            for fd in fds.values():
                os.close(fd)
        finally:
            for m in mounts.values():
                m.unmount()
    result: dict[str, object] = {"slow_rate": rate, "slow_datanode": slow}
    for (k, phase), s in samples.items():
        result[f"hedge={k}, {phase}"] = _percentiles(s)
    for k, st in stats.items():
        result[f"hedge={k} counters"] = {n: st[n] for n in ("hedged_reads", "hedge_wins", "replica_failovers",
                                                             "datanode_latency_ms")}
    return result


def listing(entries: int) -> dict[str, object]:
    with MiniDfs(ClusterOptions(datanodes=1)) as c:
        t0 = time.perf_counter()
        c.touch_many("/big-dir", entries)
        made = time.perf_counter() - t0
        m = Mount(c)
        try:
            pid = daemon_pid(m)
            rss0 = _status_kib(pid, "VmRSS")
            t0 = time.perf_counter()
            n = 0
            with os.scandir(m.path("/big-dir")) as it:
                for _ in it:
                    if n == 0:
                        first = time.perf_counter() - t0
                    n += 1
            last = time.perf_counter() - t0
            hwm = _status_kib(pid, "VmHWM")
        finally:
            m.unmount()
    return {"entries": n, "created_in_s": round(made, 1), "first_entry_ms": round(first * 1000, 1),
            "all_entries_s": round(last, 2), "daemon_rss_before_kib": rss0, "daemon_peak_rss_kib": hwm}


def opening(blocks: int) -> dict[str, object]:
    with MiniDfs(ClusterOptions(datanodes=1, replication=1)) as c, tempfile.NamedTemporaryFile() as f:
        f.write(random.Random(3).randbytes(blocks * 1024))
        f.flush()
        t0 = time.perf_counter()
        c.put(f.name, "/many-blocks", block_size=1024, replication=1, timeout=1800)
        written = time.perf_counter() - t0

        async def main() -> dict[str, object]:
            async with HdfsClient.connect(c.uri, conf_dir=c.conf_dir, options=ClientOptions()) as client:
                nn = client.namenode
                sizes: list[int] = []
                original = nn.get_block_locations

                async def counted(path: str, offset: int, length: int):  # type: ignore[no-untyped-def]
                    lbs = await original(path, offset, length)
                    sizes.append(lbs.ByteSize())
                    return lbs

                nn.get_block_locations = counted  # type: ignore[method-assign]
                await nn.get_file_info("/")
                t0 = time.perf_counter()
                file = await client.open("/many-blocks")
                windowed = time.perf_counter() - t0
                windowed_bytes = sum(sizes)
                sizes.clear()
                t0 = time.perf_counter()
                try:
                    whole = await nn.get_block_locations("/many-blocks", 0, WHOLE_FILE)
                    whole_result: dict[str, object] = {"blocks": len(whole.blocks), "bytes": sizes[0],
                                                       "seconds": round(time.perf_counter() - t0, 3)}
                except Exception as e:  # the old way may not fit in one frame at all
                    whole_result = {"error": f"{type(e).__name__}: {e}"}
                return {"blocks": blocks, "written_in_s": round(written, 1),
                        "windowed_open": {"blocks_located": len(file.blocks), "bytes": windowed_bytes,
                                          "seconds": round(windowed, 4)},
                        "whole_file_locations": whole_result}

        return trio.run(main)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reads", type=int, default=2000)
    p.add_argument("--rate", default="64kbit")
    p.add_argument("--entries", type=int, default=200_000)
    p.add_argument("--blocks", type=int, default=100_000)
    p.add_argument("--only", choices=["hedging", "listing", "open"])
    a = p.parse_args()
    report: dict[str, object] = {}
    if a.only in (None, "hedging"):
        report["hedging"] = hedging(a.reads, a.rate)
        print(json.dumps(report["hedging"], indent=1), flush=True)
    if a.only in (None, "listing"):
        report["listing"] = listing(a.entries)
        print(json.dumps(report["listing"], indent=1), flush=True)
    if a.only in (None, "open"):
        report["open"] = opening(a.blocks)
        print(json.dumps(report["open"], indent=1), flush=True)
    out = Path(__file__).parent / "results" / "integrity.json"
    merged = json.loads(out.read_text()) if out.exists() else {}
    merged.update(report)  # a run of one part keeps the others' last figures
    out.write_text(json.dumps(merged, indent=1))
    out.with_suffix(".md").write_text(render(merged))


def render(report: dict) -> str:  # type: ignore[type-arg]
    """integrity.json as a readable report."""
    lines = ["# Integrity and scale benchmarks", "", "Generated by `.venv/bin/python -m tests.bench.integrity`.", ""]
    hedging = report.get("hedging")
    if hedging:
        lines += ["## 4 KiB random preads through the mount (page cache), one DataNode slowed with tc", "",
                  f"Slowed DataNode: {hedging['slow_datanode']} at {hedging['slow_rate']}; reads after a "
                  f"{WARMUP}-read warm-up, interleaved between the two mounts.", "",
                  "| setup | p50 ms | p99 ms | max ms | reads over 100 ms |", "|---|---|---|---|---|"]
        for key, v in hedging.items():
            if isinstance(v, dict) and "p99_ms" in v:
                lines.append(f"| {key} | {v['p50_ms']} | {v['p99_ms']} | {v['max_ms']} | {v['over_100ms']} |")
        lines += ["", "Counters: " + "; ".join(f"{k}: {v}" for k, v in hedging.items() if k.endswith("counters")), ""]
    if report.get("listing"):
        lines += ["## ls of a large directory", "", "```", json.dumps(report["listing"], indent=1), "```", ""]
    if report.get("open"):
        lines += ["## Opening a file of many blocks", "", "```", json.dumps(report["open"], indent=1), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
