"""Federated namespaces through the real mount: viewfs mount tables over a real two-nameservice
cluster (`--federation 2 --ha`), and a real Router-based federation front (`--router`, the
launcher's Hadoop 3.4.2 build). fileIds collide across namespaces on purpose: each test checks
that two files with one fileId stay two files, byte-exact."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import random_bytes, view_conf
from tests.minidfs import ClusterOptions, MiniDfs
from tests.mounting import Mount

KiB = 1024
MiB = 1 << 20


@pytest.fixture(scope="module")
def routed() -> Iterator[MiniDfs]:
    """A Router over two subclusters: /a is ns0:/x, /b is ns1:/y."""
    with MiniDfs(ClusterOptions(router=True, datanodes=3, replication=2)) as c:
        c.add_mount("/a", "ns0", "/x")
        c.add_mount("/b", "ns1", "/y")
        yield c


def same_file_id(cluster: MiniDfs, *paths: str) -> None:
    """The test's premise: these files in different namespaces share one fileId."""
    ids = {cluster.stat(p)["file_id"] for p in paths}
    assert len(ids) == 1, f"fileIds differ ({ids}): the collision this test needs did not happen"


def pread_all(path: str, data: bytes, offsets: list[int], size: int = 4 * KiB) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        for off in offsets:
            assert os.pread(fd, size, off) == data[off : off + size], f"{path} at {off}"
    finally:
        os.close(fd)


# ----- viewfs --------------------------------------------------------------------------------


def test_viewfs_links_and_fallback_join_both_namespaces(
    federated: MiniDfs, mount: Callable[..., Mount], tmp_path: Path,
) -> None:
    c = federated
    c.mkdir("hdfs://ns0/v1/home")
    c.mkdir("hdfs://ns1/v1/warehouse")
    logs = c.put_bytes(random_bytes(3 * MiB + 77, seed=701), "hdfs://ns0/v1/applogs/app.log")
    table = c.put_bytes(random_bytes(2 * MiB + 5, seed=702), "hdfs://ns1/v1/warehouse/part-0")
    home = c.put_bytes(random_bytes(1000, seed=703), "hdfs://ns0/v1/home/notes.txt")
    conf = view_conf(c, tmp_path, {
        "fs.viewfs.mounttable.v1.link./data": "hdfs://ns1/v1/warehouse",
        "fs.viewfs.mounttable.v1.link./logs/app": "hdfs://ns0/v1/applogs",
        "fs.viewfs.mounttable.v1.linkFallback": "hdfs://ns0/v1",
    })
    m = mount(c, f"hadoop_conf={conf}", uri="viewfs://v1/")
    assert sorted(os.listdir(m.dir)) == ["applogs", "data", "home", "logs"]  # links + the fallback's entries
    assert os.listdir(m.path("/logs")) == ["app"]
    assert os.listdir(m.path("/data")) == ["part-0"]
    with open(m.path("/logs/app/app.log"), "rb") as f:
        assert f.read() == logs
    with open(m.path("/data/part-0"), "rb") as f:
        assert f.read() == table
    with open(m.path("/home/notes.txt"), "rb") as f:  # through the fallback
        assert f.read() == home
    pread_all(m.path("/data/part-0"), table, [0, MiB - 100, 2 * MiB - 3000])
    pread_all(m.path("/logs/app/app.log"), logs, [5, 2 * MiB + 1, 3 * MiB - 4096])
    a, b = os.stat(m.path("/logs/app/app.log")), os.stat(m.path("/data/part-0"))
    assert (a.st_size, b.st_size) == (len(logs), len(table))
    assert a.st_ino != b.st_ino  # one fileId in two namespaces: two inodes
    internal = os.stat(m.path("/logs"))
    assert oct(internal.st_mode & 0o777) == "0o555"
    summary = json.loads(os.getxattr(m.path("/logs"), "user.hdfs.content_summary"))
    assert summary["length"] == len(logs) and summary["files"] == 1
    assert os.statvfs(m.dir).f_blocks > 0
    assert not os.path.exists(m.path("/logs/nothing"))


