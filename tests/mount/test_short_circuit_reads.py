"""Short-circuit local reads on a real --short-circuit cluster: through the mount (exact, local,
never another file's bytes, corrupt replicas caught, fallback), block tokens, blocks being
written, untrusted socket paths, and fake DataNode sockets that hang or send garbage."""

from __future__ import annotations

import errno
import os
import random
import subprocess
from pathlib import Path

import pytest

from hdfsfuse.local import uring
from hdfsfuse.proto import hdfs_pb2
from tests.conftest import mount_stats, random_bytes, wait_fully_replicated, wait_until
from tests.minidfs import MiniDfs, short_circuit_unavailable
from tests.page_residency import drop_pages, page_cache_bypass_unavailable, resident_pages

MiB = 1 << 20
FRESH = "entry_timeout=0,attr_timeout=0,negative_timeout=0"
UNAVAILABLE = short_circuit_unavailable()
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"short-circuit cluster: {UNAVAILABLE}")


def _preads(path: str, data: bytes, count: int, seed: int) -> None:
    rng = random.Random(seed)
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(count):
            off = rng.randrange(len(data))
            n = rng.choice([1, 512, 4096, 70_000, 300_000])
            assert os.pread(fd, n, off) == data[off : off + n]
    finally:
        os.close(fd)


@pytest.mark.parametrize("mode", ["page_cache", "direct_io"])
def test_mount_reads_are_exact_and_never_touch_the_network(sc_cluster: MiniDfs, sc_dir: str, mount, mode: str,  # type: ignore[no-untyped-def]
                                                           tmp_path: Path) -> None:
    data = random_bytes(5 * MiB + 4321, seed=1700)
    (tmp_path / "src").write_bytes(data)
    sc_cluster.put(tmp_path / "src", f"{sc_dir}/f")
    m = mount(sc_cluster, *(["direct_io"] if mode == "direct_io" else []))
    before = sc_cluster.metrics_total()
    with sc_cluster.wire() as wire:
        subprocess.run(["cmp", str(tmp_path / "src"), m.path(f"{sc_dir}/f")], check=True)
        dd = subprocess.run(["dd", f"if={m.path(f'{sc_dir}/f')}", "bs=1M", "skip=2", "count=2", "status=none"],
                            capture_output=True, check=True)
        assert dd.stdout == data[2 * MiB : 4 * MiB]
        _preads(m.path(f"{sc_dir}/f"), data, 300, seed=1)
    after = sc_cluster.metrics_total()
    assert after["BytesRead"] == before["BytesRead"]  # no DataNode streamed a byte
    assert wire.bytes == 0  # and nothing left their xfer ports
    stats = mount_stats(m)
    assert stats["short_circuit_bytes"] >= len(data)  # type: ignore[operator]
    assert stats["short_circuit_fallbacks"] == 0 and stats["checksum_failures"] == 0
    assert stats["dtp_read_ops"] == 0
    # Once per block and DataNode: every replica is local here, and each open may start at another.
    assert 6 <= stats["short_circuit_fd_requests"] <= 6 * 3  # type: ignore[operator]


