"""The FUSE mount through the kernel, read with real tools, compared byte for byte."""

from __future__ import annotations

import errno
import os
import pwd
import random
import signal
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import random_bytes
from tests.minidfs import MiniDfs
from tests.mounting import HDFSFUSE, Mount, is_mounted

MiB = 1 << 20


def local_copy(data: bytes) -> str:
    f = tempfile.NamedTemporaryFile(prefix="hdfsfuse-src-", delete=False)
    f.write(data)
    f.close()
    return f.name


@pytest.mark.compat
def test_cat_multi_block_file_matches_source(cluster: MiniDfs, shared_mount: Mount, data_dir: str) -> None:
    data = random_bytes(5 * MiB + 777, seed=40)
    src = local_copy(data)
    cluster.put(src, f"{data_dir}/big")
    out = src + ".out"
    subprocess.run(f"cat {shared_mount.path(f'{data_dir}/big')} > {out}", shell=True, check=True)
    assert subprocess.run(["cmp", src, out]).returncode == 0
    os.unlink(src)
    os.unlink(out)


@pytest.mark.compat
def test_dd_random_4k_blocks(cluster: MiniDfs, shared_mount: Mount, data_dir: str) -> None:
    data = cluster.put_bytes(random_bytes(3 * MiB, seed=41), f"{data_dir}/dd")
    rnd = random.Random(42)
    for n in rnd.sample(range(3 * MiB // 4096), 20):
        out = subprocess.run(
            ["dd", f"if={shared_mount.path(f'{data_dir}/dd')}", "bs=4k", f"skip={n}", "count=1", "status=none"],
            capture_output=True, check=True,
        ).stdout
        assert out == data[n * 4096 : (n + 1) * 4096]


def test_pread_random_unaligned_and_block_straddling(cluster: MiniDfs, shared_mount: Mount, data_dir: str) -> None:
    data = cluster.put_bytes(random_bytes(4 * MiB + 100, seed=43), f"{data_dir}/p")
    rnd = random.Random(44)
    fd = os.open(shared_mount.path(f"{data_dir}/p"), os.O_RDONLY)
    try:
        cases = [(rnd.randrange(len(data)), rnd.randrange(1, 70_000)) for _ in range(200)]
        cases += [(MiB - 5, 10), (2 * MiB - 3000, 6000), (MiB - 1, 2 * MiB + 2), (len(data) - 10, 100),
                  (len(data), 10), (len(data) + 5000, 10)]
        for off, n in cases:
            assert os.pread(fd, n, off) == data[off : off + n], (off, n)
    finally:
        os.close(fd)


def test_tail_c(cluster: MiniDfs, shared_mount: Mount, data_dir: str) -> None:
    data = cluster.put_bytes(random_bytes(2 * MiB + 321, seed=45), f"{data_dir}/t")
    out = subprocess.run(["tail", "-c", "1000", shared_mount.path(f"{data_dir}/t")], capture_output=True, check=True)
    assert out.stdout == data[-1000:]


def test_ls_l_of_a_large_directory_matches_java(cluster: MiniDfs, shared_mount: Mount, data_dir: str) -> None:
    cluster.touch_many(f"{data_dir}/many", 2500)
    java = cluster.ls(f"{data_dir}/many")
    out = subprocess.run(["ls", "-l", "--time-style=+%s", shared_mount.path(f"{data_dir}/many")],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    rows = [line.split() for line in out[1:]]  # skip "total N"
    assert [r[-1] for r in rows] == [j["name"] for j in java]
    for r, j in zip(rows, java, strict=True):
        assert r[0] == "-" + stat.filemode(int(j["mode"], 8))[1:]
        assert int(r[4]) == j["length"]
        assert int(r[5]) == j["mtime"] // 1000
    assert sorted(os.listdir(shared_mount.path(f"{data_dir}/many"))) == [j["name"] for j in java]


@pytest.mark.compat
def test_stat_matches_java(cluster: MiniDfs, shared_mount: Mount, data_dir: str) -> None:
    cluster.put_bytes(random_bytes(12345, seed=46), f"{data_dir}/s")
    cluster.mkdir(f"{data_dir}/sub", mode="750")
    for name, kind in (("s", stat.S_IFREG), ("sub", stat.S_IFDIR)):
        java = cluster.stat(f"{data_dir}/{name}")
        st = os.stat(shared_mount.path(f"{data_dir}/{name}"))
        assert stat.S_IFMT(st.st_mode) == kind
        assert stat.S_IMODE(st.st_mode) == int(java["mode"], 8)
        assert st.st_size == (java["length"] if kind == stat.S_IFREG else 0)
        assert st.st_mtime_ns == java["mtime"] * 1_000_000
        assert st.st_ino == java["file_id"]
        assert st.st_uid == pwd.getpwnam(java["owner"]).pw_uid  # the launcher's user exists locally


def test_errnos(cluster: MiniDfs, shared_mount: Mount, data_dir: str) -> None:
    cluster.put_bytes(b"content", f"{data_dir}/f")
    with pytest.raises(FileNotFoundError):
        os.stat(shared_mount.path(f"{data_dir}/missing"))
    with pytest.raises(FileNotFoundError):  # the negative cache answers the same
        open(shared_mount.path(f"{data_dir}/missing"))
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_RDONLY | os.O_TRUNC, os.O_WRONLY | os.O_CREAT):
        with pytest.raises(OSError) as e:
            os.open(shared_mount.path(f"{data_dir}/f"), flags)
        assert e.value.errno == errno.EROFS
    with pytest.raises(OSError) as e:
        os.mkdir(shared_mount.path(f"{data_dir}/newdir"))
    assert e.value.errno == errno.EROFS
    fd = os.open(shared_mount.path(data_dir), os.O_RDONLY)
    try:
        with pytest.raises(IsADirectoryError):
            os.read(fd, 10)
    finally:
        os.close(fd)
    with pytest.raises(NotADirectoryError):
        os.listdir(shared_mount.path(f"{data_dir}/f"))


def test_eacces_from_hdfs_permissions(perm_cluster: MiniDfs, mount) -> None:  # type: ignore[no-untyped-def]
    perm_cluster.put_bytes(b"mine", "/mnt-secret")
    perm_cluster.chown("/mnt-secret", "bob", "bobs")
    perm_cluster.chmod("/mnt-secret", "600")
    perm_cluster.put_bytes(b"open to all", "/mnt-public")
    m = mount(perm_cluster, "user=alice")
    assert open(m.path("/mnt-public"), "rb").read() == b"open to all"
    with pytest.raises(PermissionError):
        open(m.path("/mnt-secret"), "rb").read()


def test_concurrent_readers(cluster: MiniDfs, shared_mount: Mount, data_dir: str) -> None:
    files = {f"{data_dir}/c{i}": cluster.put_bytes(random_bytes(MiB + i * 1000, seed=50 + i), f"{data_dir}/c{i}")
             for i in range(4)}
    errors: list[str] = []

    def reader(path: str, seed: int) -> None:
        data = files[path]
        rnd = random.Random(seed)
        with open(shared_mount.path(path), "rb", buffering=0) as f:
            for _ in range(60):
                off, n = rnd.randrange(len(data)), rnd.randrange(1, 50_000)
                if os.pread(f.fileno(), n, off) != data[off : off + n]:
                    errors.append(f"{path} {off} {n}")

    paths = list(files)
    threads = [threading.Thread(target=reader, args=(paths[i % 4] if i < 4 else paths[0], i)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.compat
def test_random_4k_reads_stay_exact_on_the_wire(cluster: MiniDfs, mount, data_dir: str) -> None:  # type: ignore[no-untyped-def]
    data = cluster.put_bytes(random_bytes(32 * MiB, seed=60), f"{data_dir}/rand")
    m = mount(cluster)
    rnd = random.Random(61)
    offsets = [4096 * n for n in rnd.sample(range(32 * MiB // 4096), 100)]
    fd = os.open(m.path(f"{data_dir}/rand"), os.O_RDONLY)
    try:
        os.fstat(fd)
        before = cluster.metrics_total()
        with cluster.wire() as wire:
            for off in offsets:
                assert os.pread(fd, 4096, off) == data[off : off + 4096]
            after = cluster.metrics_after(before, 100)
    finally:
        os.close(fd)
    app = 100 * 4096
    assert after["ReadBlockOpNumOps"] - before["ReadBlockOpNumOps"] == 100
    assert after["BytesRead"] - before["BytesRead"] <= 1.02 * app
    assert wire.bytes <= 1.15 * app, wire.bytes / app


def test_sequential_cat_is_not_amplified(cluster: MiniDfs, mount, data_dir: str) -> None:  # type: ignore[no-untyped-def]
    size = 64 * MiB
    data = random_bytes(size, seed=62)
    src = local_copy(data)
    cluster.put(src, f"{data_dir}/seq", block_size=16 * MiB)
    m = mount(cluster)
    with cluster.wire() as wire:
        out = subprocess.run(["cat", m.path(f"{data_dir}/seq")], capture_output=True, check=True).stdout
        time.sleep(0.5)  # let any in-flight prefetch land on the counter too
    os.unlink(src)
    assert out == data
    assert wire.bytes <= 1.03 * size, wire.bytes / size


def test_direct_io_passes_reads_through(cluster: MiniDfs, mount, data_dir: str) -> None:  # type: ignore[no-untyped-def]
    data = cluster.put_bytes(random_bytes(2 * MiB, seed=63), f"{data_dir}/dio")
    m = mount(cluster, "direct_io")
    fd = os.open(m.path(f"{data_dir}/dio"), os.O_RDONLY)
    try:
        before = cluster.metrics_total()
        assert os.pread(fd, 1000, 12345) == data[12345:13345]
        after = cluster.metrics_after(before, 1)
        assert after["BytesRead"] - before["BytesRead"] <= 1000 + 2 * 511 + 12  # not a whole page
        assert open(m.path(f"{data_dir}/dio"), "rb").read() == data
    finally:
        os.close(fd)


def test_page_cache_kept_while_unchanged_and_dropped_on_change(cluster: MiniDfs, mount, data_dir: str) -> None:  # type: ignore[no-untyped-def]
    first = cluster.put_bytes(random_bytes(100_000, seed=64), f"{data_dir}/pc")
    # Long kernel caches: only our open() can tell the kernel to drop the file's pages.
    m = mount(cluster, "attr_timeout=60,entry_timeout=60")
    ino = os.stat(m.path(f"{data_dir}/pc")).st_ino
    assert open(m.path(f"{data_dir}/pc"), "rb").read() == first
    before = cluster.metrics_total()["ReadBlockOpNumOps"]
    assert open(m.path(f"{data_dir}/pc"), "rb").read() == first
    assert cluster.metrics_total()["ReadBlockOpNumOps"] == before  # served by the page cache
    # Rewritten in place to the same size: the same inode and size, so only the keep_cache
    # rule (mtime changed) keeps the old pages from being served.
    cluster.truncate(f"{data_dir}/pc", 0)
    new = cluster.append_bytes(random_bytes(100_000, seed=65), f"{data_dir}/pc")
    assert open(m.path(f"{data_dir}/pc"), "rb").read() == new
    assert os.stat(m.path(f"{data_dir}/pc")).st_ino == ino


@pytest.mark.compat
def test_file_being_written_can_be_tailed(cluster: MiniDfs, shared_mount: Mount, data_dir: str) -> None:
    path = f"{data_dir}/uc"
    part1, part2 = random_bytes(300_000, seed=66), random_bytes(100_000, seed=67)
    src1, src2 = local_copy(part1), local_copy(part2)
    cluster.append_open(path, src1)
    try:
        out = subprocess.run(["tail", "-c", "500", shared_mount.path(path)], capture_output=True, check=True).stdout
        assert out == part1[-500:]
        # More data in the same block: the NameNode's length does not move, the visible length does.
        cluster.append_open(path, src2)
        out = subprocess.run(["tail", "-c", "500", shared_mount.path(path)], capture_output=True, check=True).stdout
        assert out == part2[-500:]
        assert open(shared_mount.path(path), "rb").read() == part1 + part2
    finally:
        cluster.append_close(path)
        os.unlink(src1)
        os.unlink(src2)


def test_symlink_points_into_the_mount(cluster: MiniDfs, shared_mount: Mount, data_dir: str) -> None:
    cluster.put_bytes(b"linked content", f"{data_dir}/target")
    cluster.symlink(f"{data_dir}/target", f"{data_dir}/link")
    link = shared_mount.path(f"{data_dir}/link")
    assert os.readlink(link) == shared_mount.path(f"{data_dir}/target")
    assert open(link, "rb").read() == b"linked content"


def test_statfs(shared_mount: Mount) -> None:
    st = os.statvfs(shared_mount.dir)
    assert st.f_blocks > 0 and st.f_bavail > 0 and st.f_namemax == 255


def test_mount_root_can_be_a_subdirectory(cluster: MiniDfs, mount, data_dir: str) -> None:  # type: ignore[no-untyped-def]
    cluster.put_bytes(b"inside", f"{data_dir}/sub/file")
    m = mount(cluster, root=f"{data_dir}/sub")
    assert os.listdir(m.dir) == ["file"]
    assert open(m.path("/file"), "rb").read() == b"inside"
    assert os.stat(m.dir).st_ino == 1


def test_sigterm_unmounts_cleanly(cluster: MiniDfs, mount) -> None:  # type: ignore[no-untyped-def]
    m = mount(cluster, foreground=True)
    assert sorted(os.listdir(m.dir)) == sorted(e["name"] for e in cluster.ls("/"))
    m.proc.send_signal(signal.SIGTERM)
    assert m.proc.wait(timeout=30) == 0
    assert not is_mounted(m.dir)
    assert "unmounted" in m.log_text()


def test_umount_with_an_open_file(cluster: MiniDfs, mount, data_dir: str) -> None:  # type: ignore[no-untyped-def]
    """Documented: a plain umount refuses while files are open; -z detaches and open files keep reading."""
    data = cluster.put_bytes(random_bytes(100_000, seed=67), f"{data_dir}/held")
    m = mount(cluster, foreground=True)
    fd = os.open(m.path(f"{data_dir}/held"), os.O_RDONLY)
    try:
        busy = subprocess.run([*HDFSFUSE, "umount", m.dir], capture_output=True, text=True)
        assert busy.returncode == 1 and "busy" in busy.stderr.lower()
        assert is_mounted(m.dir)
        lazy = subprocess.run([*HDFSFUSE, "umount", "-z", m.dir], capture_output=True, text=True)
        assert lazy.returncode == 0, lazy.stderr
        assert not is_mounted(m.dir)
        assert os.pread(fd, 1000, 50_000) == data[50_000:51_000]
    finally:
        os.close(fd)
    assert m.proc.wait(timeout=30) == 0


def test_already_mounted_mountpoint_is_refused(cluster: MiniDfs, shared_mount: Mount) -> None:
    r = subprocess.run([*HDFSFUSE, "mount", cluster.uri, shared_mount.dir], capture_output=True, text=True)
    assert r.returncode != 0 and "already mounted" in r.stderr
    assert sorted(os.listdir(shared_mount.dir)) == sorted(e["name"] for e in cluster.ls("/"))  # still works


@pytest.mark.skipif(os.geteuid() != 0, reason="setting a mount's readahead needs root")
def test_sequential_reads_reach_the_daemon_in_1_mib_requests(cluster: MiniDfs, data_dir: str, mount) -> None:  # type: ignore[no-untyped-def]
    """The kernel lowers a FUSE mount's readahead to FUSE_INIT's 128 KiB when INIT is answered;
    the daemon sets read_ahead_kb=1024 after that, so page-cache reads come 1 MiB at a time."""
    import json

    from hdfsfuse.daemon import mount_entry
    from tests.conftest import wait_until

    data = cluster.put_bytes(random_bytes(8 << 20, seed=1900), f"{data_dir}/seq")
    m = mount(cluster)
    entry = mount_entry(os.path.realpath(m.dir))
    assert entry is not None
    knob = Path(f"/sys/class/bdi/{entry[0]}/read_ahead_kb")
    wait_until(lambda: knob.read_text().strip() == "1024", "the mount's readahead was never raised")
    before = json.loads(os.getxattr(m.dir, "user.hdfsfuse.stats"))["fuse_reads"]
    out = subprocess.run(["dd", f"if={m.path(f'{data_dir}/seq')}", "bs=1M", "status=none"], capture_output=True,
                         check=True).stdout
    assert out == data
    requests = json.loads(os.getxattr(m.dir, "user.hdfsfuse.stats"))["fuse_reads"] - before
    assert requests <= 8 + 4  # 128 KiB requests would be 64
