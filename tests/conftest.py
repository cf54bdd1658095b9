"""Shared pytest fixtures: one default real HDFS cluster per test run, fresh ones on demand.

The tests come in tiers, by folder: `unit/` (pure: no cluster, no mount, no root), `cluster/` (the
library and the harness against a real MiniDFSCluster) and `mount/` (through the kernel). Each
test gets its tier's marker, so `pytest -m "not fuse"` runs everything but the mounts.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.mounting import Mount

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


@pytest.fixture(scope="session")
def kms_cluster() -> Iterator[MiniDfs]:
    """A shared cluster with a KMS (3 DataNodes) and one encryption zone, /ez under key ezkey."""
    with MiniDfs(ClusterOptions(kms=True)) as c:
        c.create_encryption_zone("/ez", "ezkey")
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


# ----- shared by the cluster and mount tiers of one topic ---------------------------------------

EC_CELL = 64 * 1024  # the rs32 cluster's cell size


def corrupt_every_replica(cluster: MiniDfs, path: str, block_index: int) -> None:
    """Make one block of `path` unreadable everywhere (all replicas fail their checksums)."""
    wait_fully_replicated(cluster, path)
    block = cluster.blocks(path)[block_index]
    for xfer in block["xfer"]:
        cluster.corrupt_replica(path, block_index, xfer, offset=0, length=block["length"])


def view_conf(cluster: MiniDfs, into: Path, entries: dict[str, str]) -> str:
    """The cluster's client configuration plus viewfs mount-table entries in core-site.xml."""
    conf_dir = into / "conf"
    shutil.copytree(cluster.conf_dir, conf_dir, dirs_exist_ok=True)
    site = conf_dir / "core-site.xml"
    props = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in entries.items())
    site.write_text(site.read_text().replace("</configuration>", props + "</configuration>"))
    return str(conf_dir)


def keytab_options(cluster: MiniDfs, name: str = "alice") -> list[str]:
    k = cluster.kerberos
    if name == "alice":
        return [f"keytab={k['client_keytab']}", f"principal={k['client_principal']}"]
    made = cluster.command("add_principal", name=name)
    return [f"keytab={made['keytab']}", f"principal={made['principal']}"]


def kinit(cluster: MiniDfs, ccache: str, *, lifetime: str | None = None, user: str | None = None,
           principal: str | None = None, keytab: str | None = None, krb5_conf: str | None = None) -> None:
    k = cluster.kerberos
    argv = ["kinit", *(["-l", lifetime] if lifetime else []), "-kt", keytab or k["client_keytab"],
            principal or k["client_principal"]]
    if user:
        argv = ["runuser", "-u", user, "--", *argv]
    env = {**os.environ, "KRB5_CONFIG": krb5_conf or k["krb5_conf"], "KRB5CCNAME": ccache}
    subprocess.run(argv, check=True, env=env, capture_output=True)


def no_ticket_env(tmp_path: Path) -> dict[str, str]:
    """An environment with no usable ticket cache and no token file."""
    return {"KRB5CCNAME": f"FILE:{tmp_path}/no-such-cache", "HADOOP_TOKEN_FILE_LOCATION": ""}


def group_holders(cluster: MiniDfs, path: str, group: int = 0) -> dict[str, int]:
    """xfer address -> the internal block index it holds in one group of `path`."""
    return {u["xfer"]: u["index"] for u in cluster.blocks(path)[group]["internal"]}


def mount_stats(mount: Mount) -> dict[str, object]:
    return json.loads(os.getxattr(mount.dir, "user.hdfsfuse.stats"))


@pytest.fixture(scope="module")
def observer_cluster() -> Iterator[MiniDfs]:
    with MiniDfs(ClusterOptions(observer=True, datanodes=2, replication=2)) as c:
        yield c


@pytest.fixture(scope="module")
def sc_cluster() -> Iterator[MiniDfs]:
    """Three DataNodes with domain sockets, block tokens on."""
    with MiniDfs(ClusterOptions(short_circuit=True, block_tokens=True)) as c:
        yield c


@pytest.fixture
def sc_dir(sc_cluster: MiniDfs, request: pytest.FixtureRequest) -> str:
    path = "/sc/" + request.node.name.replace("[", "_").replace("]", "_")
    sc_cluster.delete(path)
    sc_cluster.mkdir(path)
    return path


@pytest.fixture(scope="module")
def rs32() -> Iterator[tuple[MiniDfs, dict[str, bytes]]]:
    with MiniDfs(ClusterOptions(datanodes=5, block_tokens=True)) as c:
        c.set_ec_policy("/ec", c.add_ec_policy("rs", 3, 2, EC_CELL))
        files: dict[str, bytes] = {}
        group = 3 * 2 * EC_CELL  # 128 KiB internal blocks: two rows per group
        # Two whole groups, then a row, a cell and a half and 123 bytes: a short last stripe
        # whose third unit holds nothing in that row.
        sizes = {"/ec/odd": 2 * group + 3 * EC_CELL + EC_CELL + EC_CELL // 2 + 123, "/ec/exact": 3 * group,
                 "/ec/small": 100}  # /ec/small: units 1 and 2 are not stored
        for seed, (path, size) in enumerate(sizes.items(), start=140):
            files[path] = c.put_bytes(random_bytes(size, seed=seed), path, block_size=2 * EC_CELL)
        yield c, files


@pytest.fixture(scope="module")
def federated() -> Iterator[MiniDfs]:
    """Two nameservices, each an HA pair, sharing two DataNodes."""
    with MiniDfs(ClusterOptions(federation=2, ha=True, datanodes=2, replication=2)) as c:
        yield c
