"""Erasure-coded files through the real mount, on real clusters whose files the Java client wrote
(so Java computed every parity byte we decode from): RS-3-2 and XOR-2-1 with small custom cells,
RS-6-3 and RS-LEGACY-6-3 with the built-in 1 MiB cells. Healthy reads must be exact on the wire;
degraded reads (stopped DataNodes, a corrupt cell) must decode Hadoop's bytes."""

from __future__ import annotations

import errno
import itertools
import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from tests.conftest import group_holders, mount_stats, random_bytes, wait_until
from tests.minidfs import MiniDfs
from tests.mounting import Mount

KiB, MiB = 1 << 10, 1 << 20
CELL = 64 * KiB
FAST = "connect_timeout=1,read_timeout=2,total_timeout=20,request_timeout=30"


def _counter(mount: Mount, name: str) -> int:
    return int(mount_stats(mount)[name])  # type: ignore[call-overload]


def _put(cluster: MiniDfs, files: dict[str, bytes], path: str, data: bytes, block_size: int) -> None:
    files[path] = cluster.put_bytes(data, path, block_size=block_size)


def check_reads(mount: Mount, files: dict[str, bytes], tmp_path: Path, preads: int = 40, seed: int = 0) -> None:
    """cmp and dd of every whole file, then random preads (cells straddled, unaligned), all exact."""
    rng = random.Random(seed)
    for path, data in files.items():
        local = tmp_path / "expected"
        local.write_bytes(data)
        subprocess.run(["cmp", mount.path(path), str(local)], check=True, capture_output=True)
        dd = subprocess.run(["dd", f"if={mount.path(path)}", "bs=64k", "status=none"], check=True,
                            capture_output=True)
        assert dd.stdout == data
        fd = os.open(mount.path(path), os.O_RDONLY)
        try:
            for _ in range(preads):
                off = rng.randrange(len(data))
                n = rng.choice([1, 4096, 5000, CELL + 17, 3 * CELL])
                assert os.pread(fd, n, off) == data[off : off + n], (path, off, n)
            assert os.pread(fd, 10, len(data)) == b""
        finally:
            os.close(fd)


def read_with_each_unit_lost(cluster: MiniDfs, mount: Mount, files: dict[str, bytes], tmp_path: Path,
                             holders: dict[str, int], preads: int) -> None:
    """Stop each DataNode in turn (one unit of every group lost), check every read, restart it."""
    for xfer in holders:
        cluster.stop_datanode(xfer)
        try:
            check_reads(mount, files, tmp_path, preads=preads, seed=holders[xfer])
        finally:
            cluster.restart_datanode(xfer)
    assert _counter(mount, "ec_degraded_reads") > 0


# ----- RS-3-2 on 5 DataNodes, 64 KiB cells ----------------------------------------------------


