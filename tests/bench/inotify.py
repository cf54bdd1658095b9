"""Live invalidation (-o inotify): how fast a change made by another client shows through the mount.

    .venv/bin/python -m tests.bench.inotify [--changes N]

A 3-DataNode cluster and one mount with hour-long entry, attribute and negative caches plus
`inotify`. For each change (an append, a new file, a chmod, a rename, a delete), the Java client
makes it, then this process polls the mount (os.stat every millisecond) until the change shows.
The time runs from the harness's reply to the first stat that shows it; it includes the edit
reaching the NameNode's log, one poll of the stream (every 0.2 s), and the kernel notification.
Prints one JSON document with the median, p95 and max per kind.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.minidfs import ClusterOptions, MiniDfs
from tests.mounting import Mount


def _until(condition: Callable[[], bool], limit: float = 30.0) -> float:
    t0 = time.perf_counter()
    while not condition():
        if time.perf_counter() - t0 > limit:
            raise RuntimeError("the change never showed")
        time.sleep(0.001)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--changes", type=int, default=20, help="changes of each kind")
    a = p.parse_args()
    seconds: dict[str, list[float]] = {}
    with MiniDfs(ClusterOptions(datanodes=3)) as cluster, tempfile.TemporaryDirectory() as work:
        extra = Path(work) / "extra"
        extra.write_bytes(b"x" * 1000)
        cluster.mkdir("/live")
        m = Mount(cluster, "inotify", "entry_timeout=3600,attr_timeout=3600,negative_timeout=3600")
        try:
            for i in range(a.changes):
                f, g = f"/live/f{i}", f"/live/g{i}"
                cluster.put_bytes(b"y" * 100, f)
                assert os.stat(m.path(f)).st_size == 100 and not os.path.exists(m.path(g))

                cluster.append_open(f, extra)
                cluster.append_close(f)
                seconds.setdefault("append", []).append(_until(lambda f=f: os.stat(m.path(f)).st_size == 1100))
                cluster.chmod(f, "600")
                seconds.setdefault("chmod", []).append(
                    _until(lambda f=f: stat.S_IMODE(os.stat(m.path(f)).st_mode) == 0o600))
                cluster.put_bytes(b"z", g)
                seconds.setdefault("create", []).append(_until(lambda g=g: os.path.exists(m.path(g))))
                cluster.rename(g, g + ".moved")
                seconds.setdefault("rename", []).append(_until(lambda g=g: not os.path.exists(m.path(g))))
                cluster.delete(f)
                seconds.setdefault("delete", []).append(_until(lambda f=f: not os.path.exists(m.path(f))))
        finally:
            m.unmount()

    def figures(xs: list[float]) -> dict[str, float]:
        xs = sorted(xs)
        return {"median_ms": round(statistics.median(xs) * 1000, 1),
                "p95_ms": round(xs[min(len(xs) - 1, int(0.95 * len(xs)))] * 1000, 1),
                "max_ms": round(xs[-1] * 1000, 1)}

    print(json.dumps({"changes_per_kind": a.changes, "poll_seconds": 0.2,
                      "figures": {kind: figures(xs) for kind, xs in seconds.items()}}, indent=2))


if __name__ == "__main__":
    main()
