"""Deployment and observability: fstab through mount.fuse3, the systemd unit, sd_notify,
identity mapping with allow_other, live stats, the metrics port and HDFS xattrs."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import local_user, random_bytes
from tests.minidfs import MiniDfs
from tests.mounting import is_mounted

REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20


def _read_as(user: str, path: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["runuser", "-u", user, "--", "cat", path], capture_output=True)


def test_identity_mapping_and_permissions_with_allow_other(cluster: MiniDfs, mount, data_dir: str) -> None:  # type: ignore[no-untyped-def]
    alice, bob = local_user("hdfsfuse-alice"), local_user("hdfsfuse-bob")
    d = f"{data_dir}/perm"
    cluster.mkdir(d, mode="755")
    cluster.put_bytes(b"alice only", f"{d}/alice-private")
    cluster.chown(f"{d}/alice-private", "hdfsfuse-alice", "hdfsfuse-alice")
    cluster.chmod(f"{d}/alice-private", "600")
    cluster.put_bytes(b"for everyone", f"{d}/public")
    cluster.chmod(f"{d}/public", "644")
    cluster.put_bytes(b"stranger", f"{d}/unmapped")
    cluster.chown(f"{d}/unmapped", "no-such-local-user", "no-such-local-group")
    cluster.chmod(f"{d}/unmapped", "640")
    m = mount(cluster, "allow_other", f"uid={bob.pw_uid}", f"gid={bob.pw_gid}")
    st = os.stat(m.path(f"{d}/alice-private"))
    assert (st.st_uid, st.st_gid) == (alice.pw_uid, alice.pw_gid)  # mapped by name
    st = os.stat(m.path(f"{d}/unmapped"))
    assert (st.st_uid, st.st_gid) == (bob.pw_uid, bob.pw_gid)  # no local account: the uid=/gid= fallback
    assert _read_as("hdfsfuse-alice", m.path(f"{d}/alice-private")).stdout == b"alice only"
    denied = _read_as("hdfsfuse-bob", m.path(f"{d}/alice-private"))
    assert denied.returncode != 0 and b"Permission denied" in denied.stderr
    assert _read_as("hdfsfuse-bob", m.path(f"{d}/public")).stdout == b"for everyone"
    assert _read_as("hdfsfuse-bob", m.path(f"{d}/unmapped")).stdout == b"stranger"  # owner via fallback
    denied = _read_as("hdfsfuse-alice", m.path(f"{d}/unmapped"))
    assert denied.returncode != 0 and b"Permission denied" in denied.stderr


def test_without_allow_other_only_the_mounting_user_sees_the_mount(cluster: MiniDfs, shared_mount) -> None:  # type: ignore[no-untyped-def]
    local_user("hdfsfuse-bob")
    r = subprocess.run(["runuser", "-u", "hdfsfuse-bob", "--", "ls", shared_mount.dir], capture_output=True)
    assert r.returncode != 0 and b"Permission denied" in r.stderr


def test_stats_and_datanode_byte_counter_agree_with_datanodes(cluster: MiniDfs, mount, data_dir: str) -> None:  # type: ignore[no-untyped-def]
    data = cluster.put_bytes(random_bytes(3 * MiB, seed=90), f"{data_dir}/s")
    m = mount(cluster, "direct_io")
    offsets = list(range(0, 3 * MiB - 5000, 300_001))
    before = cluster.metrics_total()
    fd = os.open(m.path(f"{data_dir}/s"), os.O_RDONLY)
    try:
        for off in offsets:
            assert os.pread(fd, 5000, off) == data[off : off + 5000]
    finally:
        os.close(fd)
    after = cluster.metrics_after(before, len(offsets))
    out = subprocess.run([sys.executable, "-m", "hdfsfuse.cli", "stats", "--json", m.dir],
                         capture_output=True, text=True, check=True).stdout
    stats = json.loads(out)
    n = len(offsets)
    assert (stats["app_bytes_read"], stats["fuse_reads"], stats["dtp_read_ops"]) == (5000 * n, n, n)
    # Both sides widen each read to whole 512-byte chunks; BytesRead also counts 4 checksum bytes per chunk.
    aligned = [-(-(off + 5000) // 512) * 512 - (off - off % 512) for off in offsets]
    assert stats["datanode_payload_bytes"] == sum(aligned)
    assert after["BytesRead"] - before["BytesRead"] == sum(a + a // 512 * 4 for a in aligned)
    assert stats["amplification"] == round(sum(aligned) / (5000 * n), 4)
    assert stats["namenode_rpcs"]["getBlockLocations"] >= 1 and stats["uptime_seconds"] > 0
    human = subprocess.run([sys.executable, "-m", "hdfsfuse.cli", "stats", m.dir], capture_output=True, text=True)
    assert "amplification" in human.stdout and "namenode_rpcs:" in human.stdout
    bad = subprocess.run([sys.executable, "-m", "hdfsfuse.cli", "stats", str(REPO)], capture_output=True, text=True)
    assert bad.returncode == 1 and "hdfsfuse mount" in bad.stderr


def test_metrics_port_serves_prometheus_text(cluster: MiniDfs, mount, data_dir: str) -> None:  # type: ignore[no-untyped-def]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cluster.put_bytes(b"metered", f"{data_dir}/m")
    m = mount(cluster, f"metrics_port={port}")
    assert open(m.path(f"{data_dir}/m"), "rb").read() == b"metered"
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert "# TYPE hdfsfuse_app_bytes_read counter" in body
    assert "hdfsfuse_app_bytes_read 7" in body
    assert 'hdfsfuse_namenode_rpcs{method="getBlockLocations"}' in body


def test_hdfs_xattrs(cluster: MiniDfs, shared_mount, data_dir: str) -> None:  # type: ignore[no-untyped-def]
    cluster.put_bytes(random_bytes(2 * MiB + 5, seed=91), f"{data_dir}/x", replication=2)
    path = shared_mount.path(f"{data_dir}/x")
    out = subprocess.run(["getfattr", "-d", "--absolute-names", path], capture_output=True, text=True, check=True)
    assert 'user.hdfs.replication="2"' in out.stdout
    assert f'user.hdfs.block_size="{MiB}"' in out.stdout
    assert set(os.listxattr(path)) == {"user.hdfs.replication", "user.hdfs.block_size", "user.hdfs.blocks",
                                       "user.hdfs.checksum", "user.hdfs.storage_policy"}
    blocks = json.loads(os.getxattr(path, "user.hdfs.blocks"))
    java = cluster.blocks(f"{data_dir}/x")
    assert [(b["offset"], b["length"]) for b in blocks] == [(j["offset"], j["length"]) for j in java]
    assert all(len(b["hosts"]) == 2 for b in blocks)
    with pytest.raises(OSError):
        os.getxattr(path, "user.hdfs.nonexistent")
    assert os.listxattr(shared_mount.path(data_dir)) == ["user.hdfs.content_summary", "user.hdfs.storage_policy"]


def test_stats_xattr_is_only_on_the_root(cluster: MiniDfs, shared_mount, data_dir: str) -> None:  # type: ignore[no-untyped-def]
    assert "user.hdfsfuse.stats" in os.listxattr(shared_mount.dir)
    snap = json.loads(os.getxattr(shared_mount.dir, "user.hdfsfuse.stats"))
    assert {"app_bytes_read", "amplification", "datanode_connects", "cache_hits", "uptime_seconds"} <= set(snap)
    cluster.put_bytes(b"not the root", f"{data_dir}/f")
    for non_root in (shared_mount.path(data_dir), shared_mount.path(f"{data_dir}/f")):
        assert "user.hdfsfuse.stats" not in os.listxattr(non_root)
        with pytest.raises(OSError) as e:
            os.getxattr(non_root, "user.hdfsfuse.stats")
        assert e.value.errno == errno.ENODATA


def test_blocks_xattr_of_many_blocks_comes_in_windows_and_is_capped(cluster: MiniDfs, shared_mount,  # type: ignore[no-untyped-def]
                                                                      data_dir: str) -> None:
    cluster.put_bytes(random_bytes(600 * 1024, seed=92), f"{data_dir}/many", block_size=1024, replication=1)
    blocks = json.loads(os.getxattr(shared_mount.path(f"{data_dir}/many"), "user.hdfs.blocks"))
    java = cluster.blocks(f"{data_dir}/many")
    assert [(b["offset"], b["length"]) for b in blocks] == [(j["offset"], j["length"]) for j in java]
    assert len(blocks) == 600
    cluster.put_bytes(random_bytes(1500 * 1024, seed=93), f"{data_dir}/too-many", block_size=1024, replication=1)
    with pytest.raises(OSError) as e:  # over the kernel's 64 KiB cap for one xattr value
        os.getxattr(shared_mount.path(f"{data_dir}/too-many"), "user.hdfs.blocks")
    assert e.value.errno == errno.E2BIG


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
