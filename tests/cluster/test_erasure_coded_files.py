"""Erasure-coded files through the real mount, on real clusters whose files the Java client wrote
(so Java computed every parity byte we decode from): RS-3-2 and XOR-2-1 with small custom cells,
RS-6-3 and RS-LEGACY-6-3 with the built-in 1 MiB cells. Healthy reads must be exact on the wire;
degraded reads (stopped DataNodes, a corrupt cell) must decode Hadoop's bytes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import random_bytes, wait_until
from tests.minidfs import ClusterOptions, MiniDfs

KiB, MiB = 1 << 10, 1 << 20
CELL = 64 * KiB
FAST = "connect_timeout=1,read_timeout=2,total_timeout=20,request_timeout=30"


def _put(cluster: MiniDfs, files: dict[str, bytes], path: str, data: bytes, block_size: int) -> None:
    files[path] = cluster.put_bytes(data, path, block_size=block_size)


def _group_holders(cluster: MiniDfs, path: str, group: int = 0) -> dict[str, int]:
    """xfer address -> the internal block index it holds in one group of `path`."""
    return {u["xfer"]: u["index"] for u in cluster.blocks(path)[group]["internal"]}


# ----- RS-3-2 on 5 DataNodes, 64 KiB cells ----------------------------------------------------

@pytest.fixture(scope="module")
def rs32() -> Iterator[tuple[MiniDfs, dict[str, bytes]]]:
    with MiniDfs(ClusterOptions(datanodes=5, block_tokens=True)) as c:
        c.set_ec_policy("/ec", c.add_ec_policy("rs", 3, 2, CELL))
        files: dict[str, bytes] = {}
        group = 3 * 2 * CELL  # 128 KiB internal blocks: two rows per group
        # Two whole groups, then a row, a cell and a half and 123 bytes: a short last stripe
        # whose third unit holds nothing in that row.
        _put(c, files, "/ec/odd", random_bytes(2 * group + 3 * CELL + CELL + CELL // 2 + 123, seed=140), 2 * CELL)
        _put(c, files, "/ec/exact", random_bytes(3 * group, seed=141), 2 * CELL)
        _put(c, files, "/ec/small", random_bytes(100, seed=142), 2 * CELL)  # units 1 and 2 are not stored
        yield c, files


# ----- XOR-2-1 on 3 DataNodes ------------------------------------------------------------------


# ----- RS-6-3 and RS-LEGACY-6-3 on 9 DataNodes, 1 MiB cells ------------------------------------


def test_harness_ec_commands_over_json_lines(rs32) -> None:  # type: ignore[no-untyped-def]
    c, _ = rs32
    again = c.command("add_ec_policy", codec="rs", data=3, parity=2, cell_size=CELL)
    assert again == {"ok": True, "name": "RS-3-2-64k"}  # the same schema and cell: the same policy
    assert c.command("set_ec_policy", path="/ec-builtin", policy="RS-3-2-1024k") == {"ok": True}
    c.put_bytes(random_bytes(MiB + 5, seed=144), "/ec-builtin/f")
    # Each DataNode reports its internal block to the NameNode in the background after the close.
    wait_until(lambda: len(c.command("blocks", path="/ec-builtin/f")["blocks"][0]["internal"]) == 4,
               "every stored internal block reported")
    reply = c.command("blocks", path="/ec-builtin/f")
    assert reply["ec_policy"] == "RS-3-2-1024k"
    (group,) = reply["blocks"]
    assert group["striped"] is True and group["length"] == MiB + 5
    by_index = {u["index"]: u for u in group["internal"]}
    assert sorted(by_index) == [0, 1, 3, 4]  # unit 2 holds nothing: not stored
    assert [by_index[i]["length"] for i in (0, 1, 3, 4)] == [MiB, 5, MiB, MiB]
    assert {by_index[i]["block_id"] - group["block_id"] for i in by_index} == {0, 1, 3, 4}
    stopped = c.command("stop_datanode", path="/ec-builtin/f", block_index=0, internal_index=3)
    try:
        assert stopped["xfer"] == by_index[3]["xfer"]
    finally:
        c.restart_datanode(stopped["xfer"])
    flipped = c.command("corrupt_replica", path="/ec/exact", block_index=1, internal_index=4, offset=0, length=1)
    c.command("corrupt_replica", path="/ec/exact", block_index=1, internal_index=4, offset=0, length=1)  # undo
    assert _group_holders(c, "/ec/exact", 1)[flipped["xfer"]] == 4
    assert flipped["block_id"] == c.blocks("/ec/exact")[1]["block_id"] + 4