def test_viewfs_without_fallback_shows_only_mount_points(
    federated: MiniDfs, mount: Callable[..., Mount], tmp_path: Path,
) -> None:
    c = federated
    one = c.put_bytes(random_bytes(10_000, seed=711), "hdfs://ns0/v2/one")
    two = c.put_bytes(random_bytes(20_000, seed=712), "hdfs://ns1/v2/two")
    conf = view_conf(c, tmp_path, {
        "fs.viewfs.mounttable.v2.link./zero": "hdfs://ns0/v2",
        "fs.viewfs.mounttable.v2.link./first": "hdfs://ns1/v2",
        "fs.viewfs.mounttable.v2.link./missing": "hdfs://ns1/not-created",
    })
    m = mount(c, f"hadoop_conf={conf}", uri="viewfs://v2/")
    assert sorted(os.listdir(m.dir)) == ["first", "missing", "zero"]
    assert os.path.isdir(m.path("/missing"))  # a target that does not exist lists as a directory
    with pytest.raises(FileNotFoundError):
        os.listdir(m.path("/missing"))
    with pytest.raises(FileNotFoundError):
        os.stat(m.path("/elsewhere"))
    with open(m.path("/zero/one"), "rb") as f:
        assert f.read() == one
    with open(m.path("/first/two"), "rb") as f:
        assert f.read() == two


def test_viewfs_merge_slash_and_a_subdirectory_root(
    federated: MiniDfs, mount: Callable[..., Mount], tmp_path: Path,
) -> None:
    c = federated
    data = c.put_bytes(random_bytes(50_000, seed=721), "hdfs://ns1/v3/deep/file")
    conf = view_conf(c, tmp_path, {"fs.viewfs.mounttable.v3.linkMergeSlash": "hdfs://ns1/"})
    m = mount(c, f"hadoop_conf={conf}", root="v3/deep", uri="viewfs://v3/")
    assert os.listdir(m.dir) == ["file"]
    with open(m.path("/file"), "rb") as f:
        assert f.read() == data


def test_viewfs_target_fails_over_within_its_ha_nameservice(
    federated: MiniDfs, mount: Callable[..., Mount], tmp_path: Path,
) -> None:
    c = federated
    data = c.put_bytes(random_bytes(300_000, seed=731), "hdfs://ns0/v4/f")
    conf = view_conf(c, tmp_path, {"fs.viewfs.mounttable.v4.link./f0": "hdfs://ns0/v4",
                                   "fs.viewfs.mounttable.v4.link./f1": "hdfs://ns1/"})
    m = mount(c, f"hadoop_conf={conf}", "entry_timeout=0,attr_timeout=0", uri="viewfs://v4/")
    with open(m.path("/f0/f"), "rb") as f:
        assert f.read() == data
    before = c.command("active_namenode")["active"]
    after = c.command("failover")["active"]  # ns0's pair: the standby becomes active
    assert before != after
    with open(m.path("/f0/f"), "rb") as f:
        assert f.read() == data
    stats = json.loads(os.getxattr(m.dir, "user.hdfsfuse.stats"))
    assert stats["namenode_failovers"] >= 1


def test_an_unreachable_namespace_fails_only_its_own_paths(
    federated: MiniDfs, mount: Callable[..., Mount], tmp_path: Path,
) -> None:
    c = federated
    data = c.put_bytes(random_bytes(4000, seed=735), "hdfs://ns1/v6/ok")
    conf = view_conf(c, tmp_path, {"fs.viewfs.mounttable.v6.link./good": "hdfs://ns1/v6",
                                   "fs.viewfs.mounttable.v6.link./gone": "hdfs://127.0.0.1:1/"})
    m = mount(c, f"hadoop_conf={conf}", "namenode_timeout=2", uri="viewfs://v6/")
    with pytest.raises(OSError) as e:
        os.listdir(m.path("/gone"))
    assert e.value.errno == errno.EIO
    with open(m.path("/good/ok"), "rb") as f:
        assert f.read() == data
    failures = [ln for ln in m.log_text().splitlines() if "127.0.0.1:1" in ln]
    assert failures and all("ERROR" in ln for ln in failures), m.log_text()


# ----- Router-based federation ---------------------------------------------------------------


