"""Mounting hdfsfuse for tests: the real CLI, the real kernel, always unmounted afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hdfsfuse.daemon import mount_entry
from tests.minidfs import MiniDfs

HDFSFUSE = [sys.executable, "-m", "hdfsfuse.cli"]


def is_mounted(mountpoint: str) -> bool:
    return mount_entry(os.path.realpath(mountpoint)) is not None


class Mount:
    """One hdfsfuse mount of a cluster (background mode, or a foreground process)."""

    def __init__(self, cluster: MiniDfs, *options: str, root: str = "", foreground: bool = False,
                 command: list[str] | None = None, env: dict[str, str] | None = None,
                 uri: str | None = None) -> None:
        self.cluster = cluster
        # A secure cluster's daemon finds the KDC through the cluster's krb5.conf.
        self.env = {**os.environ, **cluster.krb5_env(), **(env or {})}
        self.dir = tempfile.mkdtemp(prefix="hdfsfuse-mnt-")
        self.log = Path(self.dir + ".log")
        opts = [f"hadoop_conf={cluster.conf_dir}", *options]
        if not foreground:
            opts.append(f"log_file={self.log}")
        self.argv = [*(command or HDFSFUSE), "mount", (uri or cluster.uri) + root, self.dir, "-o", ",".join(opts)]
        self.proc: subprocess.Popen[bytes] | None = None
        if foreground:
            self.argv.append("-f")
            with open(self.log, "wb") as log:
                self.proc = subprocess.Popen(self.argv, stderr=log, stdout=log, env=self.env)
            deadline = time.monotonic() + 60
            while not is_mounted(self.dir):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"foreground mount failed:\n{self.log.read_text()}")
                time.sleep(0.05)
        else:
            r = subprocess.run(self.argv, capture_output=True, text=True, timeout=120, env=self.env)
            if r.returncode != 0:
                raise RuntimeError(f"mount failed ({r.returncode}): {r.stderr}")
            assert is_mounted(self.dir), "the mount command returned before the mount existed"

    def path(self, p: str) -> str:
        return self.dir + p

    def unmount(self) -> None:
        if is_mounted(self.dir):
            if self.proc is not None and self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
            if is_mounted(self.dir):
                subprocess.run(["fusermount3", "-uz", self.dir], capture_output=True)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        deadline = time.monotonic() + 10
        while is_mounted(self.dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            os.rmdir(self.dir)
        except OSError:
            pass

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""
