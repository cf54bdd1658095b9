"""Live invalidation (-o inotify) through the real mount: another client's changes show at once."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest

from hdfsfuse.proto import hdfs_pb2
from tests.conftest import random_bytes, wait_until
from tests.minidfs import MiniDfs
from tests.mounting import Mount

E = hdfs_pb2
LONG = "entry_timeout=3600,attr_timeout=3600,negative_timeout=3600"


# ----- through the mount ------------------------------------------------------------------------------


def _stats(m: Mount) -> dict[str, object]:
    return json.loads(os.getxattr(m.dir, "user.hdfsfuse.stats"))


def test_changes_show_through_hour_long_caches(cluster: MiniDfs, data_dir: str, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    first = cluster.put_bytes(random_bytes(50_000, seed=1800), f"{data_dir}/f")
    cluster.put_bytes(b"old", f"{data_dir}/moved")
    live = mount(cluster, "inotify", LONG)
    stale = mount(cluster, LONG)  # the control: the same caches, no edit stream
    for m in (live, stale):
        assert os.stat(m.path(f"{data_dir}/f")).st_size == len(first)
        assert Path(m.path(f"{data_dir}/f")).read_bytes() == first  # pages cached too
        assert not os.path.exists(m.path(f"{data_dir}/new"))  # a cached absence
        assert os.stat(m.path(f"{data_dir}/moved")).st_size == 3

    extra = random_bytes(7_000, seed=1801)
    (tmp_path / "extra").write_bytes(extra)
    cluster.append_open(f"{data_dir}/f", tmp_path / "extra")
    cluster.append_close(f"{data_dir}/f")
    cluster.put_bytes(b"hello", f"{data_dir}/new")
    cluster.rename(f"{data_dir}/moved", f"{data_dir}/there")
    cluster.chmod(f"{data_dir}/new", "600")

    wait_until(lambda: os.stat(live.path(f"{data_dir}/f")).st_size == len(first) + len(extra),
               "an append never showed")
    assert Path(live.path(f"{data_dir}/f")).read_bytes() == first + extra  # no stale page either
    wait_until(lambda: os.path.exists(live.path(f"{data_dir}/new")), "a created file never showed")
    wait_until(lambda: stat.S_IMODE(os.stat(live.path(f"{data_dir}/new")).st_mode) == 0o600,
               "a chmod never showed")
    wait_until(lambda: not os.path.exists(live.path(f"{data_dir}/moved")), "a renamed file stayed")
    assert os.stat(live.path(f"{data_dir}/there")).st_size == 3
    assert _stats(live)["inotify_changes"] >= 5  # type: ignore[operator]

    # Without the stream the hour-long caches still answer with what they saw.
    assert os.stat(stale.path(f"{data_dir}/f")).st_size == len(first)
    assert not os.path.exists(stale.path(f"{data_dir}/new"))
    assert os.path.exists(stale.path(f"{data_dir}/moved"))

    cluster.delete(f"{data_dir}/there")
    wait_until(lambda: not os.path.exists(live.path(f"{data_dir}/there")), "a deleted file stayed")


def test_a_user_the_namenode_refuses_falls_back_to_the_timeouts(perm_cluster: MiniDfs, mount) -> None:  # type: ignore[no-untyped-def]
    perm_cluster.mkdir("/inotify-open", mode="777")
    data = perm_cluster.put_bytes(b"x" * 100, "/inotify-open/f")
    m = mount(perm_cluster, "inotify", "user=alice", "attr_timeout=0")
    assert Path(m.path("/inotify-open/f")).read_bytes() == data
    log = m.log_text()
    assert "will not stream its edits" in log and "entry_timeout/attr_timeout" in log
    assert _stats(m)["inotify_changes"] == 0
    with pytest.raises(OSError) as e:
        os.stat(m.path("/inotify-open/missing"))
    assert e.value.errno == errno.ENOENT
