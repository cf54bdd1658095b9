"""Faults through the real mount: dead, hung and corrupt DataNodes, lost blocks, NameNode
restarts and failover, killed readers, malformed DataNode bytes. Every byte read is compared."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.conftest import random_bytes, wait_until
from tests.minidfs import MiniDfs
from tests.mounting import is_mounted

MiB = 1 << 20
FAST = "connect_timeout=1,read_timeout=1,total_timeout=6,request_timeout=10,namenode_timeout=20"


@contextmanager
def blackhole(ports: list[int]) -> Iterator[None]:
    """Silently drop every packet to these local ports: peers that stop answering."""
    table = f"hdfsfuse_drop_{os.getpid()}"
    port_set = ", ".join(map(str, ports))
    script = (f"add table inet {table}\n"
              f"add chain inet {table} out {{ type filter hook output priority -10; policy accept; }}\n"
              f"add rule inet {table} out tcp dport {{ {port_set} }} drop\n")
    subprocess.run(["nft", "-f", "-"], input=script.encode(), check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["nft", "delete", "table", "inet", table], capture_output=True)


def port(address: str) -> int:
    return int(address.rsplit(":", 1)[1])


def test_datanode_stopped_in_the_middle_of_cat(fresh_cluster, mount) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(datanodes=3)
    data = c.put_bytes(random_bytes(24 * MiB, seed=70), "/multi")
    m = mount(c, FAST)
    cat = subprocess.Popen(["cat", m.path("/multi")], stdout=subprocess.PIPE)
    assert cat.stdout is not None
    first = cat.stdout.read(4 * MiB)  # cat blocks on the pipe: it is in the middle of the file
    c.stop_datanode(c.blocks("/multi")[5]["xfer"][0])
    rest = cat.stdout.read()
    assert cat.wait(timeout=120) == 0
    assert first + rest == data


def test_corrupt_replica_through_the_mount(fresh_cluster, mount) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(datanodes=3)
    data = c.put_bytes(random_bytes(3 * MiB, seed=71), "/corrupt")
    m = mount(c, "direct_io")
    c.corrupt_replica("/corrupt", 1, c.blocks("/corrupt")[1]["xfer"][0], offset=1000, length=16)
    # The NameNode shuffles equally close replicas, so each open may start elsewhere: read until
    # the corrupt one has been met (every read must be correct either way).
    for _ in range(40):
        assert open(m.path("/corrupt"), "rb").read() == data
        if "checksum mismatch" in m.log_text():
            break
    wait_until(lambda: c.corrupt_replicas("/corrupt") == [0, 1, 0], "the NameNode never heard of the corrupt replica")
    # The report runs in the background and logs once the NameNode has answered, which the
    # harness may see before the daemon's task resumes: wait for the line, do not race it.
    wait_until(lambda: "reported corrupt replica" in m.log_text(), "the daemon never logged its report")


@pytest.mark.parametrize("hedging", ["hedge_after=auto", "hedge_after=off"])
def test_hung_datanode_moves_to_another_replica(fresh_cluster, mount, hedging: str) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(datanodes=3)
    data = c.put_bytes(random_bytes(2 * MiB, seed=72), "/hang")
    m = mount(c, FAST, "direct_io", hedging)
    fd = os.open(m.path("/hang"), os.O_RDONLY)
    try:
        assert os.pread(fd, 4096, 0) == data[:4096]  # a pooled connection to the replica in use now exists
        in_use = _connected([port(d["xfer"]) for d in c.datanodes])
        assert len(in_use) == 1
        with blackhole(in_use):
            assert os.pread(fd, 100_000, 5000) == data[5000:105_000]
            snap = json.loads(os.getxattr(m.dir, "user.hdfsfuse.stats"))
            if hedging == "hedge_after=off":  # the read timeout leaves the hung replica
                assert "trying the next replica" in m.log_text() and snap["replica_failovers"] >= 1
            else:  # a second replica is asked long before the read timeout, and answers first
                assert snap["hedged_reads"] >= 1 and snap["hedge_wins"] >= 1
    finally:
        os.close(fd)


def test_every_replica_hung_answers_eio_within_the_bound(fresh_cluster, mount) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(datanodes=2)
    c.put_bytes(random_bytes(MiB, seed=73), "/allhang")
    m = mount(c, FAST, "direct_io")
    fd = os.open(m.path("/allhang"), os.O_RDONLY)
    try:
        with blackhole([port(d["xfer"]) for d in c.datanodes]):
            with pytest.raises(OSError) as e:
                os.pread(fd, 4096, 0)
            assert e.value.errno == errno.EIO
    finally:
        os.close(fd)
    assert is_mounted(m.dir)


def test_lost_block_is_eio_and_other_files_keep_serving(fresh_cluster, mount) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(datanodes=3)
    c.put_bytes(random_bytes(100_000, seed=74), "/lost", replication=1)
    other = c.put_bytes(random_bytes(100_000, seed=75), "/fine")
    m = mount(c, FAST)
    c.stop_datanode(c.blocks("/lost")[0]["xfer"][0])
    with pytest.raises(OSError) as e:
        open(m.path("/lost"), "rb").read()
    assert e.value.errno == errno.EIO
    lines = [ln for ln in m.log_text().splitlines() if "ERROR" in ln and "/lost" in ln]
    assert lines and "block" in lines[0] and "127.0.0.1:" in lines[0]
    # One line per failed request (the kernel may retry a failed page read), from the FUSE boundary.
    assert all(" hdfsfuse.fuse.boundary: read /lost " in ln for ln in lines), lines
    assert open(m.path("/fine"), "rb").read() == other
    assert is_mounted(m.dir)


def test_namenode_restart_while_mounted(fresh_cluster, mount) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(datanodes=1)
    data = c.put_bytes(random_bytes(2 * MiB, seed=76), "/d/open-file")
    c.put_bytes(b"x", "/d/later")
    m = mount(c, "direct_io,attr_timeout=0,entry_timeout=0,negative_timeout=0")
    fd = os.open(m.path("/d/open-file"), os.O_RDONLY)
    try:
        c.restart_namenode()
        assert os.pread(fd, 10_000, MiB) == data[MiB : MiB + 10_000]  # no NameNode needed
        assert sorted(os.listdir(m.path("/d"))) == ["later", "open-file"]
        assert open(m.path("/d/later"), "rb").read() == b"x"
    finally:
        os.close(fd)


def test_ha_failover_while_mounted(ha_cluster: MiniDfs, mount) -> None:  # type: ignore[no-untyped-def]
    data = ha_cluster.put_bytes(random_bytes(MiB, seed=77), "/ha-mounted/f")
    m = mount(ha_cluster, "attr_timeout=0,entry_timeout=0")
    assert open("/proc/mounts").read().count("hdfs://ns1") >= 1
    for _ in range(2):
        ha_cluster.failover()
        assert open(m.path("/ha-mounted/f"), "rb").read() == data
        assert os.listdir(m.path("/ha-mounted")) == ["f"]


def _connected(ports: list[int]) -> list[int]:
    """Which of these local ports have established connections (one entry per connection)."""
    out = subprocess.run(["ss", "-Htn", "state", "established"], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        peer = int(line.split()[3].rsplit(":", 1)[1])
        if peer in ports:
            found.append(peer)
    return found


def _established(ports: list[int]) -> int:
    return len(_connected(ports))


def test_killed_reader_leaks_no_connections(fresh_cluster, mount) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(datanodes=1)
    data = c.put_bytes(random_bytes(32 * MiB, seed=78), "/kill")
    m = mount(c)
    for _ in range(3):
        cat = subprocess.Popen(["cat", m.path("/kill")], stdout=subprocess.PIPE)
        assert cat.stdout is not None
        cat.stdout.read(MiB)
        cat.send_signal(signal.SIGKILL)
        cat.wait()
        cat.stdout.close()
    xfer = [port(d["xfer"]) for d in c.datanodes]
    # Pooled sockets expire after 3 s idle; the reaper closes them.
    wait_until(lambda: _established(xfer) == 0, "connections to the DataNode stayed open")
    fd = os.open(m.path("/kill"), os.O_RDONLY)
    try:
        assert os.pread(fd, 5000, 20 * MiB) == data[20 * MiB : 20 * MiB + 5000]
    finally:
        os.close(fd)


