"""Federated namespaces through the real mount: viewfs mount tables over a real two-nameservice
cluster (`--federation 2 --ha`), and a real Router-based federation front (`--router`, the
launcher's Hadoop 3.4.2 build). fileIds collide across namespaces on purpose: each test checks
that two files with one fileId stay two files, byte-exact."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.minidfs import ClusterOptions, MiniDfs
from tests.mounting import HDFSFUSE, is_mounted

KiB = 1024
MiB = 1 << 20


@pytest.fixture(scope="module")
def federated() -> Iterator[MiniDfs]:
    """Two nameservices, each an HA pair, sharing two DataNodes."""
    with MiniDfs(ClusterOptions(federation=2, ha=True, datanodes=2, replication=2)) as c:
        yield c


def view_conf(cluster: MiniDfs, into: Path, entries: dict[str, str]) -> str:
    """The cluster's client configuration plus viewfs mount-table entries in core-site.xml."""
    conf_dir = into / "conf"
    shutil.copytree(cluster.conf_dir, conf_dir, dirs_exist_ok=True)
    site = conf_dir / "core-site.xml"
    props = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in entries.items())
    site.write_text(site.read_text().replace("</configuration>", props + "</configuration>"))
    return str(conf_dir)


# ----- viewfs --------------------------------------------------------------------------------


def test_the_harness_starts_two_ha_nameservices(federated: MiniDfs) -> None:
    assert [ns["id"] for ns in federated.nameservices] == ["ns0", "ns1"]
    assert all(len(ns["namenodes"]) == 2 for ns in federated.nameservices)
    federated.mkdir("hdfs://ns1/only-in-ns1")
    assert federated.stat("hdfs://ns1/only-in-ns1")["exists"]
    assert not federated.stat("hdfs://ns0/only-in-ns1")["exists"]


@pytest.mark.parametrize(("entries", "message"), [
    ({"fs.viewfs.mounttable.bad.linkRegex.^/u/(\\w+)": "hdfs://ns0/$1"}, "linkRegex mount points are not supported"),
    ({"fs.viewfs.mounttable.bad.link./a": "hdfs://ns0/a", "fs.viewfs.mounttable.bad.link./a/b": "hdfs://ns1/b"},
     "nested mount points"),
    ({"fs.viewfs.mounttable.bad.link./a": "file:///etc"}, "not an hdfs:// URI"),
    ({"fs.viewfs.mounttable.other.link./a": "hdfs://ns0/a"}, "viewfs://bad/: the mount table is empty"),
])
def test_bad_mount_tables_fail_the_mount_with_one_clear_line(
    federated: MiniDfs, tmp_path: Path, entries: dict[str, str], message: str,
) -> None:
    conf = view_conf(federated, tmp_path, entries)
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    r = subprocess.run([*HDFSFUSE, "mount", "viewfs://bad/", str(mountpoint), "-o",
                        f"hadoop_conf={conf},namenode_timeout=3"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and not is_mounted(str(mountpoint))
    assert "Traceback" not in r.stderr
    assert message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_viewfs_refuses_options_that_need_one_namenode(federated: MiniDfs, tmp_path: Path) -> None:
    conf = view_conf(federated, tmp_path, {"fs.viewfs.mounttable.v5.link./a": "hdfs://ns0/"})
    r = subprocess.run([*HDFSFUSE, "mount", "viewfs://v5/", str(tmp_path), "-o", f"hadoop_conf={conf},inotify"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "-o inotify follows one NameNode's edit log" in r.stderr


# ----- Router-based federation ---------------------------------------------------------------


