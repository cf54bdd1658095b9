"""The demo: a local HDFS (MiniDFSCluster) with sample files, mounted with hdfsfuse.

    .venv/bin/python -m tests.demo [--mountpoint DIR] [--check]

Starts a 3-DataNode cluster, writes sample files with the Java client, mounts the cluster at
DIR (default /tmp/hdfsfuse-demo), prints what to try, and waits. Ctrl-C (or SIGTERM) unmounts
and stops the cluster. `--check` reads every sample through the mount, compares it with what
was written, and exits (a smoke test of the whole stack).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.minidfs import MiniDfs
from tests.mounting import HDFSFUSE, is_mounted


def sample_files(workdir: Path) -> dict[str, bytes]:
    """Sample content by HDFS path."""
    rnd = random.Random(2026)
    files: dict[str, bytes] = {}
    files["/demo/README.txt"] = (
        b"This is HDFS, mounted read-only by hdfsfuse.\n"
        b"Every read you make becomes exact-length DataNode requests.\n"
    )
    files["/demo/data/random-16MiB.bin"] = rnd.randbytes(16 * 1024 * 1024)
    for day in range(1, 4):
        lines = [f"2026-11-{day:02d}T{h:02d}:00:00Z host{rnd.randrange(5)} request ok {rnd.randrange(1000)}ms"
                 for h in range(24) for _ in range(200)]
        files[f"/demo/logs/app-2026-11-{day:02d}.log"] = ("\n".join(lines) + "\n").encode()
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["id", "city", "temperature"])
    for i in range(5000):
        w.writerow([i, rnd.choice(["Oslo", "Lima", "Pune", "Perth"]), round(rnd.uniform(-10, 35), 1)])
    files["/demo/tables/weather.csv"] = buf.getvalue().encode()
    db = workdir / "weather.sqlite"
    con = sqlite3.connect(db)
    con.execute("create table weather(id integer primary key, city text, temperature real)")
    con.executemany("insert into weather values (?, ?, ?)", list(csv.reader(io.StringIO(buf.getvalue())))[1:])
    con.commit()
    con.close()
    files["/demo/tables/weather.sqlite"] = db.read_bytes()
    return files


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mountpoint", default="/tmp/hdfsfuse-demo")
    p.add_argument("--check", action="store_true", help="verify the samples through the mount, then exit")
    args = p.parse_args(argv)
    mnt = os.path.abspath(args.mountpoint)
    os.makedirs(mnt, exist_ok=True)
    if is_mounted(mnt):
        print(f"{mnt} is already mounted; unmount it first (hdfsfuse umount {mnt})", file=sys.stderr)
        return 1

    print("starting a local HDFS (MiniDFSCluster, 3 DataNodes)...", flush=True)
    with MiniDfs() as cluster, tempfile.TemporaryDirectory() as work:
        files = sample_files(Path(work))
        for path, data in files.items():
            cluster.put_bytes(data, path)
        r = subprocess.run([*HDFSFUSE, "mount", cluster.uri, mnt, "-o", f"hadoop_conf={cluster.conf_dir}"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr, end="")
            return 1
        try:
            if args.check:
                for path, data in files.items():
                    got = Path(mnt + path).read_bytes()
                    ok = hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
                    print(f"{'ok' if ok else 'MISMATCH'}  {path}  {len(got)} bytes")
                    if not ok:
                        return 1
                con = sqlite3.connect(f"file:{mnt}/demo/tables/weather.sqlite?mode=ro&immutable=1", uri=True)
                (count,) = con.execute("select count(*) from weather").fetchone()
                con.close()
                print(f"ok  sqlite over the mount: {count} rows")
                return 0 if count == 5000 else 1
            print(f"""
HDFS {cluster.uri} is mounted at {mnt}. Try:

  ls -l {mnt}/demo
  cat {mnt}/demo/README.txt
  tail -c 200 {mnt}/demo/logs/app-2026-11-03.log
  dd if={mnt}/demo/data/random-16MiB.bin bs=4k skip=1000 count=1 status=none | xxd | head -3
  sqlite3 'file:{mnt}/demo/tables/weather.sqlite?immutable=1' 'select city, avg(temperature) from weather group by city'

Press Ctrl-C here to unmount and stop the cluster.""", flush=True)
            signal.signal(signal.SIGTERM, _interrupt)
            try:
                while True:
                    signal.pause()
            except KeyboardInterrupt:
                return 0
        finally:
            subprocess.run([*HDFSFUSE, "umount", "-z", mnt], capture_output=True)
            print(f"\nunmounted {mnt}; stopping the cluster", flush=True)


if __name__ == "__main__":
    sys.exit(main())
