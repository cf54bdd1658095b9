"""The harness's erasure-coding commands over JSON lines."""

from __future__ import annotations

from tests.conftest import group_holders, random_bytes, wait_until

KiB, MiB = 1 << 10, 1 << 20
CELL = 64 * KiB
FAST = "connect_timeout=1,read_timeout=2,total_timeout=20,request_timeout=30"


# ----- RS-3-2 on 5 DataNodes, 64 KiB cells ----------------------------------------------------


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
    assert group_holders(c, "/ec/exact", 1)[flipped["xfer"]] == 4
    assert flipped["block_id"] == c.blocks("/ec/exact")[1]["block_id"] + 4


