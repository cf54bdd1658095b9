"""The daemon lets worker threads back in quickly (its switch interval)."""

from __future__ import annotations

import pytest
import trio
import trio.testing


def test_the_daemon_lets_workers_back_in_quickly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mount's daemon shortens the interpreter's switch interval before it serves, so a
    worker whose pread or check returned waits at most that long for the trio loop's GIL."""
    import sys

    from hdfsfuse import daemon
    from hdfsfuse.conf.hadoop import NameNodeTarget
    from hdfsfuse.conf.mount_options import MountOptions
    from hdfsfuse.local.io_threads import SWITCH_INTERVAL

    class Stop(Exception):
        pass

    def open_target(*args: object, **kwargs: object) -> None:
        raise Stop  # after the process tuning, before any connection

    monkeypatch.setattr(daemon.HdfsClient, "open_target", open_target)
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        with pytest.raises(Stop):
            trio.run(daemon.run_mount, "hdfs://nowhere", NameNodeTarget("nowhere", (("127.0.0.1", 1),), "/"),
                     "/nonexistent", MountOptions(), lambda: None)
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL)
        assert SWITCH_INTERVAL < 0.005
    finally:
        sys.setswitchinterval(before)