def test_a_sequential_read_leaves_no_copy_of_the_blocks_in_memory(sc_cluster: MiniDfs, sc_dir: str, mount,  # type: ignore[no-untyped-def]
                                                                    tmp_path: Path) -> None:
    """Large local reads go through an O_DIRECT open of the block file: after `cat` of a file
    through the mount, its bytes are in the mount's pages, not a second time in the replicas'."""
    data = random_bytes(12 * MiB + 777, seed=1701)
    (tmp_path / "src").write_bytes(data)
    sc_cluster.put(tmp_path / "src", f"{sc_dir}/f")
    ids = {f"blk_{b['block_id']}" for b in sc_cluster.blocks(f"{sc_dir}/f")}
    replicas = [p for p in sc_cluster.replica_files() if p.name in ids]
    assert len(replicas) == 3 * len(ids)  # every replica of every block, on this host
    unavailable = page_cache_bypass_unavailable(replicas[0])
    if unavailable is not None:
        pytest.skip(unavailable)
    for replica in replicas:
        drop_pages(replica)
    m = mount(sc_cluster)
    got = subprocess.run(["cat", m.path(f"{sc_dir}/f")], capture_output=True, check=True).stdout
    assert got == data
    resident = sum(sum(resident_pages(p)) for p in replicas)
    pages = -(-len(data) // 4096)
    # Small reads (the kernel's first requests, before readahead grows) may still go through
    # the page cache; the bulk of the file must not.
    assert resident <= pages // 10, f"{resident} of the blocks' {pages} pages were left in memory"
    stats = mount_stats(m)
    assert stats["short_circuit_bytes"] >= len(data) and stats["checksum_failures"] == 0  # type: ignore[operator]
    how = stats["local_disk_reads"]
    if uring.unavailable() is None:  # the reads that waited for the disk went through io_uring, none to a thread
        assert how.get("io_uring", 0) > 0 and how.get("thread", 0) == 0, how  # type: ignore[union-attr]


def test_small_reads_that_wait_for_the_disk_go_through_io_uring(sc_cluster: MiniDfs, sc_dir: str, mount,  # type: ignore[no-untyped-def]
                                                                 tmp_path: Path) -> None:
    """A small local read whose bytes are not in memory waits for the disk through io_uring
    (no worker thread), byte-exact."""
    data = random_bytes(3 * MiB + 99, seed=1702)
    (tmp_path / "src").write_bytes(data)
    sc_cluster.put(tmp_path / "src", f"{sc_dir}/f")
    ids = {f"blk_{b['block_id']}" for b in sc_cluster.blocks(f"{sc_dir}/f")}
    replicas = [p for p in sc_cluster.replica_files() if p.name in ids]
    unavailable = page_cache_bypass_unavailable(replicas[0])
    if unavailable is not None:
        pytest.skip(unavailable)
    m = mount(sc_cluster, "direct_io")
    path = m.path(f"{sc_dir}/f")
    with open(path, "rb") as f:
        assert f.read(10) == data[:10]  # the local files are open now
    how_before = dict(mount_stats(m)["local_disk_reads"])  # type: ignore[call-overload]
    rng = random.Random(3)
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(40):
            for replica in replicas:
                drop_pages(replica)
            off = rng.randrange(len(data) - 4096)
            assert os.pread(fd, 4096, off) == data[off : off + 4096]
    finally:
        os.close(fd)
    how = {k: v - how_before.get(k, 0) for k, v in mount_stats(m)["local_disk_reads"].items()}  # type: ignore[union-attr]
    if uring.unavailable() is None:
        assert how.get("io_uring", 0) >= 1 and how.get("thread", 0) == 0, how
    else:
        assert how.get("thread", 0) >= 1, how
    assert mount_stats(m)["checksum_failures"] == 0


def test_a_replaced_file_under_an_open_fd_gives_old_bytes_or_eio(sc_cluster: MiniDfs, sc_dir: str, mount) -> None:  # type: ignore[no-untyped-def]
    path = f"{sc_dir}/f"
    old = sc_cluster.put_bytes(random_bytes(2 * MiB + 100, seed=1701), path)
    m = mount(sc_cluster, "direct_io", FRESH)
    fd = os.open(m.path(path), os.O_RDONLY)
    try:
        assert os.pread(fd, len(old), 0) == old  # the local files of both blocks are open now
        sc_cluster.delete(path)
        new = sc_cluster.put_bytes(random_bytes(len(old), seed=1702), path)
        assert new != old
        rng = random.Random(3)
        assert os.pread(fd, 4096, 5000) == old[5000:9096]  # the DataNodes still hold the old replicas

        sc_cluster.process_invalidations()  # now they delete them, and clear our slots

        def refused() -> bool:
            off = rng.randrange(len(old) - 4096)
            try:
                got = os.pread(fd, 4096, off)
            except OSError as e:
                assert e.errno == errno.EIO
                return True
            assert got == old[off : off + 4096], "an open fd returned bytes that are not its file's"
            return False

        wait_until(refused, "the open fd kept reading a deleted file")
    finally:
        os.close(fd)
    stats = mount_stats(m)
    assert stats["short_circuit_invalidated"] >= 1  # type: ignore[operator]  # the DataNode cleared the slot
    with open(m.path(path), "rb") as f:  # a new open reads the new file, locally
        assert f.read() == new


def test_an_open_file_truncated_under_it_reads_the_replicas_as_they_are_now(  # type: ignore[no-untyped-def]
        sc_cluster: MiniDfs, sc_dir: str, mount) -> None:
    """A truncate rewrites the last block's tail under a new generation stamp, in the replica's
    own files, which an open fd reads locally. So, as over TCP: the bytes left read as before,
    past the cut is EIO (never the cut-off bytes), and after an append the range reads the new
    bytes."""
    path = f"{sc_dir}/cut"
    old = sc_cluster.put_bytes(random_bytes(3 * MiB // 2, seed=1703), path)  # a whole block and half of one
    wait_fully_replicated(sc_cluster, path)
    m = mount(sc_cluster, "direct_io")
    cut, past, kept = MiB + 100_000, MiB + 200_000, MiB + 4096
    fd = os.open(m.path(path), os.O_RDONLY)
    try:
        before = mount_stats(m)["short_circuit_reads"]
        assert os.pread(fd, len(old), 0) == old  # the local files of both blocks are open now
        assert mount_stats(m)["short_circuit_reads"] > before  # type: ignore[operator]
        sc_cluster.truncate(path, cut)  # inside the second block: it recovers under a new stamp
        with pytest.raises(OSError) as e:
            os.pread(fd, 4096, past)
        assert e.value.errno == errno.EIO
        assert os.pread(fd, 4096, kept) == old[kept : kept + 4096]
        new = old[:cut] + sc_cluster.append_bytes(random_bytes(400_000, seed=1704), path)
        assert os.pread(fd, 4096, past) == new[past : past + 4096]
    finally:
        os.close(fd)
    # Seen as a change, not as a corrupt replica (which would be reported to the NameNode).
    assert "changed under its short-circuit files; reading it over TCP" in m.log_text()
    assert "reported" not in m.log_text()
    with open(m.path(path), "rb") as f:  # a new open reads the file as it is now
        assert f.read() == new


def test_a_corrupt_local_replica_is_caught_reported_and_read_elsewhere(sc_cluster: MiniDfs, sc_dir: str,  # type: ignore[no-untyped-def]
                                                                        mount) -> None:
    path = f"{sc_dir}/f"
    data = sc_cluster.put_bytes(random_bytes(700_000, seed=1703), path)  # one block
    m = mount(sc_cluster, "direct_io")
    fd = os.open(m.path(path), os.O_RDONLY)  # one open: its replica order stays the NameNode's
    try:
        for off in range(0, len(data), 50_000):
            assert os.pread(fd, 4096, off) == data[off : off + 4096]
        served = mount_stats(m)["short_circuit_by_datanode"]
        assert len(served) == 1  # type: ignore[arg-type]
        (first,) = served  # type: ignore[misc]
        sc_cluster.corrupt_replica(path, 0, first, offset=300_000)  # its file, in place: our open fds see it
        assert os.pread(fd, 4096, 299_000) == data[299_000:303_096]
        assert os.pread(fd, len(data), 0) == data
    finally:
        os.close(fd)
    stats = mount_stats(m)
    assert stats["checksum_failures"] == 1
    assert set(stats["short_circuit_by_datanode"]) - {first}  # type: ignore[arg-type]  # another replica, locally
    wait_until(lambda: mount_stats(m)["bad_block_reports"] == 1, "the corrupt replica was never reported")
    assert f"reported corrupt replica(s) of block {sc_cluster.blocks(path)[0]['block_id']} on {first}" in m.log_text()
    wait_until(lambda: sc_cluster.corrupt_replicas(path) == [1], "the NameNode never marked the replica corrupt")


def test_a_datanode_with_short_circuit_off_is_read_over_tcp(fresh_cluster, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(datanodes=1, short_circuit=True)
    (xfer,) = [dn["xfer"] for dn in c.datanodes]
    data = c.put_bytes(random_bytes(3 * MiB + 7, seed=1704), "/f")
    c.set_short_circuit(xfer, False)  # it keeps its socket but refuses fds
    assert os.path.exists(c.domain_sockets[0])
    m = mount(c, "direct_io")
    with c.wire() as wire:  # (the restarted DataNode's own BytesRead is not reported reliably)
        assert Path(m.path("/f")).read_bytes() == data
        _preads(m.path("/f"), data, 50, seed=5)
    assert wire.bytes >= len(data)
    stats = mount_stats(m)
    assert stats["short_circuit_reads"] == 0
    assert stats["short_circuit_fallbacks"] >= 1  # type: ignore[operator]
    assert stats["short_circuit_fd_requests"] == 1  # refused once, remembered
    assert "short-circuit reads failed" in m.log_text() and "File descriptor passing" in m.log_text()


# ----- fake DataNode sockets: what a real DataNode will not do on demand -----------------------------


BLOCK = hdfs_pb2.ExtendedBlockProto(poolId="BP-1", blockId=1, generationStamp=1, numBytes=100)