@pytest.mark.compat
def test_healthy_reads_are_exact_on_the_wire(rs32, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    c, files = rs32
    m = mount(c, "direct_io")
    check_reads(m, files, tmp_path)
    blocks = c.blocks("/ec/odd")
    assert [len(b["internal"]) for b in blocks] == [5, 5, 5]
    assert [u["length"] for u in blocks[2]["internal"]] == [2 * CELL, CELL + CELL // 2 + 123, CELL, 2 * CELL, 2 * CELL]
    assert sorted(u["index"] for u in c.blocks("/ec/small")[0]["internal"]) == [0, 3, 4]
    # 4 KiB reads cost 4 KiB from one DataNode: no cell, no stripe.
    data = files["/ec/odd"]
    rng = random.Random(3)
    offsets = [rng.randrange(0, len(data) - 4096) // 4096 * 4096 for _ in range(40)]
    before = c.metrics_total()
    fd = os.open(m.path("/ec/odd"), os.O_RDONLY)
    try:
        for off in offsets:
            assert os.pread(fd, 4096, off) == data[off : off + 4096]
    finally:
        os.close(fd)
    after = c.metrics_after(before, len(offsets))
    assert after["ReadBlockOpNumOps"] - before["ReadBlockOpNumOps"] == len(offsets)
    assert after["BytesRead"] - before["BytesRead"] <= 1.02 * len(offsets) * 4096
    assert _counter(m, "ec_degraded_reads") == 0


def test_a_sequential_read_reads_ahead_once_per_data_unit(rs32, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """With readahead_max=1M, a sequential reader of an RS-3-2 file gets 3 MiB windows: each
    DataNode's READ_BLOCKs are as long as a replicated file's one DataNode would get (1 MiB)."""
    c, _ = rs32
    data = c.put_bytes(random_bytes(24 * MiB, seed=143), "/ec/long", block_size=8 * MiB)
    m = mount(c, "readahead_max=1M")
    before = c.metrics_total()
    local = tmp_path / "long"
    local.write_bytes(data)
    subprocess.run(["cmp", m.path("/ec/long"), str(local)], check=True, capture_output=True)
    ops = c.metrics_after(before, 1)["ReadBlockOpNumOps"] - before["ReadBlockOpNumOps"]
    # Each window touches all 3 units. Measured here: 48 unit reads with 3 MiB windows, 86 when
    # an erasure-coded file got the replicated file's 1 MiB.
    assert ops < 65, ops


def test_ec_policy_and_indices_show_as_xattrs(rs32, mount) -> None:  # type: ignore[no-untyped-def]
    c, _ = rs32
    m = mount(c)
    assert "user.hdfs.ec_policy" in os.listxattr(m.path("/ec/odd"))
    assert os.getxattr(m.path("/ec/odd"), "user.hdfs.ec_policy") == b"RS-3-2-64k"
    assert os.getxattr(m.path("/ec"), "user.hdfs.ec_policy") == b"RS-3-2-64k"  # the directory's own
    assert "user.hdfs.ec_policy" not in os.listxattr(m.path("/"))
    listed = json.loads(os.getxattr(m.path("/ec/odd"), "user.hdfs.blocks"))
    assert [sorted(b["indices"]) for b in listed] == [[0, 1, 2, 3, 4]] * 3
    assert os.stat(m.path("/ec/odd")).st_size == len(rs32[1]["/ec/odd"])


@pytest.mark.compat
def test_every_single_unit_failure_decodes(rs32, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    c, files = rs32
    m = mount(c, "direct_io", FAST)
    holders = group_holders(c, "/ec/odd")
    assert sorted(holders.values()) == [0, 1, 2, 3, 4]  # each DataNode holds one unit of a group
    for xfer, index in sorted(holders.items(), key=lambda h: h[1]):
        degraded = _counter(m, "ec_degraded_reads")
        c.stop_datanode(xfer)
        try:
            if index == 0:  # a 4 KiB read in a lost cell costs k x 4 KiB, from the other units
                before = c.metrics_total()
                fd = os.open(m.path("/ec/odd"), os.O_RDONLY)
                try:
                    assert os.pread(fd, 4096, 8192) == files["/ec/odd"][8192:12288]
                finally:
                    os.close(fd)
                after = c.metrics_after(before, 3)
                assert after["BytesRead"] - before["BytesRead"] <= 3 * 4096 * 1.02
            check_reads(m, files, tmp_path, preads=20, seed=index)
        finally:
            c.restart_datanode(xfer)
        if index < 3:  # a lost data unit is decoded; a lost parity unit is never needed
            assert _counter(m, "ec_degraded_reads") > degraded
    assert "decoding around it" in m.log_text()


def test_every_double_unit_failure_decodes(rs32, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    c, files = rs32
    m = mount(c, "direct_io", FAST)
    odd = {"/ec/odd": files["/ec/odd"], "/ec/small": files["/ec/small"]}
    holders = group_holders(c, "/ec/odd")
    for pair in itertools.combinations(sorted(holders, key=holders.__getitem__), 2):
        for xfer in pair:
            c.stop_datanode(xfer)
        try:
            check_reads(m, odd, tmp_path, preads=10, seed=hash(pair) & 0xFFFF)
        finally:
            for xfer in pair:
                c.restart_datanode(xfer)


def test_three_lost_units_fail_with_one_clear_line(rs32, mount) -> None:  # type: ignore[no-untyped-def]
    c, _ = rs32
    m = mount(c, "direct_io", FAST)
    held = group_holders(c, "/ec/exact")
    holders = sorted(held, key=held.__getitem__)
    lost = holders[:3]  # data units 0, 1 and 2 of the first group
    for xfer in lost:
        c.stop_datanode(xfer)
    try:
        fd = os.open(m.path("/ec/exact"), os.O_RDONLY)
        try:
            with pytest.raises(OSError) as e:
                os.pread(fd, 4096, 0)
            assert e.value.errno == errno.EIO
        finally:
            os.close(fd)
    finally:
        for xfer in lost:
            c.restart_datanode(xfer)
    lines = [line for line in m.log_text().splitlines() if "can rebuild only 2" in line]
    assert len(lines) == 1 and "ERROR" in lines[0], lines


def test_a_corrupt_cell_is_found_by_its_checksum_and_decoded_around(rs32, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    c, _ = rs32
    data = c.put_bytes(random_bytes(4 * 3 * CELL, seed=143), "/ec/corrupt", block_size=2 * CELL)
    # Internal block 1 holds cells 1 and 4 of the first group; flip 16 bytes inside cell 4.
    c.corrupt_replica("/ec/corrupt", 0, None, offset=CELL + 1000, length=16, internal_index=1)
    m = mount(c, "direct_io")
    start = 4 * CELL + 900  # the corrupt bytes are at group offset 4*CELL + 1000
    fd = os.open(m.path("/ec/corrupt"), os.O_RDONLY)
    try:
        assert os.pread(fd, 4096, start) == data[start : start + 4096]
    finally:
        os.close(fd)
    check_reads(m, {"/ec/corrupt": data}, tmp_path, preads=10)
    assert _counter(m, "checksum_failures") >= 1
    assert _counter(m, "ec_degraded_reads") >= 1
    assert "checksum mismatch" in m.log_text()
    wait_until(lambda: _counter(m, "bad_block_reports") >= 1, "the corrupt internal block was never reported")
    assert c.corrupt_replicas("/ec/corrupt") == [1, 0]  # the NameNode holds that internal block as corrupt
    # ...and no longer lists it: a new open finds unit 1 missing and decodes it from the start.
    assert sorted(u["index"] for u in c.blocks("/ec/corrupt")[0]["internal"]) == [0, 2, 3, 4]
    fresh = mount(c, "direct_io")
    check_reads(fresh, {"/ec/corrupt": data}, tmp_path, preads=10, seed=1)
    assert _counter(fresh, "ec_degraded_reads") >= 1 and _counter(fresh, "checksum_failures") == 0


# ----- XOR-2-1 on 3 DataNodes ------------------------------------------------------------------

def test_xor_files_read_and_decode_every_single_failure(fresh_cluster, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(datanodes=3)
    c.set_ec_policy("/x", c.add_ec_policy("xor", 2, 1, CELL))
    files: dict[str, bytes] = {}
    _put(c, files, "/x/odd", random_bytes(2 * 2 * 2 * CELL + 3 * CELL + 77, seed=150), 2 * CELL)
    _put(c, files, "/x/small", random_bytes(CELL + 5, seed=151), 2 * CELL)
    m = mount(c, "direct_io", FAST)
    check_reads(m, files, tmp_path)
    assert os.getxattr(m.path("/x/odd"), "user.hdfs.ec_policy") == b"XOR-2-1-64k"
    holders = group_holders(c, "/x/odd")
    assert sorted(holders.values()) == [0, 1, 2]
    read_with_each_unit_lost(c, m, files, tmp_path, holders, preads=15)


# ----- RS-6-3 and RS-LEGACY-6-3 on 9 DataNodes, 1 MiB cells ------------------------------------

def test_rs_6_3_and_legacy_decode_every_single_failure(fresh_cluster, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(datanodes=9)
    c.set_ec_policy("/rs63", "RS-6-3-1024k")
    c.set_ec_policy("/legacy", "RS-LEGACY-6-3-1024k")
    files: dict[str, bytes] = {}
    # One whole group (6 MiB), then 3 MiB + 777 bytes: units 4 and 5 of the last group are empty.
    _put(c, files, "/rs63/f", random_bytes(9 * MiB + 777, seed=160), MiB)
    _put(c, files, "/legacy/f", random_bytes(7 * MiB + 3, seed=161), MiB)
    assert [len(b["internal"]) for b in c.blocks("/rs63/f")] == [9, 7]
    m = mount(c, "direct_io", FAST)
    check_reads(m, files, tmp_path, preads=20)
    assert os.getxattr(m.path("/legacy/f"), "user.hdfs.ec_policy") == b"RS-LEGACY-6-3-1024k"
    holders = group_holders(c, "/rs63/f")
    assert sorted(holders.values()) == list(range(9))
    read_with_each_unit_lost(c, m, files, tmp_path, holders, preads=8)


def test_a_zone_whose_keys_no_kms_serves_answers_eio_with_one_line(rs32, mount) -> None:  # type: ignore[no-untyped-def]
    # This cluster keeps its zone keys in a local Java keystore on the NameNode, not in a KMS:
    # a client cannot ask for the file's key, so the open fails and the log line says why.
    c, _ = rs32
    c.create_encryption_zone("/ez", "zone-key")
    data = c.put_bytes(random_bytes(10_000, seed=145), "/ez/f")
    m = mount(c)
    assert os.stat(m.path("/ez/f")).st_size == len(data)  # the metadata is still there
    with pytest.raises(OSError) as e:
        open(m.path("/ez/f"), "rb")
    assert e.value.errno == errno.EIO
    assert "/ez/f is encrypted, but no KMS is known" in m.log_text()


def test_the_block_cache_keeps_internal_blocks(rs32, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    c, files = rs32
    m = mount(c, "direct_io", FAST, f"cache_dir={tmp_path}/cache")
    odd = {"/ec/odd": files["/ec/odd"]}
    check_reads(m, odd, tmp_path, preads=0)
    wait_until(lambda: _counter(m, "block_cache_stored_bytes") >= len(files["/ec/odd"]), "nothing was cached")
    lost = c.stop_datanode(path="/ec/odd", block_index=0, internal_index=0)
    try:
        before = c.metrics_total()
        check_reads(m, odd, tmp_path, preads=20, seed=9)  # a lost unit, but every byte is cached
        assert c.metrics_total()["BytesRead"] - before["BytesRead"] < 0.01 * len(files["/ec/odd"])
        assert _counter(m, "ec_degraded_reads") == 0
    finally:
        c.restart_datanode(lost)


@pytest.mark.parametrize("how", ["overwrite", "rename over", "delete"])
def test_an_open_ec_file_replaced_under_it_never_reads_the_new_files_bytes(rs32, mount, how: str) -> None:  # type: ignore[no-untyped-def]
    """An fd opened on an erasure-coded file keeps the file it opened: after the path is
    overwritten, renamed over or deleted, a group whose locations it already holds (the first
    window of 10, and the last) reads the old bytes (or EIO, once the DataNodes have dropped the
    old file's blocks), and a group it must locate anew is EIO: never the new file's bytes."""
    c, _ = rs32
    group = 3 * 2 * CELL
    path = f"/ec/replaced-{how.replace(' ', '-')}"
    old = c.put_bytes(random_bytes(16 * group + 5000, seed=150), path, block_size=2 * CELL)
    new = random_bytes(len(old), seed=151)
    m = mount(c, "direct_io", FAST)
    fd = os.open(m.path(path), os.O_RDONLY)
    try:
        assert os.pread(fd, 4096, 0) == old[:4096]
        if how == "overwrite":
            c.put_bytes(new, path, block_size=2 * CELL)
        elif how == "rename over":
            c.put_bytes(new, path + ".tmp", block_size=2 * CELL)
            c.rename(path + ".tmp", path)
        else:
            c.delete(path)
        for off in (5 * group + 100, 16 * group + 7, 8192):  # groups 5 and 16 (the last) are located
            try:
                assert os.pread(fd, 4096, off) == old[off : off + 4096], off
            except OSError as e:
                assert e.errno == errno.EIO, off
        with pytest.raises(OSError) as e:
            os.pread(fd, 4096, 12 * group + 3)  # group 12: past the first window
        assert e.value.errno == errno.EIO
    finally:
        os.close(fd)
    if how != "delete":
        with open(m.path(path), "rb") as f:  # a new open sees the new file
            assert f.read() == new
    assert "was deleted or replaced since it was opened" in m.log_text()


def test_the_file_checksum_of_ec_files_is_javas_composite_crc(rs32, mount) -> None:  # type: ignore[no-untyped-def]
    """OP_BLOCK_GROUP_CHECKSUM per group: Java's value, which is the CRC of the file's bytes, also
    while a data unit's DataNode is down (the DataNode asked reconstructs that unit). (Last in the
    module: it leaves a restarted DataNode behind, whose block report may still be due.)"""
    import google_crc32c

    c, files = rs32
    m = mount(c)
    for path, data in files.items():
        java = c.command("file_checksum", path=path)
        ours = os.getxattr(m.path(path), "user.hdfs.checksum").decode()
        assert ours == f"{java['algorithm']} {java['bytes']}" == f"COMPOSITE-CRC32C {google_crc32c.value(data):08x}"
    lost = next(xfer for xfer, index in group_holders(c, "/ec/odd", group=1).items() if index == 1)
    c.stop_datanode(lost)
    try:
        ours = os.getxattr(m.path("/ec/odd"), "user.hdfs.checksum").decode()
    finally:
        c.restart_datanode(lost)
    assert ours == f"COMPOSITE-CRC32C {google_crc32c.value(files['/ec/odd']):08x}"
