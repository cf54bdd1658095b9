"""The DataNode block reader against a real MiniDFSCluster: bytes, counts and faults."""

from __future__ import annotations

import random
import tempfile

import pytest
import trio

from hdfsfuse import errors
from hdfsfuse.datanode.connection import Timeouts
from tests.clients import client_for, conf_with
from tests.conftest import random_bytes
from tests.minidfs import MiniDfs

MiB = 1 << 20


async def accounted(cluster: MiniDfs, before: dict[str, int], read_ops: int) -> dict[str, int]:
    """The DataNodes' counters once `read_ops` more reads are accounted. It waits in a thread so
    the client's loop runs meanwhile: a DataNode accounts a read when it gets the read status,
    which the client's pool sends with the socket's next request or once the socket idles."""
    return await trio.to_thread.run_sync(cluster.metrics_after, before, read_ops)


def checksum_bytes(data_len: int, bpc: int = 512) -> int:
    return -(-data_len // bpc) * 4


async def test_random_ranges_match_the_source(cluster: MiniDfs, data_dir: str) -> None:
    size = 3 * MiB + 4321
    data = cluster.put_bytes(random_bytes(size, seed=20), f"{data_dir}/r")
    rnd = random.Random(21)
    cases = [(0, 0), (0, 1), (size - 1, 1), (size, 1), (size + 10, 100), (size - 100, 1000), (0, size),
             (MiB - 1, 2), (MiB - 100, MiB + 200), (2 * MiB - 7, 9), (12345, 4096)]
    cases += [(rnd.randrange(size), rnd.choice([1, 17, 4096, 65536, 300_000])) for _ in range(150)]
    async with client_for(cluster) as client:
        f = await client.open(f"{data_dir}/r")
        assert f.length == size and len(f.blocks) == 4
        for offset, length in cases:
            got = await client.read_range(f, offset, length)
            assert bytes(got) == data[offset : offset + length], (offset, length)
        assert bytes(await client.read_range(f"{data_dir}/r", 5, 10)) == data[5:15]  # by path


@pytest.mark.parametrize(("checksum_type", "bpc"), [("CRC32", 512), ("CRC32C", 1024), ("NULL", 512)])
async def test_other_checksum_settings(fresh_cluster, checksum_type: str, bpc: int) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(datanodes=1, checksum_type=checksum_type, bytes_per_checksum=bpc)
    data = c.put_bytes(random_bytes(MiB + 3000, seed=22), "/x")
    rnd = random.Random(23)
    async with client_for(c) as client:
        f = await client.open("/x")
        for _ in range(60):
            offset = rnd.randrange(len(data))
            length = rnd.choice([1, 100, 1023, 1025, 4096, 70_000])
            assert bytes(await client.read_range(f, offset, length)) == data[offset : offset + length]
        assert bytes(await client.read_range(f, 0, len(data))) == data


async def test_aligned_read_asks_the_datanode_for_exactly_its_bytes(cluster: MiniDfs, data_dir: str) -> None:
    cluster.put_bytes(random_bytes(2 * MiB, seed=24), f"{data_dir}/a")
    async with client_for(cluster) as client:
        f = await client.open(f"{data_dir}/a")
        for offset in (0, 8192, MiB + 4096 * 7):
            before = cluster.metrics_total()
            await client.read_range(f, offset, 4096)
            after = await accounted(cluster, before, 1)
            # Hadoop 3.5's BytesRead counts the data plus its checksums (8 x 4 bytes here).
            assert after["BytesRead"] - before["BytesRead"] == 4096 + checksum_bytes(4096)
            assert after["ReadBlockOpNumOps"] - before["ReadBlockOpNumOps"] == 1


async def test_unaligned_read_adds_at_most_the_chunk_alignment(cluster: MiniDfs, data_dir: str) -> None:
    cluster.put_bytes(random_bytes(MiB, seed=25), f"{data_dir}/u")
    rnd = random.Random(26)
    async with client_for(cluster) as client:
        f = await client.open(f"{data_dir}/u")
        for _ in range(20):
            length = rnd.choice([1, 100, 4096, 5000])
            offset = rnd.randrange(MiB - length)
            before = cluster.metrics_total()
            await client.read_range(f, offset, length)
            grew = (await accounted(cluster, before, 1))["BytesRead"] - before["BytesRead"]
            data_bytes = length + 2 * 511
            assert length < grew <= data_bytes + checksum_bytes(data_bytes) + 4


async def test_small_reads_reuse_connections(cluster: MiniDfs, data_dir: str) -> None:
    data = cluster.put_bytes(random_bytes(MiB, seed=27), f"{data_dir}/reuse")
    rnd = random.Random(28)
    async with client_for(cluster) as client:
        f = await client.open(f"{data_dir}/reuse")
        before = cluster.metrics_total()
        for _ in range(1000):
            offset = rnd.randrange(MiB - 4096)
            assert bytes(await client.read_range(f, offset, 4096)) == data[offset : offset + 4096]
        after = await accounted(cluster, before, 1000)
        await trio.sleep(0.5)  # nothing more may arrive: exactly one op per read
        assert cluster.metrics_total()["ReadBlockOpNumOps"] - before["ReadBlockOpNumOps"] == 1000
        assert after["ReadBlockOpNumOps"] - before["ReadBlockOpNumOps"] == 1000
        assert client.stats.dn_connects <= 3
        assert client.stats.dn_reuses >= 997
        assert client.stats.dtp_read_ops == 1000


async def test_concurrent_multi_block_read(cluster: MiniDfs, data_dir: str) -> None:
    data = cluster.put_bytes(random_bytes(5 * MiB, seed=29), f"{data_dir}/m")
    async with client_for(cluster) as client:
        f = await client.open(f"{data_dir}/m")
        results: dict[int, bytes] = {}

        async def read(i: int) -> None:
            results[i] = bytes(await client.read_range(f, i * 700_000, 1_500_000))

        async with trio.open_nursery() as n:
            for i in range(6):
                n.start_soon(read, i)
        for i in range(6):
            assert results[i] == data[i * 700_000 : i * 700_000 + 1_500_000]


async def test_a_read_across_blocks_hedged_at_once_lands_every_byte_in_place(cluster: MiniDfs, data_dir: str) -> None:
    """Each block's bytes go straight into the read's one buffer; with a threshold of 0 every
    piece is read from two replicas at once, both writing their verified bytes into it."""
    size = 4 * MiB + 777
    data = cluster.put_bytes(random_bytes(size, seed=31), f"{data_dir}/hedged")
    rnd = random.Random(32)
    async with client_for(cluster, hedge_after=0.0) as client:
        f = await client.open(f"{data_dir}/hedged")
        cases = [(0, size), (MiB - 3, 2 * MiB + 6), (100, 3 * MiB)]
        cases += [(rnd.randrange(MiB), rnd.randrange(MiB + 1, 3 * MiB)) for _ in range(12)]
        for offset, length in cases:
            assert bytes(await client.read_range(f, offset, length)) == data[offset : offset + length], (offset, length)
        assert client.stats.hedged_reads > 0


async def test_corrupt_replica_is_skipped_and_reported(fresh_cluster) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(datanodes=3)
    data = c.put_bytes(random_bytes(2 * MiB, seed=30), "/c")
    async with client_for(c) as client:
        f = await client.open("/c")
        first = f"{f.blocks[1].locs[0].id.ipAddr}:{f.blocks[1].locs[0].id.xferPort}"
        c.corrupt_replica("/c", 1, first, offset=70_000, length=3)
        assert bytes(await client.read_range(f, MiB + 69_000, 4000)) == data[MiB + 69_000 : MiB + 73_000]
        assert client.stats.checksum_failures == 1
        with trio.fail_after(30):
            while client.stats.bad_block_reports == 0:
                await trio.sleep(0.05)
    reported = await trio.to_thread.run_sync(c.corrupt_replicas, "/c")
    assert reported == [0, 1]


async def test_stopped_datanode_fails_over(fresh_cluster) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(datanodes=3)
    data = c.put_bytes(random_bytes(MiB, seed=31), "/s")
    async with client_for(c) as client:
        f = await client.open("/s")
        assert bytes(await client.read_range(f, 0, 100)) == data[:100]
        first = f"{f.blocks[0].locs[0].id.ipAddr}:{f.blocks[0].locs[0].id.xferPort}"
        await trio.to_thread.run_sync(c.stop_datanode, first)
        assert bytes(await client.read_range(f, 5000, 50_000)) == data[5000:55_000]
        assert client.stats.replica_failovers >= 1
        # The failed node is remembered: the next read goes straight to a live replica.
        failovers = client.stats.replica_failovers
        assert bytes(await client.read_range(f, 9000, 10)) == data[9000:9010]
        assert client.stats.replica_failovers == failovers


async def test_every_replica_gone_is_a_clear_error(fresh_cluster) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(datanodes=1)
    c.put_bytes(random_bytes(10_000, seed=32), "/gone")
    async with client_for(c, timeouts=Timeouts(connect=1, read=2, total=10)) as client:
        f = await client.open("/gone")
        await trio.to_thread.run_sync(c.stop_datanode, c.datanodes[0]["xfer"])
        with pytest.raises(errors.BlockUnavailable, match=r"/gone.*block \d+") as e:
            await client.read_range(f, 0, 100)
        assert errors.to_errno(e.value) == 5


async def test_file_under_construction_reads_visible_bytes(cluster: MiniDfs, data_dir: str) -> None:
    path = f"{data_dir}/uc"
    part1 = random_bytes(MiB + 5000, seed=33)
    part2 = random_bytes(3000, seed=34)
    with tempfile.NamedTemporaryFile() as t1, tempfile.NamedTemporaryFile() as t2:
        t1.write(part1)
        t1.flush()
        t2.write(part2)
        t2.flush()
        cluster.append_open(path, t1.name)
        try:
            async with client_for(cluster) as client:
                f = await client.open(path)
                assert f.under_construction and f.length == len(part1)
                assert bytes(await client.read_range(f, 0, f.length)) == part1
                assert bytes(await client.read_range(f, len(part1) - 1000, 5000)) == part1[-1000:]  # tail
                cluster.append_open(path, t2.name)
                await client.refresh(f)
                assert f.length == len(part1) + len(part2)
                assert bytes(await client.read_range(f, MiB, 10_000)) == (part1 + part2)[MiB : MiB + 10_000]
        finally:
            cluster.append_close(path)
    async with client_for(cluster) as client:
        f = await client.open(path)
        assert not f.under_construction and f.length == len(part1) + len(part2)


async def test_block_tokens_are_forwarded_and_refreshed(fresh_cluster) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(datanodes=1, block_tokens=True)
    data = c.put_bytes(random_bytes(100_000, seed=35), "/tok")
    async with client_for(c) as client:
        f = await client.open("/tok")
        assert f.blocks[0].blockToken.identifier  # a real token
        assert bytes(await client.read_range(f, 10, 1000)) == data[10:1010]
        # A token the DataNode refuses (ERROR_ACCESS_TOKEN) is replaced by a fresh one.
        f.blocks[0].blockToken.password = b"forged" * 4
        f.forget_plans()
        locates = client.namenode.calls["getBlockLocations"]
        assert bytes(await client.read_range(f, 500, 600)) == data[500:1100]
        assert client.stats.token_refreshes == 1
        assert client.namenode.calls["getBlockLocations"] == locates + 1
        assert f.blocks[0].blockToken.password != b"forged" * 4


async def test_no_datanode_sasl_on_a_simple_cluster(cluster: MiniDfs, data_dir: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """As in Java, dfs.data.transfer.protection means nothing while security is off: no handshake
    (a DataNode without SASL would take the magic for a bad op and hang up)."""
    cluster.put_bytes(b"x" * 100, f"{data_dir}/p")
    conf = conf_with(cluster, tmp_path, "dfs.data.transfer.protection", "integrity")
    async with client_for(cluster, conf_dir=conf) as client:
        f = await client.open(f"{data_dir}/p")
        assert bytes(await client.read_range(f, 0, 100)) == b"x" * 100
        assert f.dn_security is None and not client.stats.dn_sasl


async def test_datanodes_reached_by_hostname_when_configured(fresh_cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """dfs.client.use.datanode.hostname: connect to the name a DataNode registered, not its IP."""
    c: MiniDfs = fresh_cluster(datanodes=1, datanode_hostname="localhost")
    data = c.put_bytes(random_bytes(10_000, seed=36), "/named")
    conf = conf_with(c, tmp_path, "dfs.client.use.datanode.hostname", "true")
    for conf_dir, host in ((conf, "localhost"), (c.conf_dir, "127.0.0.1")):
        async with client_for(c, conf_dir=conf_dir) as client:
            f = await client.open("/named")
            assert f.blocks[0].locs[0].id.hostName == "localhost" and f.blocks[0].locs[0].id.ipAddr == "127.0.0.1"
            assert bytes(await client.read_range(f, 100, 5000)) == data[100:5100]
            assert [a.rsplit(":", 1)[0] for a in client.context.pool._idle] == [host]


