"""Observer reads through the real mount, on a real HA cluster with an observer NameNode (the
harness's --observer): metadata and block locations come from the observer, carrying the
client's state id, and reads fall back to the active when the observer cannot serve."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.minidfs import ClusterOptions, MiniDfs

ENTRIES = 10_000


@pytest.fixture(scope="module")
def observer_cluster() -> Iterator[MiniDfs]:
    with MiniDfs(ClusterOptions(observer=True, datanodes=2, replication=2)) as c:
        yield c


def _counts(cluster: MiniDfs) -> dict[str, dict[str, int]]:
    return {nn["state"]: nn for nn in cluster.command("nn_rpc_counts")["namenodes"]}


def test_the_harness_has_an_active_a_standby_and_an_observer(observer_cluster: MiniDfs) -> None:
    assert [nn["state"] for nn in observer_cluster.ready["namenodes"]] == ["active", "standby", "observer"]
    assert observer_cluster.ready["observer"] is True


