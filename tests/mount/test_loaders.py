"""Training-data loaders through the real mount: listings that carry what opens need, locations
kept across opens, the rules that keep them from ever serving another file's bytes, and many
worker processes on one mount."""

from __future__ import annotations

import collections
import errno
import json
import multiprocessing
import os
import random
import time
from pathlib import Path

import pytest

from tests.conftest import random_bytes, wait_until
from tests.minidfs import MiniDfs
from tests.mounting import Mount

SHORT = "entry_timeout=2,attr_timeout=2"  # the caches' lifetime, short enough to outlive in a test


def _stats(m: Mount) -> dict[str, object]:
    return json.loads(os.getxattr(m.dir, "user.hdfsfuse.stats"))


def _forget_kernel_caches() -> None:
    """Drop the kernel's dentries, inodes and pages (what a loader's next epoch meets)."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def _expected(rel: str) -> bytes:
    return bytes([int(rel.rsplit("-", 1)[1]) % 256]) * 2048  # touch_many: file i holds byte i


def _scan(m: Mount, dirs: list[str]) -> int:
    n = 0
    for d in dirs:
        for name in os.listdir(m.path(f"/{d}")):
            os.stat(m.path(f"/{d}/{name}"))
            n += 1
    return n


def _epoch(m: Mount, rels: list[str], seed: int) -> None:
    order = list(rels)
    random.Random(seed).shuffle(order)
    for rel in order:
        assert Path(m.path(f"/{rel}")).read_bytes() == _expected(rel), rel


def _calls(cluster: MiniDfs, before: collections.Counter[str]) -> dict[str, int]:
    after = cluster.rpc_counts()
    return {k: after[k] - before[k] for k in after if after[k] - before[k]}


@pytest.fixture(scope="module")
def data_set(cluster: MiniDfs) -> tuple[str, list[str]]:
    """4 directories of 100 small files (ImageFolder's shape), written by the Java client an hour
    ago (an open trusts kept statuses only of files that had not changed for a minute)."""
    root = "/t/loaders/set"
    cluster.delete("/t/loaders")
    rels = [f"c{d}/img-{i:05d}" for d in range(4) for i in range(100)]
    an_hour_ago = int((time.time() - 3600) * 1000)
    for d in range(4):
        cluster.touch_many(f"{root}/c{d}", 100, size=2048, prefix="img-", mtime=an_hour_ago)
    return root, rels


def test_epochs_after_a_listing_ask_the_namenode_almost_nothing(cluster: MiniDfs, mount, data_set) -> None:  # type: ignore[no-untyped-def]
    root, rels = data_set
    m = mount(cluster, root=root)
    before = cluster.rpc_counts()
    assert _scan(m, [f"c{d}" for d in range(4)]) == len(rels)
    scan = _calls(cluster, before)
    # A page per directory, and finding the directories: two lookups, then one window of the root
    assert sum(scan.values()) <= 4 + 3, scan

    for seed in (1, 2):  # an epoch after the listing, then a second one
        _forget_kernel_caches()
        before = cluster.rpc_counts()
        _epoch(m, rels, seed)
        calls = _calls(cluster, before)
        assert sum(calls.values()) <= 0.05 * len(rels), calls
        assert not calls.get("GetFileInfo") and not calls.get("GetFileLinkInfo"), calls
    stats = _stats(m)
    assert stats["kept_names"] >= len(rels) and stats["kept_locations"] >= len(rels)  # type: ignore[operator]
    assert stats["open_files"] == 0


def test_an_epoch_with_no_listing_costs_at_most_one_call_per_file(cluster: MiniDfs, mount, data_set) -> None:  # type: ignore[no-untyped-def]
    root, rels = data_set
    m = mount(cluster, root=root)
    _forget_kernel_caches()
    before = cluster.rpc_counts()
    _epoch(m, rels, 3)
    calls = _calls(cluster, before)
    assert sum(calls.values()) <= len(rels), calls
    assert not calls.get("GetFileInfo"), calls  # the lookup's status serves the open


def test_without_kept_metadata_every_file_costs_its_calls(cluster: MiniDfs, mount, data_set) -> None:  # type: ignore[no-untyped-def]
    # The control: metadata_entries=0 turns the kept names and locations off.
    root, rels = data_set
    m = mount(cluster, "metadata_entries=0", root=root)
    _scan(m, [f"c{d}" for d in range(4)])
    _forget_kernel_caches()
    before = cluster.rpc_counts()
    _epoch(m, rels[:50], 4)
    calls = _calls(cluster, before)
    assert calls.get("GetBlockLocations", 0) >= 50 and calls.get("GetFileLinkInfo", 0) >= 50, calls


def test_a_large_directory_scan_costs_a_call_per_page(cluster: MiniDfs, mount, data_dir: str) -> None:  # type: ignore[no-untyped-def]
    for d in range(2):
        cluster.touch_many(f"{data_dir}/d{d}", 1500)
    m = mount(cluster, root=data_dir)
    before = cluster.rpc_counts()
    assert _scan(m, ["d0", "d1"]) == 3000
    calls = _calls(cluster, before)
    # 3000 entries: 3 pages of 1000 (2 per directory), plus one call per directory
    assert sum(calls.values()) <= 3000 // 1000 + 2 + 2, calls


# ----- the cache rules: never another file's bytes -------------------------------------------------


def _read(path: str) -> bytes | OSError:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        return e


@pytest.fixture
def kept(cluster: MiniDfs, mount, data_dir: str):  # type: ignore[no-untyped-def]
    """A listed directory of settled files (written an hour ago, by their mtimes) that were all
    read once (their locations kept), mounted with 2-second caches. Returns (mount, {name: content})."""
    contents = {f"f{i}": random_bytes(40_000 + 1000 * i, seed=4800 + i) for i in range(6)}
    for name, data in contents.items():
        cluster.put_bytes(data, f"{data_dir}/{name}")
        cluster.age(f"{data_dir}/{name}")
    m = mount(cluster, SHORT, root=data_dir)
    assert sorted(os.listdir(m.dir)) == sorted(contents)
    for name, data in contents.items():
        assert Path(m.path(f"/{name}")).read_bytes() == data
    assert _stats(m)["kept_locations"] >= len(contents)  # type: ignore[operator]
    return m, contents


def _others_intact(m: Mount, contents: dict[str, bytes], changed: str) -> None:
    for name, data in contents.items():
        if name != changed:
            assert Path(m.path(f"/{name}")).read_bytes() == data, name


def test_expired_names_of_kept_files_are_renewed_without_locations(cluster: MiniDfs, kept) -> None:  # type: ignore[no-untyped-def]
    m, contents = kept
    time.sleep(2.5)  # the names expire (entry_timeout=2); the files' locations stay kept
    _forget_kernel_caches()
    stats0, before = _stats(m), cluster.rpc_counts()
    for name, data in contents.items():
        assert Path(m.path(f"/{name}")).read_bytes() == data, name
    stats, calls = _stats(m), _calls(cluster, before)
    assert calls == {"GetListing": 1}, calls  # one plain page renews every name; opens use the kept locations
    assert stats["name_windows"] == stats0["name_windows"] + 1  # type: ignore[operator]
    assert stats["located_windows"] == stats0["located_windows"]


def test_a_replaced_file_is_never_read_as_another(cluster: MiniDfs, kept, data_dir: str) -> None:  # type: ignore[no-untyped-def]
    m, contents = kept
    new = random_bytes(55_555, seed=4900)
    cluster.delete(f"{data_dir}/f1")
    cluster.put_bytes(new, f"{data_dir}/f1")
    cluster.process_invalidations()  # the DataNodes drop the old file's blocks
    _forget_kernel_caches()
    got = _read(m.path("/f1"))  # within the caches' lifetime: the old file, or an error, or the new one
    assert got in (contents["f1"], new) or isinstance(got, OSError), "read another file's bytes"
    _others_intact(m, contents, "f1")
    wait_until(lambda: _read(m.path("/f1")) == new, "the replacement never showed")


def test_an_appended_file_reads_a_whole_version(cluster: MiniDfs, kept, data_dir: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    m, contents = kept
    extra = random_bytes(9_000, seed=4901)
    (tmp_path / "extra").write_bytes(extra)
    cluster.append_open(f"{data_dir}/f2", tmp_path / "extra")
    cluster.append_close(f"{data_dir}/f2")
    _forget_kernel_caches()
    got = _read(m.path("/f2"))
    assert got in (contents["f2"], contents["f2"] + extra), "read neither version"
    wait_until(lambda: _read(m.path("/f2")) == contents["f2"] + extra, "the append never showed")


def test_a_truncated_file_reads_a_whole_version_or_fails(cluster: MiniDfs, kept, data_dir: str) -> None:  # type: ignore[no-untyped-def]
    m, contents = kept
    cluster.command("truncate", path=f"{data_dir}/f3", length=10_000)
    _forget_kernel_caches()
    got = _read(m.path("/f3"))
    assert got in (contents["f3"], contents["f3"][:10_000]) or isinstance(got, OSError), "read a mix"
    wait_until(lambda: _read(m.path("/f3")) == contents["f3"][:10_000], "the truncation never showed")


def test_a_deleted_file_fails_or_reads_as_it_was(cluster: MiniDfs, kept, data_dir: str) -> None:  # type: ignore[no-untyped-def]
    m, contents = kept
    cluster.delete(f"{data_dir}/f4")
    cluster.process_invalidations()
    _forget_kernel_caches()
    got = _read(m.path("/f4"))
    assert got == contents["f4"] or isinstance(got, OSError), "read another file's bytes"
    if isinstance(got, OSError):
        assert got.errno in (errno.EIO, errno.ENOENT, errno.ESTALE), got
    _others_intact(m, contents, "f4")
    wait_until(lambda: not os.path.exists(m.path("/f4")), "the deletion never showed")


def test_a_moved_replica_is_fetched_again(fresh_cluster, mount) -> None:  # type: ignore[no-untyped-def]
    cluster = fresh_cluster(datanodes=3, replication=1)
    data = random_bytes(300_000, seed=4902)
    cluster.put_bytes(data, "/moved/f")
    cluster.age("/moved/f")
    m = mount(cluster, root="/moved")
    os.listdir(m.dir)
    assert Path(m.path("/f")).read_bytes() == data  # its one location is kept
    (old,) = cluster.blocks("/moved/f")[0]["xfer"]
    cluster.set_replication("/moved/f", 2)  # a second replica elsewhere, then the first is gone
    cluster.stop_datanode(old)
    _forget_kernel_caches()
    before = cluster.rpc_counts()
    assert Path(m.path("/f")).read_bytes() == data
    assert _calls(cluster, before).get("GetBlockLocations", 0) >= 1  # refused, then located again
    assert _stats(m)["cache_hits"]["locations"] >= 1  # type: ignore[index]
    _forget_kernel_caches()
    before = cluster.rpc_counts()
    assert Path(m.path("/f")).read_bytes() == data
    # The refused locations were dropped, not kept to be refused again: no DataNode refusal now.
    assert not _calls(cluster, before).get("GetBlockLocations"), _calls(cluster, before)


def test_with_inotify_kept_names_outlive_the_timeouts_until_a_change(cluster: MiniDfs, mount, data_dir: str) -> None:  # type: ignore[no-untyped-def]
    contents = {f"f{i}": random_bytes(5000, seed=4910 + i) for i in range(3)}
    for name, data in contents.items():
        cluster.put_bytes(data, f"{data_dir}/{name}")
        cluster.age(f"{data_dir}/{name}")
    m = mount(cluster, "inotify", "entry_timeout=1,attr_timeout=1", root=data_dir)
    os.listdir(m.dir)
    time.sleep(1.5)  # past entry_timeout: without the edit stream, the names would be asked again
    _forget_kernel_caches()
    before = cluster.rpc_counts()
    for name, data in contents.items():
        assert Path(m.path(f"/{name}")).read_bytes() == data
    calls = _calls(cluster, before)
    assert not calls.get("GetFileLinkInfo") and not calls.get("GetFileInfo"), calls
    new = random_bytes(7000, seed=4920)
    cluster.delete(f"{data_dir}/f0")
    cluster.put_bytes(new, f"{data_dir}/f0")
    wait_until(lambda: _read(m.path("/f0")) == new, "the edit stream never dropped the kept name")


# ----- many workers -----------------------------------------------------------------------------------


def _worker(mount_dir: str, rels: list[str], out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    wrong = errors = 0
    for rel in rels:
        try:
            with open(f"{mount_dir}/{rel}", "rb") as f:
                wrong += f.read() != _expected(rel)
        except OSError:
            errors += 1
    out.put((wrong, errors))


def test_64_workers_three_epochs(cluster: MiniDfs, mount, data_set) -> None:  # type: ignore[no-untyped-def]
    root, rels = data_set
    m = mount(cluster, root=root)
    _scan(m, [f"c{d}" for d in range(4)])
    ctx = multiprocessing.get_context("fork")
    for epoch in range(3):
        _forget_kernel_caches()
        order = list(rels)
        random.Random(epoch).shuffle(order)
        out = ctx.Queue()
        workers = [ctx.Process(target=_worker, args=(m.dir, order[k::64], out)) for k in range(64)]
        for w in workers:
            w.start()
        results = [out.get(timeout=120) for _ in workers]
        for w in workers:
            w.join(timeout=60)
            assert w.exitcode == 0
        assert sum(r[0] for r in results) == 0, f"epoch {epoch}: wrong bytes"
        assert sum(r[1] for r in results) == 0, f"epoch {epoch}: errors"
        wait_until(lambda: _stats(m)["open_files"] == 0, f"epoch {epoch}: open files never went back to zero")
    assert "ERROR" not in m.log_text()
