"""Short-circuit local reads through the library on a real --short-circuit cluster: block tokens on
the domain socket, blocks being written, refused and untrusted sockets, appends under open local
files, and the bound on cached files and slots."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio
import trio.testing

from hdfsfuse.local.short_circuit import ShortCircuitReads
from hdfsfuse.proto import hdfs_pb2
from tests.clients import client_for, conf_with
from tests.conftest import random_bytes, wait_fully_replicated
from tests.minidfs import MiniDfs, short_circuit_unavailable

MiB = 1 << 20
FRESH = "entry_timeout=0,attr_timeout=0,negative_timeout=0"
UNAVAILABLE = short_circuit_unavailable()
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"short-circuit cluster: {UNAVAILABLE}")


async def test_block_tokens_are_enforced_on_the_domain_socket(sc_cluster: MiniDfs, sc_dir: str) -> None:
    data = sc_cluster.put_bytes(random_bytes(300_000, seed=1705), f"{sc_dir}/t")
    before = sc_cluster.metrics_total()
    async with client_for(sc_cluster) as client:
        f = await client.open(f"{sc_dir}/t")
        assert f.blocks[0].blockToken.identifier
        f.blocks[0].blockToken.password = b"forged" * 4  # the DataNode must refuse it...
        f.forget_plans()
        assert bytes(await client.read_range(f, 1000, 5000)) == data[1000:6000]
        assert client.stats.token_refreshes == 1  # ...and the client fetches a real one
        assert client.stats.short_circuit_fd_requests == 2
        assert client.stats.short_circuit_reads == 1 and client.stats.short_circuit_fallbacks == 0
    assert sc_cluster.metrics_total()["BytesRead"] == before["BytesRead"]


async def test_a_block_being_written_is_read_over_tcp(sc_cluster: MiniDfs, sc_dir: str, tmp_path: Path) -> None:
    path = f"{sc_dir}/w"
    first = sc_cluster.put_bytes(random_bytes(MiB + 1000, seed=1706), path)
    extra = random_bytes(200_000, seed=1707)
    (tmp_path / "extra").write_bytes(extra)
    sc_cluster.append_open(path, tmp_path / "extra")  # hflushed, left open: the last block is being written
    try:
        before = sc_cluster.metrics_total()
        async with client_for(sc_cluster) as client:
            f = await client.open(path)
            assert f.under_construction
            assert bytes(await client.read_range(f, 0, len(first) + len(extra))) == first + extra
            assert client.stats.short_circuit_bytes == MiB  # the finalized first block
        grown = sc_cluster.metrics_total()["BytesRead"] - before["BytesRead"]
        assert len(first) + len(extra) - MiB <= grown < MiB  # the block being written, over TCP
    finally:
        sc_cluster.append_close(path)


async def test_short_circuit_off_and_untrusted_socket_paths_read_over_tcp(sc_cluster: MiniDfs, sc_dir: str,
                                                                         tmp_path: Path) -> None:
    data = sc_cluster.put_bytes(random_bytes(100_000, seed=1708), f"{sc_dir}/o")
    async with client_for(sc_cluster, short_circuit=False) as client:
        assert client.short_circuit is None
        assert bytes(await client.read_range(f"{sc_dir}/o", 0, len(data))) == data
        assert client.stats.short_circuit_reads == 0 and client.stats.dtp_read_ops == 1
    # The same sockets, reached through a world-writable directory (/tmp): anyone could have
    # put a fake DataNode there, so the client will not take file descriptors from it.
    link = tmp_path / "sockets"
    link.symlink_to(Path(sc_cluster.domain_sockets[0]).parent)
    conf = conf_with(sc_cluster, tmp_path, "dfs.domain.socket.path", f"{link}/dn._PORT")
    async with client_for(sc_cluster, conf_dir=conf) as client:
        assert bytes(await client.read_range(f"{sc_dir}/o", 0, len(data))) == data
        assert client.stats.short_circuit_reads == 0 and client.stats.short_circuit_fd_requests == 0
        assert client.stats.dtp_read_ops == 1


# ----- fake DataNode sockets: what a real DataNode will not do on demand -----------------------------


BLOCK = hdfs_pb2.ExtendedBlockProto(poolId="BP-1", blockId=1, generationStamp=1, numBytes=100)


async def test_an_append_under_open_local_files_reads_the_old_range_exactly(sc_cluster: MiniDfs, sc_dir: str,
                                                                          tmp_path: Path) -> None:
    """An append reopens the finalized replica in place (same inode, new generation stamp) and
    rewrites its last partial chunk's CRC: the open files change under us, but no byte the
    handle may read changes, so the read goes over TCP rather than calling the replica corrupt."""
    path = f"{sc_dir}/a"
    data = sc_cluster.put_bytes(random_bytes(300_001, seed=1709), path)  # ends in a partial chunk
    extra = random_bytes(5000, seed=1710)
    (tmp_path / "extra").write_bytes(extra)
    async with client_for(sc_cluster) as client:
        f = await client.open(path)
        assert bytes(await client.read_range(f, 0, len(data))) == data
        sc_cluster.append_open(path, tmp_path / "extra")
        sc_cluster.append_close(path)
        assert bytes(await client.read_range(f, 299_000, 1001)) == data[299_000:]  # the last, rewritten chunk
        assert client.stats.checksum_failures == 0 and client.stats.bad_block_reports == 0
        assert client.stats.short_circuit_invalidated == 1
        g = await client.open(path)
        assert bytes(await client.read_range(g, 0, len(data) + len(extra))) == data + extra
    assert sc_cluster.corrupt_replicas(path) == [0]


async def test_each_replica_has_its_own_local_files(sc_cluster: MiniDfs, sc_dir: str) -> None:
    """Replicas hold the same bytes, but a corrupt one must be blamed on its own DataNode: files
    passed by one DataNode never stand in for a read asked of another."""
    data = sc_cluster.put_bytes(random_bytes(20_000, seed=1711), f"{sc_dir}/r")
    wait_fully_replicated(sc_cluster, f"{sc_dir}/r")
    async with client_for(sc_cluster) as client:
        f = await client.open(f"{sc_dir}/r")
        block = f.blocks[0]
        assert client.short_circuit is not None and len(block.locs) == 3
        for loc in [*block.locs, block.locs[0]]:
            got = await client.short_circuit.read(loc, block.b, block.blockToken, 100, 1000, "blk")
            assert got == data[100:1100]
        assert client.stats.short_circuit_fd_requests == 3
        assert sorted(client.stats.short_circuit_by_datanode.values()) == [1, 1, 2]


async def test_cached_files_stay_within_their_bound_and_slots_go_back(sc_cluster: MiniDfs, sc_dir: str) -> None:
    data = sc_cluster.put_bytes(random_bytes(5 * MiB, seed=1712), f"{sc_dir}/b", replication=1)
    async with client_for(sc_cluster) as client:
        f = await client.open(f"{sc_dir}/b")
        async with trio.open_nursery() as nursery:
            reads = ShortCircuitReads(client.settings.domain_socket_path, client.client_name,
                                      timeout=5, stats=client.stats, nursery=nursery, capacity=2)

            def open_block_files() -> int:
                links = []
                for fd in os.listdir("/proc/self/fd"):
                    try:
                        links.append(os.readlink(f"/proc/self/fd/{fd}"))
                    except OSError:
                        continue
                return sum(os.path.basename(link).startswith("blk_") for link in links)

            for _ in range(3):
                for block in f.blocks:
                    got = await reads.read(block.locs[0], block.b, block.blockToken, 7, 4096, "blk")
                    assert got == data[block.offset + 7 : block.offset + 4103]
            assert client.stats.short_circuit_open_blocks == 2
            assert open_block_files() == 2 * 2  # two blocks, each its block file and meta file
            segments = [s for dn in reads._datanodes.values() if not isinstance(dn, float) for s in dn.segments]
            slots = sum(len(s.memory) // 64 for s in segments)
            # Every dropped block's slot comes back once the DataNode has released it (op 88).
            wait_until_async = trio.current_time() + 10
            while sum(len(s.free) for s in segments) != slots - 2:
                assert trio.current_time() < wait_until_async, "released slots never came back"
                await trio.sleep(0.05)
            assert client.stats.short_circuit_fd_requests == 15  # 5 blocks, dropped and asked again each round
            reads.close()
            nursery.cancel_scope.cancel()