def test_a_router_mount_reads_both_subclusters(routed: MiniDfs, mount: Callable[..., Mount]) -> None:
    c = routed
    zero = c.put_bytes(random_bytes(2 * MiB + 11, seed=741), "hdfs://ns0/x/f")
    one = c.put_bytes(random_bytes(3 * MiB + 13, seed=742), "hdfs://ns1/y/f")
    same_file_id(c, "hdfs://ns0/x/f", "hdfs://ns1/y/f")
    m = mount(c, uri=c.router_uri)
    assert {"a", "b"} <= set(os.listdir(m.dir))
    with open(m.path("/a/f"), "rb") as f:
        assert f.read() == zero
    with open(m.path("/b/f"), "rb") as f:
        assert f.read() == one
    pread_all(m.path("/b/f"), one, [0, MiB + 3, 3 * MiB - 4096])
    pread_all(m.path("/a/f"), zero, [7, 2 * MiB - 10])
    assert os.stat(m.path("/a/f")).st_ino != os.stat(m.path("/b/f")).st_ino
    assert os.stat(m.path("/a/f")).st_size == len(zero) and os.stat(m.path("/b/f")).st_size == len(one)


def test_a_file_replaced_behind_a_router_never_reads_the_new_bytes(
    routed: MiniDfs, mount: Callable[..., Mount],
) -> None:
    """By path, but pinned: a later location window that finds another file is refused (EIO)."""
    c = routed
    old = c.put_bytes(random_bytes(64 * KiB, seed=751), "hdfs://ns1/y/table", block_size=1024)
    m = mount(c, "direct_io", uri=c.router_uri)
    fd = os.open(m.path("/b/table"), os.O_RDONLY)
    try:
        assert os.pread(fd, 100, 0) == old[:100]  # locations for the first 10 blocks only
        new = c.put_bytes(random_bytes(64 * KiB, seed=752), "hdfs://ns1/y/table", block_size=1024)
        with pytest.raises(OSError) as e:
            os.pread(fd, 1000, 50 * KiB)
        assert e.value.errno == errno.EIO
        assert os.pread(fd, 100, 200) == old[200:300]  # blocks it already knows still read
    finally:
        os.close(fd)
    with open(m.path("/b/table"), "rb") as f:  # a new open finds the new file
        assert f.read() == new
    assert "deleted or replaced since it was opened" in m.log_text()


@pytest.mark.parametrize("timeouts", ["entry_timeout=0,attr_timeout=0", "entry_timeout=60,attr_timeout=60"])
def test_a_path_replaced_behind_a_router_gets_a_new_inode(
    routed: MiniDfs, mount: Callable[..., Mount], timeouts: str,
) -> None:
    """With names looked up each time, or with the kernel's cached name of the old file: an open
    refuses the old inode (ESTALE), the kernel looks the name up again, and the new file opens."""
    c = routed
    suffix = "cached" if "60" in timeouts else "fresh"
    path = f"hdfs://ns0/x/swap-{suffix}"
    first = c.put_bytes(random_bytes(5000, seed=761), path)
    m = mount(c, timeouts, uri=c.router_uri)
    name = m.path(f"/a/swap-{suffix}")
    with open(name, "rb") as f:
        assert f.read() == first
        ino = os.fstat(f.fileno()).st_ino
    second = c.put_bytes(random_bytes(5000, seed=762), path)  # same length, new fileId
    with open(name, "rb") as f:
        assert os.fstat(f.fileno()).st_ino != ino
        assert f.read() == second


def test_a_router_over_ha_subclusters(mount: Callable[..., Mount]) -> None:
    """--router --ha: the Router watches both NameNodes of each HA subcluster and reads through it."""
    with MiniDfs(ClusterOptions(router=True, ha=True, datanodes=2, replication=2)) as c:
        assert all(len(ns["namenodes"]) == 2 for ns in c.nameservices)
        c.add_mount("/logs", "ns1", "/applogs")
        data = c.put_bytes(random_bytes(300_000, seed=771), "hdfs://ns1/applogs/a.log")
        m = mount(c, uri=c.router_uri)
        with open(m.path("/logs/a.log"), "rb") as f:
            assert f.read() == data
        m.unmount()
