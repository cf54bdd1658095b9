"""Observer reads through the real mount, on a real HA cluster with an observer NameNode (the
harness's --observer): metadata and block locations come from the observer, carrying the
client's state id, and reads fall back to the active when the observer cannot serve."""

from __future__ import annotations

import json
import os
import subprocess

from tests.conftest import random_bytes
from tests.minidfs import MiniDfs

ENTRIES = 10_000


def _counts(cluster: MiniDfs) -> dict[str, dict[str, int]]:
    return {nn["state"]: nn for nn in cluster.command("nn_rpc_counts")["namenodes"]}


def _roles(mount) -> dict[str, int]:  # type: ignore[no-untyped-def]
    return dict(json.loads(os.getxattr(mount.dir, "user.hdfsfuse.stats"))["namenode_rpcs_by_role"])


def test_ls_of_a_big_directory_asks_only_the_observer(observer_cluster: MiniDfs, mount) -> None:  # type: ignore[no-untyped-def]
    c = observer_cluster
    c.touch_many("/big", ENTRIES)  # empty files: no block to write
    data = c.put_bytes(random_bytes(3 << 20, seed=200), "/f")
    m = mount(c, "entry_timeout=0,attr_timeout=0")
    before = _counts(c)
    out = subprocess.run(["ls", "-l", m.path("/big")], capture_output=True, text=True, check=True).stdout
    assert len(out.splitlines()) == ENTRIES + 1  # "total" and one line per entry
    with open(m.path("/f"), "rb") as f:
        assert f.read() == data
    after = _counts(c)
    assert after["active"]["GetListing"] == before["active"]["GetListing"]  # not one listing on the active
    assert after["observer"]["GetListing"] - before["observer"]["GetListing"] >= ENTRIES // 1000
    assert after["active"]["GetBlockLocations"] == before["active"]["GetBlockLocations"]
    assert after["observer"]["GetBlockLocations"] > before["observer"]["GetBlockLocations"]
    roles = _roles(m)
    assert roles["observer"] >= ENTRIES // 1000 and roles.get("active", 0) <= 2  # msync, and nothing else


def test_a_new_file_is_seen_at_once_through_the_observer(observer_cluster: MiniDfs, mount) -> None:  # type: ignore[no-untyped-def]
    c = observer_cluster
    m = mount(c, "entry_timeout=0,attr_timeout=0,negative_timeout=0")
    for i in range(5):  # written on the active; read at once: the observer waits for that state
        data = c.put_bytes(random_bytes(1000 + i, seed=201 + i), f"/new-{i}")
        with open(m.path(f"/new-{i}"), "rb") as f:
            assert f.read() == data
    assert _roles(m)["observer"] > 0


def test_reads_fall_back_to_the_active_when_the_observer_stops_observing(observer_cluster: MiniDfs, mount) -> None:  # type: ignore[no-untyped-def]
    c = observer_cluster
    data = c.put_bytes(random_bytes(5000, seed=210), "/fallback")
    m = mount(c, "entry_timeout=0,attr_timeout=0")
    with open(m.path("/fallback"), "rb") as f:
        assert f.read() == data
    assert c.command("transition", index=2, state="standby")["state"] == "standby"
    try:
        before = _roles(m).get("active", 0)
        for _ in range(3):
            with open(m.path("/fallback"), "rb") as f:
                assert f.read() == data
        assert _roles(m)["active"] > before  # the standby refused; the active answered
    finally:
        assert c.command("transition", index=2, state="observer")["state"] == "observer"


def test_an_open_sees_an_append_the_observer_has_not_applied_yet(fresh_cluster, mount, tmp_path) -> None:  # type: ignore[no-untyped-def]
    c: MiniDfs = fresh_cluster(observer=True, observer_tail_period="3s", datanodes=1, replication=1)
    first = c.put_bytes(random_bytes(1000, seed=220), "/grows")
    m = mount(c, "direct_io,entry_timeout=0,attr_timeout=0")
    with open(m.path("/grows"), "rb") as f:
        assert f.read() == first
    more = random_bytes(500, seed=221)
    (tmp_path / "more").write_bytes(more)
    c.append_open("/grows", tmp_path / "more")
    c.append_close("/grows")  # on the active; the observer applies it only at its next tail (3 s)
    with open(m.path("/grows"), "rb") as f:  # the open msyncs: the observer waits for that state
        assert f.read() == first + more
