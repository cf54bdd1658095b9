"""Never a wrong byte: open files pinned to their identity while users replace, rename, truncate,
snapshot and append, through the library and through the kernel mount of a real cluster."""

from __future__ import annotations

import errno
import os
import random
import subprocess
import time
from collections.abc import Callable

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from hdfsfuse import errors
from hdfsfuse.client import ClientOptions, HdfsClient
from tests.conftest import random_bytes, wait_fully_replicated, wait_until
from tests.minidfs import MiniDfs
from tests.mounting import Mount

KiB = 1024
MiB = 1 << 20


def corrupt_every_replica(cluster: MiniDfs, path: str, block_index: int) -> None:
    """Make one block of `path` unreadable everywhere (all replicas fail their checksums)."""
    wait_fully_replicated(cluster, path)
    block = cluster.blocks(path)[block_index]
    for xfer in block["xfer"]:
        cluster.corrupt_replica(path, block_index, xfer, offset=0, length=block["length"])


def library(cluster: MiniDfs) -> HdfsClient:
    return HdfsClient.connect(cluster.uri, conf_dir=cluster.conf_dir,  # type: ignore[return-value]
                              options=ClientOptions(hedge_after=None))


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


async def test_library_file_is_pinned_to_its_identity(cluster: MiniDfs, data_dir: str) -> None:
    path = f"{data_dir}/lib"
    old = cluster.put_bytes(random_bytes(3 * MiB, seed=105), path)
    async with library(cluster) as client:
        f = await client.open(path)
        assert f.locate_path == f"/.reserved/.inodes/{f.file_id}"
        assert bytes(await client.read_range(f, 0, 1000)) == old[:1000]
        corrupt_every_replica(cluster, path, 2)
        cluster.put_bytes(random_bytes(3 * MiB, seed=106), path)
        with pytest.raises(errors.FileChanged, match="deleted or replaced"):
            await client.read_range(f, 2 * MiB + 5, 1000)
        assert errors.to_errno(errors.FileChanged("x")) == errno.EIO
        assert client.stats.files_changed == 1
        assert bytes(await client.read_range(f, MiB, 1000)) == old[MiB : MiB + 1000]


async def test_truncated_file_is_refused_not_short(fresh_cluster: Callable[..., MiniDfs]) -> None:
    """A read past the new end of a truncated file fails loudly: the pinned block shrank."""
    c = fresh_cluster(datanodes=1)
    old = c.put_bytes(random_bytes(3000, seed=107), "/t")
    async with library(c) as client:
        f = await client.open("/t")
        assert bytes(await client.read_range(f, 0, 100)) == old[:100]
        c.truncate("/t", 1000)
        assert bytes(await client.read_range(f, 200, 100)) == old[200:300]  # what is left still reads
        with pytest.raises(errors.FileChanged, match=r"truncated since it was opened.*shrank from 3000 to 1000"):
            await client.read_range(f, 1500, 500)


def test_blockmap_refuses_changed_identity() -> None:
    from hdfsfuse.client.blockmap import BlockMap
    from hdfsfuse.proto import hdfs_pb2

    def lb(offset: int, block_id: int, n: int, pool: str = "bp") -> hdfs_pb2.LocatedBlockProto:
        b = hdfs_pb2.LocatedBlockProto(offset=offset)
        b.b.poolId, b.b.blockId, b.b.numBytes, b.b.generationStamp = pool, block_id, n, 1
        return b

    m = BlockMap("/f")
    assert m.merge([lb(0, 1, 100), lb(200, 3, 100)]) == [0, 200]
    assert m.first_gap(0, 300) == 100 and m.first_gap(0, 100) is None
    grown = lb(200, 3, 150)
    grown.b.generationStamp = 2  # hflush/append/recovery: same block, new stamp, longer
    m.merge([lb(100, 2, 100), grown])
    assert m.first_gap(0, 350) is None and [p.block_start for p in m.pieces(50, 300)] == [0, 100, 200]
    for bad, why in [(lb(0, 9, 100), "replaced"), (lb(0, 1, 100, pool="other"), "replaced"),
                     (lb(200, 3, 120), "truncated"), (lb(300, 1, 10), "moved"), (lb(150, 7, 10), "overlaps")]:
        with pytest.raises(errors.FileChanged, match=why):
            m.merge([bad])
    assert [b.b.blockId for b in m.blocks] == [1, 2, 3]  # a refused answer changes nothing


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


