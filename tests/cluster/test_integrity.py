"""Never a wrong byte, through the library on a real cluster: open files pinned to their identity,
truncated files refused rather than short, unknown visible lengths failing loudly, location
windows, and small reads passing a large one."""

from __future__ import annotations

import errno
from collections.abc import Callable

import pytest
import trio

from hdfsfuse import errors
from hdfsfuse.client import ClientOptions, HdfsClient
from tests.conftest import corrupt_every_replica, random_bytes
from tests.minidfs import MiniDfs

KiB = 1024
MiB = 1 << 20


def library(cluster: MiniDfs) -> HdfsClient:
    return HdfsClient.connect(cluster.uri, conf_dir=cluster.conf_dir,  # type: ignore[return-value]
                              options=ClientOptions(hedge_after=None))


# ----- 1. an open file is pinned to its fileId and block ids ------------------------------------


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


# ----- 2. files being written: tail -f sees every appended byte ---------------------------------


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


# ----- 7. scale: streamed listings, bounded caches ------------------------------------------------


