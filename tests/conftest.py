"""Shared pytest fixtures: one default real HDFS cluster per test run, fresh ones on demand.

The tests come in tiers, by folder: `unit/` (pure: no cluster, no mount, no root), `cluster/` (the
library and the harness against a real MiniDFSCluster) and `mount/` (through the kernel). Each
test gets its tier's marker, so `pytest -m "not fuse"` runs everything but the mounts.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.minidfs import ClusterOptions, MiniDfs

_TIER_MARKERS = {"cluster": ("cluster",), "mount": ("cluster", "fuse")}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(str(item.fspath)).parent.name
        for marker in _TIER_MARKERS.get(tier, ()):
            item.add_marker(marker)


@pytest.fixture(scope="session")
def cluster() -> Iterator[MiniDfs]:
    """The shared 3-DataNode cluster, 1 MiB blocks, CRC32C/512. Do not break it."""
    with MiniDfs(ClusterOptions()) as c:
        yield c


@pytest.fixture
def fresh_cluster() -> Iterator[Callable[..., MiniDfs]]:
    """A factory for clusters owned by one test (destructive tests); all stopped afterwards."""
    made: list[MiniDfs] = []

    def make(**options: object) -> MiniDfs:
        c = MiniDfs(ClusterOptions(**options))  # type: ignore[arg-type]
        made.append(c)
        return c.start()

    yield make
    for c in made:
        c.stop()


@pytest.fixture
def data_dir(cluster: MiniDfs, request: pytest.FixtureRequest) -> str:
    """A fresh HDFS directory for one test on the shared cluster."""
    path = "/t/" + request.node.name.replace("[", "_").replace("]", "_").replace("/", "_")
    cluster.delete(path)
    cluster.mkdir(path)
    return path


def wait_until(condition: Callable[[], object], what: str, limit: float = 30.0) -> None:
    """Poll until `condition()` holds; fail naming `what` if it never does.

    A liveness bound for something the cluster or daemon does in the background (a report
    reaching the NameNode, an idle socket expiring), not a speed threshold.
    """
    import time

    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} (waited {limit:g}s)")
        time.sleep(0.1)


def wait_fully_replicated(cluster: MiniDfs, path: str) -> None:
    """Wait until the NameNode knows every replica of every block of `path`.

    A Java writer's close() returns at minimal replication; the other DataNodes' incremental
    block reports arrive later, so a test that acts on "every replica" waits for them first.
    """
    want = int(cluster.stat(path)["replication"])
    wait_until(lambda: all(len(b["xfer"]) == want for b in cluster.blocks(path)),
               f"the NameNode never learnt all {want} replicas of {path}")


def random_bytes(n: int, seed: int) -> bytes:
    import random

    return random.Random(seed).randbytes(n)


def is_root() -> bool:
    return os.geteuid() == 0


@pytest.fixture(scope="session")
def ha_cluster() -> Iterator[MiniDfs]:
    """A shared HA cluster: two NameNodes in nameservice ns1, 2 DataNodes."""
    with MiniDfs(ClusterOptions(ha=True, datanodes=2)) as c:
        yield c


@pytest.fixture(scope="session")
def perm_cluster() -> Iterator[MiniDfs]:
    """A shared cluster with HDFS permissions on (the launcher's user is the superuser)."""
    with MiniDfs(ClusterOptions(permissions=True, datanodes=1)) as c:
        yield c


@pytest.fixture
def mount() -> Iterator[Callable[..., object]]:
    """A factory for hdfsfuse mounts; every mount is removed after the test."""
    from tests.mounting import Mount

    made: list[Mount] = []

    def make(cluster: MiniDfs, *options: str, **kw: object) -> Mount:
        m = Mount(cluster, *options, **kw)  # type: ignore[arg-type]
        made.append(m)
        return m

    yield make
    for m in made:
        m.unmount()


@pytest.fixture(scope="session")
def shared_mount(cluster: MiniDfs) -> Iterator[object]:
    """The shared cluster mounted once, default options, page-cache mode."""
    from tests.mounting import Mount

    m = Mount(cluster)
    yield m
    m.unmount()


@pytest.fixture(scope="module")
def secure() -> Iterator[Callable[..., MiniDfs]]:
    """Secure clusters (MiniKdc + Kerberos) shared by one test module, one per option set,
    started on first use: `secure(rpc_protection="privacy", ...)`."""
    clusters: dict[tuple[tuple[str, object], ...], MiniDfs] = {}

    def get(**options: object) -> MiniDfs:
        options = {"kerberos": True, "datanodes": 2, **options}
        key = tuple(sorted(options.items()))
        if key not in clusters:
            clusters[key] = MiniDfs(ClusterOptions(**options)).start()  # type: ignore[arg-type]
        return clusters[key]

    yield get
    for c in clusters.values():
        c.stop()


def local_user(name: str) -> pwd.struct_passwd:
    """A local account (created without a home if missing)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
        return pwd.getpwnam(name)


def edited_conf(cluster: MiniDfs, into: Path, file: str, old: str, new: str) -> Path:
    """A copy of the cluster's client configuration with one text replaced in `file`."""
    conf_dir = into / "conf"
    shutil.copytree(cluster.conf_dir, conf_dir, dirs_exist_ok=True)
    site = conf_dir / file
    text = site.read_text()
    assert old in text, f"{old!r} not in {file}"
    site.write_text(text.replace(old, new))
    return conf_dir