async def test_unknown_visible_length_fails_loudly_not_short(
    fresh_cluster: Callable[..., MiniDfs], tmp_path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    """When no DataNode can say how far a block being written reaches, a read at the end is an error."""
    from hdfsfuse.security import sasl

    c = fresh_cluster(datanodes=1, block_tokens=True)
    (tmp_path / "part").write_bytes(random_bytes(5000, seed=122))
    c.append_open("/w", tmp_path / "part")
    try:
        monkeypatch.setattr(sasl, "token_credentials", lambda ident, pw: ("bm9ib2R5", "d3Jvbmc="))
        async with library(c) as client:
            f = await client.open("/w")
            assert f.length_unknown and "no DataNode gave the readable length" in f.length_unknown
            with pytest.raises(errors.BlockUnavailable, match="readable length"):
                await client.read_range(f, f.length, 100)
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


async def test_locations_come_in_windows_and_fill_gaps(cluster: MiniDfs, data_dir: str) -> None:
    path = f"{data_dir}/many-blocks"
    data = cluster.put_bytes(random_bytes(200 * KiB, seed=150), path, block_size=1024)
    async with library(cluster) as client:
        before = client.namenode.calls["getBlockLocations"]
        f = await client.open(path)
        assert client.namenode.calls["getBlockLocations"] == before + 1
        assert len(f.blocks) == 11  # the first ten blocks, and the last one
        tail = bytes(await client.read_range(f, 200 * KiB - 500, 500))  # a footer read needs no window
        assert tail == data[-500:] and client.namenode.calls["getBlockLocations"] == before + 1
        mid = bytes(await client.read_range(f, 100 * KiB + 7, 5000))
        assert mid == data[100 * KiB + 7 : 100 * KiB + 5007]
        assert client.namenode.calls["getBlockLocations"] == before + 2
        assert bytes(await client.read_range(f, 0, len(data))) == data
        assert len(f.blocks) == 200


async def test_a_large_read_lets_small_reads_through(cluster: MiniDfs, data_dir: str) -> None:
    """One 64 MiB read yields between packets: reads started after it finish before it."""
    big = cluster.put_bytes(random_bytes(64 * MiB, seed=151), f"{data_dir}/big", block_size=64 * MiB)
    small = cluster.put_bytes(random_bytes(MiB, seed=152), f"{data_dir}/small")
    async with library(cluster) as client:
        fb, fs_ = await client.open(f"{data_dir}/big"), await client.open(f"{data_dir}/small")
        await client.read_range(fs_, 0, 4096)  # warm a pooled connection
        done: list[str] = []

        async def large() -> None:
            assert bytes(await client.read_range(fb, 0, len(big))) == big
            done.append("large")

        async def smalls() -> None:
            await trio.sleep(0)
            for i in range(5):
                assert bytes(await client.read_range(fs_, i * 4096, 4096)) == small[i * 4096 : (i + 1) * 4096]
            done.append("small")

        async with trio.open_nursery() as n:
            n.start_soon(large)
            n.start_soon(smalls)
        assert done == ["small", "large"]


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


def test_negative_cache_is_bounded() -> None:
    from hdfsfuse.fuse.attributes import NEGATIVE_CACHE_MAX, NegativeCache

    negative = NegativeCache(timeout=60.0)
    for i in range(3 * NEGATIVE_CACHE_MAX):
        negative.remember((1, f"missing-{i}".encode()))
        assert len(negative) <= NEGATIVE_CACHE_MAX
    assert (1, f"missing-{3 * NEGATIVE_CACHE_MAX - 1}".encode()) in negative  # the newest are kept
    assert negative.missing((1, f"missing-{3 * NEGATIVE_CACHE_MAX - 1}".encode()))


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


@given(st.lists(st.integers(1, 3000), min_size=1, max_size=40), st.randoms(use_true_random=False))
def test_blockmap_takes_windows_in_any_order(lengths: list[int], rnd: random.Random) -> None:
    """Only the last block of a file being written can be empty, so blocks here hold a byte at least."""
    from hdfsfuse.client.blockmap import BlockMap
    from hdfsfuse.proto import hdfs_pb2

    located, offset = [], 0
    for i, n in enumerate(lengths):
        b = hdfs_pb2.LocatedBlockProto(offset=offset)
        b.b.poolId, b.b.blockId, b.b.numBytes = "bp", 1000 + i, n
        located.append(b)
        offset += n
    windows = [located[i : i + 10] for i in range(0, len(located), 10)]
    rnd.shuffle(windows)
    m = BlockMap("/f")
    for w in windows + windows[:1]:  # the last one again: a refresh of known blocks
        m.merge(w)
    assert m.starts == [b.offset for b in located] and m.first_gap(0, offset) is None
