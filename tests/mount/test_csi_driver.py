"""The CSI node plugin driven as kubelet drives it: real clusters, real mounts, a non-root reader,
a driver killed and restarted in between, and nothing left behind (issue 51)."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from hdfsfuse.proto import csi_pb2 as csi
from tests.conftest import random_bytes
from tests.csi_driver import CsiError, Driver, kerberos_secret, read_as, target_dir
from tests.mounting import is_mounted

NOBODY = 65534


@pytest.fixture
def driver() -> Iterator[Driver]:
    d = Driver(container=True, metrics_port=free_port()).start()
    yield d
    if d.proc is None:
        d.start()
    for record in Path(d.state_dir, "volumes").glob("*.json"):  # a failed test's volumes
        r = json.loads(record.read_text())
        try:
            d.unpublish(r["volume_id"], r["target_path"])
        except CsiError:
            subprocess.run(["fusermount3", "-uz", r["target_path"]], capture_output=True)
    d.stop()
    d.remove_cgroups()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def mount_processes(target: str) -> list[str]:
    out = subprocess.run(["pgrep", "-f", f"hdfsfuse.cli mount -f .* {target} "], capture_output=True, text=True)
    return out.stdout.split()


def test_publish_read_as_non_root_restart_and_unpublish(cluster, secure, driver: Driver) -> None:  # type: ignore[no-untyped-def]
    plain = cluster.put_bytes(random_bytes(300_000, seed=511), "/csi/simple/f")
    kerberized = secure()
    secret_bytes = kerberized.put_bytes(random_bytes(200_001, seed=512), "/csi/secure/f")
    simple_target = target_dir(driver.base, "pod-a")
    secure_target = target_dir(driver.base, "pod-b")

    driver.publish("vol-simple", simple_target, {"source": f"{cluster.uri}/csi/simple", "hadoop_conf": cluster.conf_dir,
                                                 "readahead_max": "4M"})
    driver.publish("vol-kerberos", secure_target, {"source": f"{kerberized.uri}/csi/secure"},
                   kerberos_secret(kerberized), group="2000")
    assert read_as(NOBODY, f"{simple_target}/f") == plain
    assert read_as(NOBODY, f"{secure_target}/f") == secret_bytes
    assert os.stat(f"{secure_target}/f").st_gid == 2000  # the pod's fsGroup

    # The Secret's files live on a private tmpfs, 0600, and appear in no log.
    [secrets_mount] = driver.mounts_under_state()
    keytab = Path(secrets_mount, "keytab")
    assert stat.S_IMODE(keytab.stat().st_mode) == 0o600
    assert stat.S_IMODE(Path(secrets_mount).stat().st_mode) == 0o700
    logs = driver.log_text() + "".join(p.read_text(errors="replace") for p in Path(driver.state_dir, "logs").iterdir())
    assert kerberos_secret(kerberized)["keytab"][:40] not in logs

    # Kubelet retries: the same publish again is fine, other attributes at the same target are not.
    driver.publish("vol-simple", simple_target, {"source": f"{cluster.uri}/csi/simple", "hadoop_conf": cluster.conf_dir,
                                                 "readahead_max": "4M"})
    with pytest.raises(CsiError) as e:
        driver.publish("vol-simple", simple_target, {"source": f"{cluster.uri}/csi/simple"})
    assert e.value.code == grpc.StatusCode.ALREADY_EXISTS

    metrics = driver.metrics()  # each volume's own stats, labelled
    served = re.search(r'^hdfsfuse_app_bytes_read\{volume_id="vol-simple"\} (\d+)$', metrics, re.M)
    assert served is not None and int(served.group(1)) >= len(plain), metrics[:2000]
    assert 'hdfsfuse_fuse_reads{volume_id="vol-kerberos"}' in metrics

    stats = driver.call("Node", "NodeGetVolumeStats", csi.NodeGetVolumeStatsRequest(
        volume_id="vol-simple", volume_path=simple_target))
    assert {u.unit for u in stats.usage} == {csi.VolumeUsage.BYTES, csi.VolumeUsage.INODES}
    assert next(u.total for u in stats.usage if u.unit == csi.VolumeUsage.BYTES) > 0

    # The driver's container is killed whole (a restart, an upgrade) and comes back: the mounts,
    # in cgroups of their own, never noticed.
    driver.kill_container()
    assert read_as(NOBODY, f"{simple_target}/f") == plain
    driver.start()
    assert read_as(NOBODY, f"{secure_target}/f") == secret_bytes
    assert "2 volume(s) still published" in driver.log_text()

    driver.unpublish("vol-simple", simple_target)
    driver.unpublish("vol-kerberos", secure_target)
    driver.unpublish("vol-kerberos", secure_target)  # idempotent
    for target in (simple_target, secure_target):
        assert not is_mounted(target)
        assert not os.path.exists(target)
    deadline = time.monotonic() + 10
    while (mount_processes(simple_target) or mount_processes(secure_target)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert mount_processes(simple_target) == mount_processes(secure_target) == []
    assert driver.mounts_under_state() == []
    assert driver.files_under_state("secrets") == []
    assert driver.files_under_state("volumes") == []


def test_unpublish_of_a_busy_mount_detaches_it_and_returns(cluster, driver: Driver) -> None:  # type: ignore[no-untyped-def]
    data = cluster.put_bytes(random_bytes(100_000, seed=513), "/csi/busy/f")
    target = target_dir(driver.base, "busy")
    driver.publish("vol-busy", target, {"source": f"{cluster.uri}/csi/busy"})
    with open(f"{target}/f", "rb") as held:  # a pod still holds a file open
        driver.unpublish("vol-busy", target)
        assert not is_mounted(target)
        assert held.read() == data  # the lazily detached mount still serves what is open
    assert driver.files_under_state("volumes") == []


def wrong_principal(cluster) -> dict[str, str]:  # type: ignore[no-untyped-def]
    secret = kerberos_secret(cluster)
    realm = secret["principal"].split("@")[1]
    return {**secret, "principal": f"mallory@{realm}"}


def missing_keytab(cluster) -> dict[str, str]:  # type: ignore[no-untyped-def]
    secret = kerberos_secret(cluster)
    del secret["keytab"]
    return secret


@pytest.mark.parametrize(("case", "code", "cause"), [
    ("bad attribute", grpc.StatusCode.INVALID_ARGUMENT, "volume attribute readahead_max: 'lots' is not a size"),
    ("missing Secret key", grpc.StatusCode.INVALID_ARGUMENT, "its Secret has no key 'keytab'"),
    ("unreachable NameNode", grpc.StatusCode.UNAVAILABLE, "cannot connect to 127.0.0.1:"),
    ("wrong principal", grpc.StatusCode.UNAVAILABLE, "mallory@"),
    ("block access", grpc.StatusCode.INVALID_ARGUMENT, "block access is not offered"),
])
def test_a_failed_publish_names_its_cause_and_leaves_nothing(case: str, code: grpc.StatusCode, cause: str, cluster,  # type: ignore[no-untyped-def]
                                                             secure, driver: Driver) -> None:
    target = target_dir(driver.base, case.replace(" ", "-"))
    source = {"source": f"{cluster.uri}/"}
    if case == "bad attribute":
        call = lambda: driver.publish("v", target, {**source, "readahead_max": "lots"})  # noqa: E731
    elif case == "missing Secret key":
        kerberized = secure()
        call = lambda: driver.publish("v", target, {"source": kerberized.uri}, missing_keytab(kerberized))  # noqa: E731
    elif case == "unreachable NameNode":
        closed = 1  # nothing listens on port 1
        call = lambda: driver.publish("v", target, {"source": f"hdfs://127.0.0.1:{closed}/", "namenode_timeout": "3"})  # noqa: E731
    elif case == "wrong principal":
        kerberized = secure()
        call = lambda: driver.publish("v", target, {"source": kerberized.uri}, wrong_principal(kerberized))  # noqa: E731
    else:
        request = csi.NodePublishVolumeRequest(volume_id="v", target_path=target, volume_context=source,
                                               volume_capability=csi.VolumeCapability(block=csi.VolumeCapability.BlockVolume()))
        call = lambda: driver.call("Node", "NodePublishVolume", request)  # noqa: E731
    with pytest.raises(CsiError) as e:
        call()
    assert e.value.code == code, e.value.details
    assert cause in e.value.details
    assert not is_mounted(target) and not os.path.exists(target)
    assert driver.mounts_under_state() == []
    assert driver.files_under_state("secrets") == driver.files_under_state("volumes") == []
