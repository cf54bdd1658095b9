"""The observer harness: an active, a standby and an observer NameNode."""

from __future__ import annotations

from tests.minidfs import MiniDfs

ENTRIES = 10_000


def test_the_harness_has_an_active_a_standby_and_an_observer(observer_cluster: MiniDfs) -> None:
    assert [nn["state"] for nn in observer_cluster.ready["namenodes"]] == ["active", "standby", "observer"]
    assert observer_cluster.ready["observer"] is True


