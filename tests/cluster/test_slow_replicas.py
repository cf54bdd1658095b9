"""Slow replicas on a real cluster: one DataNode rate-limited with tc on its port.

A replica that trickles is left for another (a minimum rate once bytes flow), and hedged reads
ask a second replica when the first is slow; the first answer wins, the loser is cancelled and
its connection closed, never pooled half-read.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import trio

from hdfsfuse.client import ClientOptions, HdfsClient
from hdfsfuse.datanode.connection import Timeouts
from hdfsfuse.datanode.context import xfer_address
from hdfsfuse.datanode.replicas import SLOW_FACTOR
from tests.conftest import random_bytes
from tests.minidfs import MiniDfs, slow_port

MiB = 1 << 20


async def test_hedged_reads_route_around_a_slow_datanode(fresh_cluster: Callable[..., MiniDfs]) -> None:
    c = fresh_cluster(datanodes=3)
    data = c.put_bytes(random_bytes(2 * MiB, seed=170), "/hedge")
    options = ClientOptions()  # the default: adaptive hedging
    async with HdfsClient.connect(c.uri, conf_dir=c.conf_dir, options=options) as client:
        f = await client.open("/hedge")
        for off in range(0, 2 * MiB, 256 * 1024):  # learn every DataNode's healthy latency
            assert bytes(await client.read_range(f, off, 4096)) == data[off : off + 4096]
        plan = f.block_plan(0, client.context)
        first = client.context.replicas.order(plan.replicas, set(), trio.current_time())[0][0]  # read first now
        port = int(first.rsplit(":", 1)[1])
        rnd = random.Random(171)
        with slow_port(port, "40kbit"):
            before = c.metrics()[f"127.0.0.1:{port}"]["ReadBlockOpNumOps"]
            for _ in range(40):
                off = rnd.randrange(0, MiB - 4096)  # block 0, whose first replica is the slow one
                assert bytes(await client.read_range(f, off, 4096)) == data[off : off + 4096]
            slow_ops = c.metrics()[f"127.0.0.1:{port}"]["ReadBlockOpNumOps"] - before
        assert client.stats.hedged_reads >= 1 and client.stats.hedge_wins >= 1
        assert client.stats.hedged_reads <= 5  # once measured slow, it is read after the others
        assert slow_ops <= 5
        latencies = client.context.replicas.snapshot()
        assert latencies[first] > SLOW_FACTOR * min(latencies.values())


async def test_a_trickling_replica_is_left_for_another(fresh_cluster: Callable[..., MiniDfs]) -> None:
    c = fresh_cluster(datanodes=2)
    data = c.put_bytes(random_bytes(MiB, seed=172), "/trickle")
    options = ClientOptions(hedge_after=None, timeouts=Timeouts(read=10, min_rate=64 * 1024, rate_grace=0.5))
    async with HdfsClient.connect(c.uri, conf_dir=c.conf_dir, options=options) as client:
        f = await client.open("/trickle")
        port = int(xfer_address(f.blocks[0].locs[0]).rsplit(":", 1)[1])
        with slow_port(port, "16kbit"):
            assert bytes(await client.read_range(f, 1000, 64 * 1024)) == data[1000 : 1000 + 64 * 1024]
        assert client.stats.replica_failovers == 1
        assert len(client.context.pool) >= 1  # the good replica's connection went back to the pool
