"""Never a wrong byte: open files pinned to their identity while users replace, rename, truncate,
snapshot and append, through the library and through the kernel mount of a real cluster."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Callable

import pytest

from tests.conftest import corrupt_every_replica, random_bytes, wait_until
from tests.minidfs import MiniDfs
from tests.mounting import Mount

KiB = 1024
MiB = 1 << 20


# ----- 1. an open file is pinned to its fileId and block ids ------------------------------------


@pytest.mark.parametrize("how", ["overwrite", "rename over"])
def test_replaced_file_is_eio_never_the_new_files_bytes(
    cluster: MiniDfs, mount: Callable[..., Mount], data_dir: str, how: str,
) -> None:
    path = f"{data_dir}/table"
    old = cluster.put_bytes(random_bytes(2 * MiB, seed=101), path)
    m = mount(cluster, "direct_io")
    fd = os.open(m.path(path), os.O_RDONLY)
    try:
        assert os.pread(fd, 4096, 0) == old[:4096]
        corrupt_every_replica(cluster, path, 1)  # the old second block can no longer be read
        new = random_bytes(2 * MiB, seed=102)
        if how == "overwrite":
            cluster.put_bytes(new, path)  # delete and create: a new fileId at the same path
        else:
            cluster.put_bytes(new, f"{data_dir}/staging")
            cluster.rename(f"{data_dir}/staging", path)
        with pytest.raises(OSError) as e:
            os.pread(fd, 4096, MiB + 8192)
        assert e.value.errno == errno.EIO
        assert os.pread(fd, 4096, 8192) == old[8192 : 8192 + 4096]  # still readable blocks still read
    finally:
        os.close(fd)
    with open(m.path(path), "rb") as f:  # a new open sees the new file
        assert f.read() == new
    lines = [ln for ln in m.log_text().splitlines() if "was deleted or replaced since it was opened" in ln]
    assert len(lines) == 1, m.log_text()


def test_renamed_open_file_keeps_reading_by_inode(
    cluster: MiniDfs, mount: Callable[..., Mount], data_dir: str,
) -> None:
    """A plain rename of an open file: reads that need new locations still find it."""
    path = f"{data_dir}/log"
    data = random_bytes(64 * KiB, seed=103)
    cluster.put_bytes(data, path, block_size=1024)  # 64 blocks; locations come 10 blocks at a time
    m = mount(cluster, "direct_io")
    fd = os.open(m.path(path), os.O_RDONLY)
    try:
        assert os.pread(fd, 100, 0) == data[:100]
        cluster.rename(path, f"{data_dir}/log.1")
        cluster.put_bytes(random_bytes(64 * KiB, seed=104), path, block_size=1024)  # a new file there
        for off in (50 * KiB, 30 * KiB + 10, 64 * KiB - 300):
            assert os.pread(fd, 1000, off) == data[off : off + 1000]
    finally:
        os.close(fd)


# ----- 2. files being written: tail -f sees every appended byte ---------------------------------


@pytest.mark.parametrize("mode", ["page cache", "direct_io"])
def test_tail_f_follows_a_file_being_written(
    cluster: MiniDfs, mount: Callable[..., Mount], data_dir: str, mode: str, tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    path = f"{data_dir}/growing"
    parts = [random_bytes(n, seed=110 + i) for i, n in enumerate((70_000, 1, 5000, 300_000, 12_345))]
    m = mount(cluster, *(["direct_io"] if mode == "direct_io" else []))
    out = tmp_path / "tail.out"
    src = tmp_path / "part"
    src.write_bytes(parts[0])
    cluster.append_open(path, src)
    tail = None
    try:
        with open(out, "wb") as sink:
            tail = subprocess.Popen(["tail", "-c", "+1", "-f", "-s", "0.2", m.path(path)], stdout=sink)
        expected = parts[0]
        wait_until(lambda: out.read_bytes() == expected, "tail printed the first part")
        for part in parts[1:]:
            src.write_bytes(part)
            cluster.append_open(path, src)  # write and hflush: the NameNode's length does not move
            expected += part
            want = len(expected)
            wait_until(lambda: len(out.read_bytes()) >= want, f"tail printed {want} bytes")  # noqa: B023
            assert out.read_bytes() == expected
    finally:
        if tail is not None:
            tail.kill()
            tail.wait()
        cluster.append_close(path)
    wait_until(lambda: os.stat(m.path(path)).st_size == len(expected), "the closed file's size is shown")


def test_a_polling_reader_sees_growth_with_one_open_fd(
    cluster: MiniDfs, mount: Callable[..., Mount], data_dir: str, tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    path = f"{data_dir}/polled"
    m = mount(cluster)
    src = tmp_path / "part"
    src.write_bytes(b"first line\n")
    cluster.append_open(path, src)
    try:
        with open(m.path(path), "rb", buffering=0) as f:
            got = f.read()
            assert got == b"first line\n"
            expected = got
            for i in range(3):
                line = f"line {i} ".encode() * 50 + b"\n"
                src.write_bytes(line)
                cluster.append_open(path, src)
                expected += line

                def caught_up(want: int = len(expected)) -> bool:
                    nonlocal got
                    got += f.read() or b""
                    return len(got) >= want

                wait_until(caught_up, f"reader got {len(expected)} bytes")
                assert got == expected
    finally:
        cluster.append_close(path)


def test_block_tokens_give_the_visible_length_through_sasl(
    fresh_cluster: Callable[..., MiniDfs], mount: Callable[..., Mount], tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    """With block tokens, the visible length comes from the DataNode IPC, authenticated by the token."""
    c = fresh_cluster(datanodes=1, block_tokens=True)
    src = tmp_path / "part"
    first, second = random_bytes(5000, seed=120), random_bytes(3000, seed=121)
    src.write_bytes(first)
    c.append_open("/w", src)
    try:
        m = mount(c, "direct_io")
        with open(m.path("/w"), "rb", buffering=0) as f:
            assert f.read() == first
            src.write_bytes(second)
            c.append_open("/w", src)
            got = b""

            def caught_up() -> bool:
                nonlocal got
                got += f.read() or b""
                return len(got) >= len(second)

            wait_until(caught_up, "the reader saw the second hflush")
            assert got == second
    finally:
        c.append_close("/w")


# ----- 4. snapshots and renames ------------------------------------------------------------------


def test_snapshots_and_the_live_file_each_read_their_own_bytes(
    cluster: MiniDfs, mount: Callable[..., Mount], data_dir: str,
) -> None:
    d = f"{data_dir}/snapdir"
    v1 = cluster.put_bytes(random_bytes(300_000, seed=130), f"{d}/file")
    cluster.allow_snapshot(d)
    cluster.create_snapshot(d, "s1")
    m = mount(cluster, "attr_timeout=0.2,entry_timeout=0.2")  # page cache on
    live, snap1 = m.path(f"{d}/file"), m.path(f"{d}/.snapshot/s1/file")
    assert sorted(os.listdir(m.path(f"{d}/.snapshot"))) == ["s1"]
    assert open(live, "rb").read() == v1 and open(snap1, "rb").read() == v1
    assert os.stat(live).st_ino != os.stat(snap1).st_ino  # separate inodes, separate page caches

    extra = cluster.append_bytes(random_bytes(70_000, seed=131), f"{d}/file")
    cluster.create_snapshot(d, "s2")
    time.sleep(0.3)
    assert open(live, "rb").read() == v1 + extra
    assert open(snap1, "rb").read() == v1
    assert open(m.path(f"{d}/.snapshot/s2/file"), "rb").read() == v1 + extra

    v3 = cluster.put_bytes(random_bytes(123_456, seed=132), f"{d}/file")  # replaced outright
    time.sleep(0.3)
    assert open(live, "rb").read() == v3
    assert open(snap1, "rb").read() == v1
    assert open(m.path(f"{d}/.snapshot/s2/file"), "rb").read() == v1 + extra
    assert sorted(os.listdir(m.path(f"{d}/.snapshot"))) == ["s1", "s2"]
    assert os.stat(snap1).st_size == len(v1)


def test_rename_does_not_stale_the_inode(cluster: MiniDfs, mount: Callable[..., Mount], data_dir: str) -> None:
    old = cluster.put_bytes(random_bytes(10_000, seed=140), f"{data_dir}/a/x")
    m = mount(cluster, "attr_timeout=0.1,entry_timeout=0.1")
    ino = os.stat(m.path(f"{data_dir}/a/x")).st_ino
    fd = os.open(m.path(f"{data_dir}/a/x"), os.O_RDONLY)
    try:
        cluster.rename(f"{data_dir}/a", f"{data_dir}/b")
        new = cluster.put_bytes(random_bytes(777, seed=141), f"{data_dir}/a/x")
        time.sleep(0.3)
        assert os.fstat(fd).st_size == len(old)  # the open inode still describes its own file
        assert os.pread(fd, 10_000, 0) == old
    finally:
        os.close(fd)
    moved = os.stat(m.path(f"{data_dir}/b/x"))
    assert moved.st_ino == ino and moved.st_size == len(old)
    assert open(m.path(f"{data_dir}/b/x"), "rb").read() == old
    assert open(m.path(f"{data_dir}/a/x"), "rb").read() == new
    assert os.stat(m.path(f"{data_dir}/a/x")).st_ino != ino


# ----- library reads of files being written, and the location windows --------------------------


# ----- 3. no exception kills the mount ----------------------------------------------------------


def test_unexpected_exceptions_fail_only_their_reads(
    cluster: MiniDfs, mount: Callable[..., Mount], data_dir: str,
) -> None:
    import sys

    ok = cluster.put_bytes(random_bytes(300_000, seed=160), f"{data_dir}/fine")
    cluster.put_bytes(random_bytes(1000, seed=161), f"{data_dir}/boom-read")
    streamed = cluster.put_bytes(random_bytes(12 * MiB, seed=162), f"{data_dir}/boom-prefetch")
    m = mount(cluster, "direct_io", command=[sys.executable, "-m", "tests.faulty_mount"])
    with pytest.raises(OSError) as e:
        open(m.path(f"{data_dir}/boom-read"), "rb").read()
    assert e.value.errno == errno.EIO
    # Sequential reading starts readahead after 4 MiB; every prefetch fails, the reads go direct.
    assert open(m.path(f"{data_dir}/boom-prefetch"), "rb").read() == streamed
    assert open(m.path(f"{data_dir}/fine"), "rb").read() == ok  # the mount still serves
    log = m.log_text()
    assert "read " in log and "unexpected error" in log and "injected fault in a read" in log
    assert "readahead of" in log and "RuntimeError: injected fault in a prefetch" in log
    assert len([ln for ln in log.splitlines() if "injected fault in a read" in ln]) == 1


# ----- 7. scale: streamed listings, bounded caches ------------------------------------------------


def test_listing_streams_page_by_page(cluster: MiniDfs, mount: Callable[..., Mount], data_dir: str) -> None:
    cluster.touch_many(f"{data_dir}/many", 3500)
    m = mount(cluster)
    os.stat(m.path(f"{data_dir}/many"))
    before = cluster.nn_metrics()["GetListingOps"]
    with os.scandir(m.path(f"{data_dir}/many")) as it:
        first = next(it)
        after_first = cluster.nn_metrics()["GetListingOps"]
        rest = [e.name for e in it]
    after_all = cluster.nn_metrics()["GetListingOps"]
    assert after_first - before == 1  # the first entry after one page, not the whole directory
    assert after_all - before == 4  # 3500 entries: four pages of at most 1000
    assert [first.name, *rest] == [f"f-{i:05d}" for i in range(3500)]


def test_listing_page_cap_truncates_with_a_warning(
    cluster: MiniDfs, mount: Callable[..., Mount], data_dir: str,
) -> None:
    cluster.touch_many(f"{data_dir}/capped", 2500)
    m = mount(cluster, "listing_page_cap=2")
    assert sorted(os.listdir(m.path(f"{data_dir}/capped"))) == [f"f-{i:05d}" for i in range(2000)]
    assert "listing truncated at listing_page_cap=2 pages (2000 entries shown, 500 more not listed)" in m.log_text()


def test_a_reset_metrics_scrape_does_not_stop_the_mount(
    cluster: MiniDfs, mount: Callable[..., Mount], data_dir: str,
) -> None:
    import socket
    import struct
    import urllib.request

    data = cluster.put_bytes(random_bytes(5000, seed=163), f"{data_dir}/still-served")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = mount(cluster, f"metrics_port={port}")
    for _ in range(3):  # a scraper that sends half a request and resets the connection
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"GET /metr")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert "hdfsfuse_app_bytes_read" in body
    assert open(m.path(f"{data_dir}/still-served"), "rb").read() == data


