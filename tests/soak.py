"""Soak: many parallel readers on a real mount, every read verified against the source.

    .venv/bin/python -m tests.soak [--seconds 600] [--readers 32]

Starts a cluster, writes files with the Java client, mounts them (foreground daemon), and runs
`readers` threads mixing random reads (1 B to 256 KiB) and sequential streams for `seconds`.
Samples the daemon's RSS and open sockets, and prints one JSON summary: mismatches (must be 0),
errors, reads, bytes, RSS and sockets at the start and the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from pathlib import Path

from tests.minidfs import ClusterOptions, MiniDfs
from tests.mounting import Mount

MiB = 1 << 20


def daemon_sample(pid: int) -> tuple[int, int]:
    """(RSS in KiB, open sockets) of a process."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    sockets = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                sockets += 1
        except OSError:
            pass
    return rss, sockets


def soak(seconds: float, readers: int, file_mib: int = 24, files: int = 4) -> dict[str, object]:
    with MiniDfs(ClusterOptions(datanodes=3, block_size=4 * MiB)) as cluster:
        sources = {}
        for i in range(files):
            sources[f"/soak/f{i}"] = cluster.put_bytes(random.Random(i).randbytes(file_mib * MiB), f"/soak/f{i}")
        mount = Mount(cluster, "readahead_total=32M", "direct_io", foreground=True)
        assert mount.proc is not None
        pid = mount.proc.pid
        counts = {"reads": 0, "bytes": 0, "mismatches": 0, "errors": 0}
        lock = threading.Lock()
        stop = time.monotonic() + seconds
        start_rss, start_sockets = daemon_sample(pid)
        samples: list[tuple[int, int]] = []

        def reader(seed: int) -> None:
            rnd = random.Random(seed)
            while time.monotonic() < stop:
                path = rnd.choice(list(sources))
                data = sources[path]
                try:
                    with open(mount.path(path), "rb", buffering=0) as f:
                        if rnd.random() < 0.7:
                            for _ in range(20):
                                off, n = rnd.randrange(len(data)), rnd.randrange(1, 256 * 1024)
                                got = os.pread(f.fileno(), n, off)
                                ok = got == data[off : off + n]
                                with lock:
                                    counts["reads"] += 1
                                    counts["bytes"] += len(got)
                                    counts["mismatches"] += not ok
                        else:
                            off = rnd.randrange(len(data))
                            f.seek(off)
                            got = f.read(rnd.randrange(1, 8 * MiB))
                            ok = got == data[off : off + len(got)] and len(got) > 0
                            with lock:
                                counts["reads"] += 1
                                counts["bytes"] += len(got)
                                counts["mismatches"] += not ok
                except OSError:
                    with lock:
                        counts["errors"] += 1

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(readers)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            time.sleep(1)
            samples.append(daemon_sample(pid))
        for t in threads:
            t.join()
        # Idle pooled connections expire after 3 s; give the reaper a few rounds.
        deadline = time.monotonic() + 15
        end_rss, end_sockets = daemon_sample(pid)
        while end_sockets > start_sockets and time.monotonic() < deadline:
            time.sleep(0.5)
            end_rss, end_sockets = daemon_sample(pid)
        mount.unmount()
        return {**counts, "seconds": seconds, "readers": readers,
                "rss_kib_start": start_rss, "rss_kib_end": end_rss,
                "rss_kib_max": max((s[0] for s in samples), default=end_rss),
                "sockets_start": start_sockets, "sockets_end": end_sockets,
                "sockets_max": max((s[1] for s in samples), default=end_sockets)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--readers", type=int, default=32)
    a = p.parse_args(argv)
    result = soak(a.seconds, a.readers)
    print(json.dumps(result))
    return 0 if result["mismatches"] == 0 and result["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
