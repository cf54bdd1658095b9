"""Deployment and observability: fstab through mount.fuse3, the systemd unit, sd_notify,
identity mapping with allow_other, live stats, the metrics port and HDFS xattrs."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests.minidfs import MiniDfs
from tests.mounting import is_mounted

REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20


def test_fstab_line_mounts_through_mount_fuse3(cluster: MiniDfs, data_dir: str, tmp_path: Path) -> None:
    assert shutil.which("hdfsfuse", path="/usr/local/bin:/usr/bin"), ".ci/install links /usr/local/bin/hdfsfuse"
    cluster.put_bytes(b"from fstab", f"{data_dir}/f")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    fstab = tmp_path / "fstab"
    fstab.write_text(
        f"{cluster.uri}{data_dir} {mnt} fuse.hdfsfuse "
        f"ro,_netdev,nofail,allow_other,noatime,hadoop_conf={cluster.conf_dir},x-systemd.requires=x.target 0 0\n"
    )
    r = subprocess.run(["mount", "-T", str(fstab), str(mnt)], capture_output=True, text=True, timeout=120)
    try:
        assert r.returncode == 0, r.stderr
        assert is_mounted(str(mnt))  # mount(8) returned only once the mount existed
        line = next(ln for ln in Path("/proc/mounts").read_text().splitlines() if f" {mnt} " in ln)
        source, _, fstype, opts = line.split()[:4]
        assert source == f"{cluster.uri}{data_dir}" and fstype == "fuse.hdfsfuse"
        assert "ro" in opts.split(",") and "allow_other" in opts
        assert (mnt / "f").read_bytes() == b"from fstab"
    finally:
        u = subprocess.run(["umount", str(mnt)], capture_output=True, text=True)
    assert u.returncode == 0, u.stderr
    assert not is_mounted(str(mnt))


def test_sd_notify_ready_only_after_the_mount_exists(cluster: MiniDfs, tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    sock_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(120)
    env = dict(os.environ, NOTIFY_SOCKET=sock_path, JOURNAL_STREAM="8:12345")
    log = tmp_path / "log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "hdfsfuse.cli", "mount", cluster.uri, str(mnt), "-f",
                                 "-o", f"hadoop_conf={cluster.conf_dir}"], env=env, stdout=out, stderr=out)
    try:
        message = sock.recv(4096)
        mounted_at_ready = is_mounted(str(mnt))
        assert message == b"READY=1"
        assert mounted_at_ready
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert not is_mounted(str(mnt))
        lines = log.read_text().splitlines()
        assert lines and all(ln.startswith("<") and ln[1] in "234567" and ln[2] == ">" for ln in lines), lines
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True)
        sock.close()


