"""The harness itself: the real MiniDFSCluster launcher, its commands and the wire referee."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import random_bytes
from tests.minidfs import MiniDfs, MiniDfsError

REPO = Path(__file__).resolve().parents[2]


def test_ready_line_describes_the_cluster(cluster: MiniDfs) -> None:
    r = cluster.ready
    assert r["ready"] is True
    assert r["uri"] == "hdfs://" + r["namenodes"][0]["rpc"]
    assert len(r["datanodes"]) == 3
    for dn in r["datanodes"]:
        for key in ("xfer", "ipc", "http"):
            host, port = dn[key].rsplit(":", 1)
            assert host == "127.0.0.1" and int(port) > 0
    conf = Path(r["conf_dir"])
    assert r["uri"] in (conf / "core-site.xml").read_text()
    assert (conf / "hdfs-site.xml").exists()


def test_put_then_sha256_round_trips(cluster: MiniDfs, data_dir: str) -> None:
    data = random_bytes(2_500_000, seed=1)
    cluster.put_bytes(data, f"{data_dir}/f")
    assert cluster.sha256(f"{data_dir}/f") == hashlib.sha256(data).hexdigest()
    st = cluster.stat(f"{data_dir}/f")
    assert st["exists"] and st["length"] == len(data) and st["type"] == "file"
    blocks = cluster.blocks(f"{data_dir}/f")
    assert [b["offset"] for b in blocks] == [0, 1 << 20, 2 << 20]
    assert sum(b["length"] for b in blocks) == len(data)


def test_stat_and_ls(cluster: MiniDfs, data_dir: str) -> None:
    cluster.put_bytes(b"x" * 10, f"{data_dir}/b")
    cluster.put_bytes(b"y" * 3, f"{data_dir}/a")
    cluster.mkdir(f"{data_dir}/d", mode="750")
    names = [(e["name"], e["type"], e["length"]) for e in cluster.ls(data_dir)]
    assert names == [("a", "file", 3), ("b", "file", 10), ("d", "dir", 0)]
    assert cluster.stat(f"{data_dir}/d")["mode"] == "750"
    assert cluster.stat(f"{data_dir}/missing") == {"ok": True, "exists": False}


def test_bad_command_gets_an_error_and_cluster_stays_up(cluster: MiniDfs, data_dir: str) -> None:
    with pytest.raises(MiniDfsError, match="unknown command"):
        cluster.command("no_such_command")
    with pytest.raises(MiniDfsError, match="missing field"):
        cluster.command("sha256")
    with pytest.raises(MiniDfsError, match=r"FileNotFound|does not exist"):
        cluster.sha256(f"{data_dir}/missing")
    cluster.put_bytes(b"still up", f"{data_dir}/ok")
    assert cluster.sha256(f"{data_dir}/ok") == hashlib.sha256(b"still up").hexdigest()


def test_metrics_bytes_read_grows_after_java_read(cluster: MiniDfs, data_dir: str) -> None:
    data = cluster.put_bytes(random_bytes(300_000, seed=2), f"{data_dir}/m")
    before = cluster.metrics_total()
    cluster.sha256(f"{data_dir}/m")
    after = cluster.metrics_total()
    assert after["BytesRead"] - before["BytesRead"] >= len(data)
    assert after["ReadBlockOpNumOps"] > before["ReadBlockOpNumOps"]


def test_wire_referee_counts_a_java_read(cluster: MiniDfs, data_dir: str) -> None:
    size = 3 * 1024 * 1024
    cluster.put_bytes(random_bytes(size, seed=3), f"{data_dir}/w")
    with cluster.wire() as wire:
        cluster.sha256(f"{data_dir}/w")
    assert size <= wire.bytes <= size * 1.02
    assert wire.packets > 0


def test_wire_referee_counts_nothing_when_idle(cluster: MiniDfs) -> None:
    with cluster.wire() as wire:
        cluster.stat("/")
    assert wire.bytes == 0


def test_corrupt_replica_changes_exactly_the_bytes_asked(cluster: MiniDfs, data_dir: str) -> None:
    data = cluster.put_bytes(random_bytes(1_500_000, seed=4), f"{data_dir}/c")
    block = cluster.blocks(f"{data_dir}/c")[1]
    xfer = block["xfer"][0]
    offset, length = 1000, 7
    reply = cluster.corrupt_replica(f"{data_dir}/c", 1, xfer, offset, length)
    on_disk = Path(reply["block_file"]).read_bytes()
    original = data[block["offset"]: block["offset"] + block["length"]]
    assert len(on_disk) == len(original)
    diff = [i for i in range(len(on_disk)) if on_disk[i] != original[i]]
    assert diff == list(range(offset, offset + length))
    # Leave the shared cluster clean: corrupting again flips the bytes back.
    cluster.corrupt_replica(f"{data_dir}/c", 1, xfer, offset, length)
    assert Path(reply["block_file"]).read_bytes() == original


def test_stop_and_restart_datanode(fresh_cluster) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(datanodes=2)
    data = c.put_bytes(random_bytes(100_000, seed=5), "/s", replication=2)
    xfer = c.datanodes[0]["xfer"]
    ports = [int(c.datanodes[0][kind].rsplit(":", 1)[1]) for kind in ("xfer", "ipc")]
    c.stop_datanode(xfer)
    with pytest.raises(MiniDfsError, match="no running DataNode"):
        c.stop_datanode(xfer)
    # The stopped DataNode's ports stay bound, so no connection's kernel-chosen local port can
    # take one and make the restart fail with "Address already in use".
    for port in ports:
        with socket.socket() as s, pytest.raises(OSError, match="Address already in use"):
            s.bind(("127.0.0.1", port))
    assert xfer not in c.metrics()
    assert c.sha256("/s") == hashlib.sha256(data).hexdigest()  # served by the other replica
    c.restart_datanode(xfer)
    assert xfer in c.metrics()


def test_failover_switches_the_active_namenode(ha_cluster: MiniDfs) -> None:
    nn0, nn1 = (nn["rpc"] for nn in ha_cluster.namenodes)
    assert ha_cluster.uri == "hdfs://ns1"
    first = ha_cluster.active_namenode()
    assert first in (nn0, nn1)
    second = ha_cluster.failover()
    assert second != first and ha_cluster.active_namenode() == second
    ha_cluster.put_bytes(b"after failover", "/ha-file")
    assert ha_cluster.sha256("/ha-file") == hashlib.sha256(b"after failover").hexdigest()
    assert ha_cluster.failover() == first
    hdfs_site = (Path(ha_cluster.conf_dir) / "hdfs-site.xml").read_text()
    assert "dfs.ha.namenodes.ns1" in hdfs_site and nn0 in hdfs_site and nn1 in hdfs_site


def test_standalone_runner_passes_commands_through() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.minidfs", "--datanodes", "1"],
        input='{"cmd": "stat", "path": "/"}\n{"cmd": "nope"}\n',
        capture_output=True, text=True, cwd=REPO, timeout=240,
    )
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    assert proc.returncode == 0, proc.stderr
    assert lines[0]["ready"] is True and len(lines[0]["datanodes"]) == 1
    assert lines[1]["exists"] is True and lines[1]["type"] == "dir"
    assert "unknown command" in lines[2]["error"]
    assert len(lines) == 3


def test_hadoop_version_runs_that_release() -> None:
    """The launcher built against 3.3.6 (kept in its own folder) starts a 3.3.6 cluster."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.minidfs", "--hadoop-version", "3.3.6", "--datanodes", "1"],
        input='{"cmd": "mkdir", "path": "/d"}\n{"cmd": "stat", "path": "/d"}\n',
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ready, _, stat = (json.loads(x) for x in proc.stdout.splitlines())
    assert ready["hadoop_version"] == "3.3.6"
    assert stat["type"] == "dir"
    assert (REPO / "tests" / "minidfs" / "target-hadoop-3.3.6" / "classpath.txt").is_file()
