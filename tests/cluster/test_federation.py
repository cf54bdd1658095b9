"""Federation without a mount: the two-nameservice harness, bad viewfs mount tables, and options
that need one NameNode, each refused with one clear line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import view_conf
from tests.minidfs import MiniDfs
from tests.mounting import HDFSFUSE, is_mounted

KiB = 1024
MiB = 1 << 20


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


