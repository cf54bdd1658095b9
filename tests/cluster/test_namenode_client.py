"""The NameNode client against a real MiniDFSCluster; the Java client is the referee."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from hdfsfuse import errors
from hdfsfuse.conf.hadoop import resolve_uri
from hdfsfuse.namenode.client import FileStatus, NameNodeClient
from hdfsfuse.proto import hdfs_pb2
from tests.conftest import random_bytes, wait_fully_replicated
from tests.minidfs import MiniDfs

TYPES = {hdfs_pb2.HdfsFileStatusProto.IS_DIR: "dir", hdfs_pb2.HdfsFileStatusProto.IS_FILE: "file",
         hdfs_pb2.HdfsFileStatusProto.IS_SYMLINK: "symlink"}


@asynccontextmanager
async def open_nn(cluster: MiniDfs, **kw: object) -> AsyncIterator[NameNodeClient]:
    target = resolve_uri(cluster.uri, _conf(cluster))
    async with NameNodeClient.open(target, **kw) as nn:
        yield nn


def _conf(cluster: MiniDfs) -> dict[str, str]:
    from hdfsfuse.conf.hadoop import load_hadoop_conf

    return load_hadoop_conf(cluster.conf_dir)


def assert_matches_java(ours: FileStatus, java: dict[str, object]) -> None:
    assert TYPES[ours.fileType] == java["type"]
    assert ours.length == java["length"]
    assert ours.owner == java["owner"] and ours.group == java["group"]
    assert format(ours.permission.perm & 0o1777, "o") == java["mode"]
    assert ours.modification_time == java["mtime"] and ours.access_time == java["atime"]
    assert ours.block_replication == java["replication"] and ours.blocksize == java["block_size"]
    assert ours.fileId == java["file_id"]


@pytest.mark.compat
async def test_get_file_info_matches_java_stat(cluster: MiniDfs, data_dir: str) -> None:
    cluster.put_bytes(random_bytes(1_234_567, seed=10), f"{data_dir}/file")
    cluster.mkdir(f"{data_dir}/dir", mode="705")
    async with open_nn(cluster) as nn:
        for name in ("file", "dir"):
            ours = await nn.get_file_info(f"{data_dir}/{name}")
            assert ours is not None
            assert_matches_java(ours, cluster.stat(f"{data_dir}/{name}"))
        assert await nn.get_file_info(f"{data_dir}/missing") is None
        assert cluster.stat(f"{data_dir}/missing")["exists"] is False


async def test_listing_over_several_pages_matches_java(cluster: MiniDfs, data_dir: str) -> None:
    cluster.touch_many(f"{data_dir}/many", 2500)
    java = cluster.ls(f"{data_dir}/many")
    async with open_nn(cluster) as nn:
        entries = await nn.list_dir(f"{data_dir}/many")
        assert nn.calls["getListing"] == 3  # dfs.ls.limit = 1000 per page
        assert [e.path.decode() for e in entries] == [j["name"] for j in java]
        assert len(entries) == 2500
        for ours, theirs in zip(entries, java, strict=True):
            assert_matches_java(ours, theirs)
        capped = await nn.list_dir(f"{data_dir}/many", max_pages=1)
        assert [e.path.decode() for e in capped] == [j["name"] for j in java[:1000]]


async def test_missing_and_wrong_type_paths(cluster: MiniDfs, data_dir: str) -> None:
    cluster.put_bytes(b"abc", f"{data_dir}/f")
    async with open_nn(cluster) as nn:
        with pytest.raises(errors.FileNotFound):
            await nn.list_dir(f"{data_dir}/missing")
        with pytest.raises(errors.FileNotFound):
            await nn.get_block_locations(f"{data_dir}/missing", 0, 1)
        with pytest.raises(errors.IsADirectory) as e:
            await nn.get_block_locations(data_dir, 0, 1)
        assert errors.to_errno(e.value) == 21
        with pytest.raises(errors.NotADirectory):
            await nn.list_dir(f"{data_dir}/f")
        assert await nn.get_file_info(f"{data_dir}/f/child") is None  # HDFS: no error, no file


async def test_block_locations_cover_a_multi_block_file(cluster: MiniDfs, data_dir: str) -> None:
    size = 3 * 1024 * 1024 + 12345
    cluster.put_bytes(random_bytes(size, seed=11), f"{data_dir}/big")
    wait_fully_replicated(cluster, f"{data_dir}/big")  # else the two reads may see different replicas
    java = cluster.blocks(f"{data_dir}/big")
    async with open_nn(cluster) as nn:
        lbs = await nn.get_block_locations(f"{data_dir}/big", 0, size)
        assert lbs.fileLength == size and not lbs.underConstruction and lbs.isLastBlockComplete
        assert [(b.offset, b.b.numBytes) for b in lbs.blocks] == [(j["offset"], j["length"]) for j in java]
        assert [b.offset for b in lbs.blocks] == [0, 1 << 20, 2 << 20, 3 << 20]
        assert sum(b.b.numBytes for b in lbs.blocks) == size
        for b, j in zip(lbs.blocks, java, strict=True):
            assert b.b.blockId == j["block_id"]
            assert sorted(f"{loc.id.ipAddr}:{loc.id.xferPort}" for loc in b.locs) == sorted(j["xfer"])
        middle = await nn.get_block_locations(f"{data_dir}/big", (1 << 20) + 100, 10)
        assert [b.offset for b in middle.blocks] == [1 << 20]
        assert middle.lastBlock.offset == 3 << 20


async def test_server_defaults_cached_and_fs_stats(cluster: MiniDfs) -> None:
    async with open_nn(cluster) as nn:
        d1 = await nn.get_server_defaults()
        d2 = await nn.get_server_defaults()
        assert d1 is d2 and nn.calls["getServerDefaults"] == 1
        assert d1.bytesPerChecksum == 512 and d1.checksumType == hdfs_pb2.CHECKSUM_CRC32C
        assert not d1.encryptDataTransfer
        stats = await nn.get_fs_stats()
        assert stats.capacity > 0 and stats.remaining > 0 and stats.used > 0


async def test_symlinks(cluster: MiniDfs, data_dir: str) -> None:
    cluster.put_bytes(b"target", f"{data_dir}/target")
    cluster.symlink(f"{data_dir}/target", f"{data_dir}/link")
    async with open_nn(cluster) as nn:
        link = await nn.get_file_link_info(f"{data_dir}/link")
        assert link is not None and link.fileType == hdfs_pb2.HdfsFileStatusProto.IS_SYMLINK
        assert link.symlink.decode() == f"{data_dir}/target"
        assert await nn.get_link_target(f"{data_dir}/link") == f"{data_dir}/target"
        with pytest.raises(errors.UnresolvedLink):  # the NameNode leaves links to the client
            await nn.get_file_info(f"{data_dir}/link")


async def test_permission_denied_is_eacces(perm_cluster: MiniDfs) -> None:
    perm_cluster.put_bytes(b"top secret", "/secret")
    perm_cluster.chown("/secret", "bob", "bobs")
    perm_cluster.chmod("/secret", "600")
    perm_cluster.mkdir("/private", mode="700")
    perm_cluster.chown("/private", "bob", "bobs")
    async with open_nn(perm_cluster, user="alice") as nn:
        st = await nn.get_file_info("/secret")
        assert st is not None and st.owner == "bob"
        with pytest.raises(errors.AccessDenied) as e:
            await nn.get_block_locations("/secret", 0, 10)
        assert errors.to_errno(e.value) == 13
        with pytest.raises(errors.AccessDenied):
            await nn.list_dir("/private")
    async with open_nn(perm_cluster, user="bob") as nn:
        assert (await nn.get_block_locations("/secret", 0, 10)).fileLength == 10


async def test_200_concurrent_calls_on_one_connection(cluster: MiniDfs, data_dir: str) -> None:
    cluster.touch_many(f"{data_dir}/c", 200)
    java = {j["name"]: j["file_id"] for j in cluster.ls(f"{data_dir}/c")}
    results: dict[str, int] = {}
    async with open_nn(cluster) as nn:

        async def one(name: str) -> None:
            st = await nn.get_file_info(f"{data_dir}/c/{name}")
            assert st is not None
            results[name] = st.fileId

        async with trio.open_nursery() as n:
            for name in java:
                n.start_soon(one, name)
        assert nn.connects == 1
    assert results == java


async def test_reconnects_after_namenode_restart(fresh_cluster) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(datanodes=1)
    c.put_bytes(b"persisted", "/p")
    async with open_nn(c) as nn:
        assert (await nn.get_file_info("/p")).length == 9  # type: ignore[union-attr]
        await trio.to_thread.run_sync(c.restart_namenode)
        st = await nn.get_file_info("/p")
        assert st is not None and st.length == 9
        assert nn.connects == 2


@pytest.mark.compat
async def test_ha_calls_survive_failover(ha_cluster: MiniDfs) -> None:
    ha_cluster.put_bytes(b"ha data", "/ha-nn")
    async with open_nn(ha_cluster) as nn:
        assert nn.target.ha and nn.target.label == "ns1"
        for _ in range(3):
            assert (await nn.get_file_info("/ha-nn")).length == 7  # type: ignore[union-attr]
            active = nn.active_address
            await trio.to_thread.run_sync(ha_cluster.failover)
            assert (await nn.get_file_info("/ha-nn")).length == 7  # type: ignore[union-attr]
            assert nn.active_address != active
            assert nn.active_address == ha_cluster.active_namenode()
        assert nn.failovers >= 3


async def test_an_evicted_identity_still_serves_what_it_opened(cluster: MiniDfs,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from hdfsfuse.fuse import callers
    from hdfsfuse.security.credentials import Credentials

    monkeypatch.setattr(callers, "MAX_IDENTITIES", 1)
    async with open_nn(cluster) as mount_nn, trio.open_nursery() as nursery:
        ids = callers.Identities("caller", mount_nn, Credentials(mount_nn.target.settings, "root"), nursery)
        as_root = ids.namenode(0, None)  # an open file keeps the client it was opened with
        assert await as_root.get_file_info("/") is not None
        assert ids.namenode(65534, None) is not as_root  # a second caller pushes root's identity out
        await trio.sleep(0.2)  # its sockets are closed in the background
        assert as_root.connects == 1
        assert await as_root.get_file_info("/") is not None  # not "connection closed": it reconnects
        assert as_root.connects == 2
        assert ids.namenode(0, None) is not as_root  # a new request of root's gets a new identity
        nursery.cancel_scope.cancel()
