"""Mount errors before anything is mounted: each is one line, and nothing is left mounted."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.minidfs import MiniDfs
from tests.mounting import HDFSFUSE, is_mounted

MiB = 1 << 20


@pytest.mark.parametrize(
    ("source", "mountpoint", "options", "message"),
    [
        ("hdfs://127.0.0.1:1/", "DIR", "", "127.0.0.1:1"),
        ("http://x/", "DIR", "", "scheme"),
        ("hdfs://nn:99999/", "DIR", "", "(?i)port"),
        ("URI", "/nonexistent/mnt", "", "does not exist"),
        ("URI", "FILE", "", "not a directory"),
        ("URI", "DIR", "no_such_option", "unknown mount option"),
        ("URI", "DIR", "readahead_max=lots", "not a size"),
        ("URI", "DIR", "cache_size=1G", "cache_size needs cache_dir"),
        ("URI", "DIR", "short_circuit=on", "short_circuit: 'on' must be auto or off"),
        ("URI", "DIR", "cache_dir=/proc/hdfsfuse-cache", "cache_dir /proc/hdfsfuse-cache is not usable"),
        ("URI/no/such/dir", "DIR", "", "no such directory"),
    ],
)
def test_mount_errors_leave_nothing_mounted(cluster: MiniDfs, source: str, mountpoint: str, options: str,
                                            message: str, tmp_path: Path) -> None:
    import re

    source = source.replace("URI", cluster.uri)
    target = {"DIR": str(tmp_path), "FILE": str(tmp_path / "f")}.get(mountpoint, mountpoint)
    (tmp_path / "f").write_text("x")
    opts = ",".join(o for o in (f"hadoop_conf={cluster.conf_dir}", options) if o)
    r = subprocess.run([*HDFSFUSE, "mount", source, target, "-o", opts], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hdfsfuse: "), r.stderr
    assert re.search(message, lines[0]), lines[0]
    assert not is_mounted(str(tmp_path))


