"""Where a process's CPU goes during one timed workload: py-spy samples folded into a few buckets.

The main bench explains each missed target of issue 15 with a profile taken in the same run
(`tests.bench.run`). A profiled pass is a pass of its own, never a timed one: sampling slows
the process it samples.

    py-spy record --native --format raw --rate R --pid P      (stops P for each sample)
        "frame;frame;...;leaf count" per distinct stack
            |
        fold(): each sample goes to the bucket of its innermost frame that names one
            |
        Profile: samples per bucket, the busiest hdfsfuse functions

A low rate keeps the sampled process near its own speed: at 400 samples/s py-spy halved the
reads/s of the library and crowded timer-driven tasks into the samples (12% for two tasks that
woke some 40 times a second); at 50 the library kept its speed and those tasks fell to about
1.5%. The bench samples at 100 for more samples per pass. Samples outside the thread that runs
trio's loop (an idle worker thread waiting on a lock) are left out, and so is time waiting in
epoll.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

WAITING = "waiting in epoll"
# (bucket, substrings of a frame that put a sample in it), tried on each frame from the leaf out.
RULES: list[tuple[str, tuple[str, ...]]] = [
    ("socket system calls", ("socketmodule.c",)),
    (WAITING, ("selectmodule.c",)),
    ("pyfuse3 and libfuse", ("libfuse3.so", ".pyx", ".pxi")),
    ("hdfsfuse", ("hdfsfuse/",)),
    ("trio", ("trio/", "outcome/", "trio.", "outcome.")),
]
LOOP_FRAME = "unrolled_run (trio/_core/_run.py"
_LINE = re.compile(r":\d+\)$")


@dataclasses.dataclass
class Profile:
    samples: dict[str, int]  # bucket -> samples, WAITING included
    functions: dict[str, int]  # hdfsfuse function -> samples where it is the innermost hdfsfuse frame

    @property
    def busy(self) -> int:
        return sum(n for bucket, n in self.samples.items() if bucket != WAITING)

    def shares(self) -> dict[str, float]:
        """Each bucket's share of the busy samples, largest first (waiting left out)."""
        busy = self.busy or 1
        return {b: n / busy for b, n in sorted(self.samples.items(), key=lambda kv: -kv[1]) if b != WAITING}


def fold(raw: str) -> Profile:
    """py-spy's raw output ("a;b;c 12" per line) as samples per bucket (pure)."""
    buckets: collections.Counter[str] = collections.Counter()
    functions: collections.Counter[str] = collections.Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if not any(f.startswith(LOOP_FRAME) for f in frames):
            continue  # another thread: idle helpers, never the loop's work
        # Every counted stack holds trio's loop frame, so some frame always names a bucket.
        bucket = next(name for frame in reversed(frames) for name, keys in RULES if any(k in frame for k in keys))
        buckets[bucket] += int(count)
        own = next((f for f in reversed(frames) if "hdfsfuse/" in f), None)
        if own is not None and bucket == "hdfsfuse":
            functions[_LINE.sub(")", own)] += int(count)
    return Profile(dict(buckets), dict(functions.most_common(8)))


def py_spy() -> str:
    """The py-spy next to this interpreter (the bench extra installs it), else one on PATH."""
    here = Path(sys.executable).with_name("py-spy")
    found = str(here) if here.exists() else shutil.which("py-spy")
    if found is None:
        raise RuntimeError("py-spy is not installed: pip install -e '.[bench]'")
    return found


@contextlib.contextmanager
def sampled(pid: int, rate: int, into: list[Profile]) -> Iterator[None]:
    """Sample `pid` for the duration of the block; its folded profile is appended to `into`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "stacks.txt"
        spy = subprocess.Popen([py_spy(), "record", "--native", "--format", "raw", "--rate", str(rate),
                                "--pid", str(pid), "--output", str(out)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            yield
        finally:
            spy.send_signal(signal.SIGINT)  # py-spy writes what it has, then exits
            _, err = spy.communicate(timeout=60)
        if not out.exists():
            raise RuntimeError(f"py-spy wrote no profile of pid {pid}: {err.strip()[-500:]}")
        into.append(fold(out.read_text()))
