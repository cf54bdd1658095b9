"""The persistent block cache (-o cache_dir, cache_size) through the real mount on the real
cluster: second reads come from local disk, changed files read their new bytes, damaged cache
files are caught, the size bound holds, and mounts share one directory."""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hdfsfuse.local import uring
from tests.bench.run import daemon_pid
from tests.conftest import mount_stats, random_bytes, wait_until
from tests.minidfs import MiniDfs
from tests.mounting import Mount

MiB = 1 << 20
FRESH = "entry_timeout=0,attr_timeout=0,negative_timeout=0"


def _n(mount: Mount, name: str) -> int:
    return int(mount_stats(mount)[name])  # type: ignore[call-overload]


def _stored(mount: Mount, at_least: int) -> None:
    wait_until(lambda: _n(mount, "block_cache_stored_bytes") >= at_least, "the cache never stored the bytes read")


def _read_all(mount: Mount, path: str, data: bytes, preads: int = 50, seed: int = 0) -> None:
    assert Path(mount.path(path)).read_bytes() == data
    rng = random.Random(seed)
    fd = os.open(mount.path(path), os.O_RDONLY)
    try:
        for _ in range(preads):
            off = rng.randrange(len(data))
            n = rng.choice([1, 4096, 70_000])
            assert os.pread(fd, n, off) == data[off : off + n]
    finally:
        os.close(fd)


def _du(path: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def test_a_second_read_comes_from_the_cache(cluster: MiniDfs, data_dir: str, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = cluster.put_bytes(random_bytes(6 * MiB + 123, seed=180), f"{data_dir}/f")
    m = mount(cluster, "direct_io", f"cache_dir={tmp_path}/cache")
    _read_all(m, f"{data_dir}/f", data)
    _stored(m, len(data))
    before = cluster.metrics_total()
    _read_all(m, f"{data_dir}/f", data, seed=1)  # direct_io: nothing from the kernel's page cache
    after = cluster.metrics_total()
    assert after["BytesRead"] - before["BytesRead"] < 0.01 * len(data)
    stats = mount_stats(m)
    assert stats["block_cache_served_bytes"] >= len(data)  # type: ignore[operator]
    assert stats["cache_hits"]["block_cache"] > 0  # type: ignore[index]
    assert stats["block_cache_corrupt"] == 0
    # The blocks on disk are keyed by block id and generation stamp.
    blocks = cluster.blocks(f"{data_dir}/f")
    names = {p.name for p in (tmp_path / "cache").rglob("*.blk")}
    assert {f"{b['block_id']}_{b['generation_stamp']}.blk" for b in blocks} == names


def test_cold_cached_reads_wait_for_the_disk_with_no_worker_thread(cluster: MiniDfs, data_dir: str, mount,  # type: ignore[no-untyped-def]
                                                                   tmp_path: Path) -> None:
    """Small lookups whose bytes are only on disk are polled for inline (this reader is the
    mount's only one) or read through io_uring, never in a worker thread: byte-exact, with none
    of them going to HDFS."""
    data = cluster.put_bytes(random_bytes(4 * MiB, seed=186), f"{data_dir}/f")
    m = mount(cluster, "direct_io", f"cache_dir={tmp_path}/cache")
    _read_all(m, f"{data_dir}/f", data)
    _stored(m, len(data))
    os.sync()  # the cache's files written back, so dropping the page cache drops their pages
    before, how_before = cluster.metrics_total(), dict(mount_stats(m)["local_disk_reads"])  # type: ignore[call-overload]
    rng = random.Random(5)
    fd = os.open(m.path(f"{data_dir}/f"), os.O_RDONLY)
    try:
        for _ in range(40):
            Path("/proc/sys/vm/drop_caches").write_text("1\n")  # the cache's files back to disk only
            off = rng.randrange(len(data) - 4096)
            assert os.pread(fd, 4096, off) == data[off : off + 4096]
    finally:
        os.close(fd)
    assert cluster.metrics_total()["BytesRead"] - before["BytesRead"] < 0.01 * len(data)
    how = {k: v - how_before.get(k, 0) for k, v in mount_stats(m)["local_disk_reads"].items()}  # type: ignore[union-attr]
    # The first ask starts the disk read; the mount's only reader then polls for its bytes
    # (a disk slower than the poll, or a reader waiting already, waits through io_uring). Not
    # every read meets the disk (one CI run: 9 of 40 did, 7 of them polled), so only "some".
    assert how.get("polled", 0) >= 1, how
    if uring.unavailable() is None:
        assert how.get("thread", 0) == 0, how
    else:  # a kernel without io_uring (or with it disabled): worker threads, as before
        assert how.get("thread", 0) >= 1, how
    assert _n(m, "block_cache_corrupt") == 0


def test_replaced_and_appended_files_read_their_new_bytes(cluster: MiniDfs, data_dir: str, mount,  # type: ignore[no-untyped-def]
                                                          tmp_path: Path) -> None:
    path = f"{data_dir}/f"
    old = cluster.put_bytes(random_bytes(3 * MiB, seed=181), path)
    m = mount(cluster, "direct_io", FRESH, f"cache_dir={tmp_path}/cache")
    _read_all(m, path, old)
    _stored(m, len(old))
    new = cluster.put_bytes(random_bytes(3 * MiB, seed=182), path)  # the same size, other blocks
    _read_all(m, path, new, seed=2)
    extra = cluster.append_bytes(random_bytes(300_000, seed=183), path)  # the last block has a new stamp now
    _read_all(m, path, new + extra, seed=3)
    _read_all(m, path, new + extra, seed=4)  # and again, now that the new bytes are cached


def test_an_open_file_truncated_under_it_reads_as_without_the_cache(cluster: MiniDfs, data_dir: str, mount,  # type: ignore[no-untyped-def]
                                                                    tmp_path: Path) -> None:
    """The cache answers by the generation stamp an open file knows, and a truncate (then an
    append) rewrites a block's tail under a new one. Once the open file's description of the
    block is older than the cache's max age (1 s), the NameNode is asked again, and the file
    reads what it would without a cache: the bytes left, EIO past the cut, then the new bytes."""
    path = f"{data_dir}/cut"
    old = cluster.put_bytes(random_bytes(3 * MiB // 2, seed=190), path)  # a whole block and half of one
    m = mount(cluster, "direct_io", f"cache_dir={tmp_path}/cache")
    cut, past, kept = MiB + 100_000, MiB + 200_000, MiB + 4096
    fd = os.open(m.path(path), os.O_RDONLY)
    try:
        assert os.pread(fd, len(old), 0) == old
        _stored(m, len(old))
        hits = mount_stats(m)["cache_hits"].get("block_cache", 0)  # type: ignore[union-attr]
        assert os.pread(fd, 4096, past) == old[past : past + 4096]
        assert mount_stats(m)["cache_hits"].get("block_cache", 0) > hits  # type: ignore[union-attr]  # answered by the cache
        cluster.truncate(path, cut)  # inside the second block: it recovers under a new stamp
        time.sleep(1.1)  # older than the cache's max age now
        with pytest.raises(OSError) as e:
            os.pread(fd, 4096, past)  # the cache still holds these bytes: they must not come back
        assert e.value.errno == errno.EIO
        assert os.pread(fd, 4096, kept) == old[kept : kept + 4096]
        new = old[:cut] + cluster.append_bytes(random_bytes(400_000, seed=191), path)
        assert os.pread(fd, 4096, past) == new[past : past + 4096]  # the DataNode's bytes, not the cached ones
    finally:
        os.close(fd)
    assert "the block cache no longer answers for this open file" in m.log_text()
    assert Path(m.path(path)).read_bytes() == new  # a file changed a moment ago: the open asks


@pytest.mark.parametrize("damage", ["flip", "truncate", "sums"])
def test_a_damaged_cache_file_is_caught_and_counted(cluster: MiniDfs, data_dir: str, mount, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                    damage: str) -> None:
    data = cluster.put_bytes(random_bytes(2 * MiB, seed=184), f"{data_dir}/f")
    m = mount(cluster, "direct_io", f"cache_dir={tmp_path}/cache")
    _read_all(m, f"{data_dir}/f", data, preads=0)
    _stored(m, len(data))
    for f in (tmp_path / "cache").rglob("*.blk"):
        raw = bytearray(f.read_bytes())
        if damage == "truncate":
            f.write_bytes(raw[: len(raw) // 3])
        elif damage == "sums":
            raw[20 + 4 * 1000 + 1] ^= 0x10  # chunk 1000's checksum (4 bytes per chunk after a 20-byte header)
            f.write_bytes(raw)
        else:
            raw[len(raw) // 2] ^= 0x10
            f.write_bytes(raw)
    before = cluster.metrics_total()
    _read_all(m, f"{data_dir}/f", data, preads=0)
    assert _n(m, "block_cache_corrupt") == 2  # each block: found once, dropped, read from HDFS
    assert cluster.metrics_total()["BytesRead"] - before["BytesRead"] >= len(data)
    assert "failed verification" in m.log_text()


def test_the_cache_stays_within_cache_size(cluster: MiniDfs, data_dir: str, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = cluster.put_bytes(random_bytes(12 * MiB, seed=185), f"{data_dir}/f")
    m = mount(cluster, "direct_io", f"cache_dir={tmp_path}/cache", "cache_size=4M")
    _read_all(m, f"{data_dir}/f", data, preads=0)
    _stored(m, len(data))
    assert _du(tmp_path / "cache") <= 4 * MiB
    stats = mount_stats(m)
    assert stats["block_cache_evictions"] >= 8  # type: ignore[operator]
    assert 0 < stats["block_cache_used_bytes"] <= 4 * MiB  # type: ignore[operator]
    _read_all(m, f"{data_dir}/f", data, preads=20)


def test_two_mounts_share_one_cache_directory(cluster: MiniDfs, data_dir: str, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = cluster.put_bytes(random_bytes(4 * MiB, seed=186), f"{data_dir}/f")
    first = mount(cluster, "direct_io", f"cache_dir={tmp_path}/shared")
    second = mount(cluster, "direct_io", f"cache_dir={tmp_path}/shared")
    _read_all(first, f"{data_dir}/f", data, preads=0)
    _stored(first, len(data))
    before = cluster.metrics_total()
    _read_all(second, f"{data_dir}/f", data)
    assert cluster.metrics_total()["BytesRead"] - before["BytesRead"] < 0.01 * len(data)
    assert _n(second, "block_cache_served_bytes") >= len(data)


def test_a_killed_daemon_leaves_nothing_served_wrong(cluster: MiniDfs, data_dir: str, mount,  # type: ignore[no-untyped-def]
                                                     tmp_path: Path) -> None:
    data = cluster.put_bytes(random_bytes(16 * MiB, seed=187), f"{data_dir}/f")
    m = mount(cluster, "direct_io", f"cache_dir={tmp_path}/cache")
    reader = subprocess.Popen(["cat", m.path(f"{data_dir}/f")], stdout=subprocess.DEVNULL)
    wait_until(lambda: _n(m, "block_cache_stored_bytes") > 0, "nothing was stored")
    os.kill(daemon_pid(m), signal.SIGKILL)  # in the middle of reads and stores
    reader.wait(timeout=60)
    m.unmount()
    again = mount(cluster, "direct_io", f"cache_dir={tmp_path}/cache")
    _read_all(again, f"{data_dir}/f", data)
    _read_all(again, f"{data_dir}/f", data, seed=5)


def test_a_full_disk_shrinks_the_cache_and_reads_go_on(cluster: MiniDfs, data_dir: str, mount,  # type: ignore[no-untyped-def]
                                                       tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(small)], check=True)
    try:
        data = cluster.put_bytes(random_bytes(8 * MiB, seed=188), f"{data_dir}/f")
        m = mount(cluster, "direct_io", f"cache_dir={small}", "cache_size=1G")
        assert "does not fit on the filesystem" in m.log_text()  # sized at start-up
        filler = small / "filler"
        filler.write_bytes(bytes(2 * MiB))  # someone else fills the disk
        _read_all(m, f"{data_dir}/f", data)
        _read_all(m, f"{data_dir}/f", data, seed=6)
        wait_until(lambda: _n(m, "block_cache_errors") > 0, "a full disk was never met")
        assert _du(small) <= 3 * MiB
        m.unmount()
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_blocks_being_written_are_never_cached(cluster: MiniDfs, data_dir: str, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = f"{data_dir}/growing"
    first = random_bytes(MiB + 5000, seed=189)  # one whole block and part of the second
    (tmp_path / "part").write_bytes(first)
    cluster.append_open(path, tmp_path / "part")  # hflushed, left open
    try:
        m = mount(cluster, "direct_io", f"cache_dir={tmp_path}/cache")
        _read_all(m, path, first, preads=10)
        _stored(m, MiB)
        cached = {p.name.split("_")[0] for p in (tmp_path / "cache").rglob("*.blk")}
        blocks = cluster.blocks(path)
        assert cached == {str(blocks[0]["block_id"])}  # the finished block only
    finally:
        cluster.append_close(path)
