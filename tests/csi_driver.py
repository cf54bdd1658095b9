"""The CSI driver for tests: the real `hdfsfuse csi` process, and a client that calls it as kubelet does."""

from __future__ import annotations

import base64
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import grpc

from hdfsfuse.proto import csi_pb2 as csi
from tests.minidfs import MiniDfs

REPO = Path(__file__).resolve().parents[1]
# The command that runs hdfsfuse for the driver; .ci/csi-image sets it to run the image's own
# (`chroot ROOT /opt/hdfsfuse/bin/hdfsfuse`).
COMMAND = shlex.split(os.environ.get("HDFSFUSE_CSI_COMMAND", "")) or [sys.executable, "-m", "hdfsfuse.cli"]
CSI_SANITY = REPO / "tests" / ".build" / "csi-sanity"
MOUNT = csi.VolumeCapability(mount=csi.VolumeCapability.MountVolume(),
                             access_mode=csi.VolumeCapability.AccessMode(mode=csi.VolumeCapability.AccessMode.MULTI_NODE_READER_ONLY))


class CsiError(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class Driver:
    """`hdfsfuse csi` on a socket of its own, with its state directory; restartable."""

    def __init__(self, node_id: str = "node-1", *, container: bool = False,
                 metrics_port: int | None = None) -> None:
        """`container`: run the driver as in a container of its own: in a cgroup that
        `kill_container` kills whole, as a container runtime does, with its mounts in another."""
        self.base = tempfile.mkdtemp(prefix="hdfsfuse-csi-")
        os.chmod(self.base, 0o755)  # pods' users reach their volumes (kubelet's pod directories are not 0700)
        self.socket = f"{self.base}/csi.sock"
        self.state_dir = f"{self.base}/state"
        self.node_id = node_id
        self.log = Path(f"{self.base}/driver.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.channel: grpc.Channel | None = None
        self.metrics_port = metrics_port
        self.cgroup: Path | None = None
        self.mount_cgroup: Path | None = None
        if container:
            root = cgroup2_root()
            name = Path(self.base).name
            self.cgroup = root / f"{name}-container"
            self.mount_cgroup = root / f"{name}-mounts"
            self.cgroup.mkdir()

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> Driver:
        argv = [*COMMAND, "csi", "--endpoint", self.endpoint, "--node-id", self.node_id,
                "--state-dir", self.state_dir]
        if self.metrics_port is not None:
            argv += ["--metrics-address", f"127.0.0.1:{self.metrics_port}"]
        if self.cgroup is not None:
            argv = ["sh", "-c", f'echo $$ > {self.cgroup}/cgroup.procs && exec "$@"', "driver", *argv,
                    "--mount-cgroup", str(self.mount_cgroup)]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=out, cwd=REPO)
        self.channel = grpc.insecure_channel(self.endpoint)
        grpc.channel_ready_future(self.channel).result(timeout=30)
        return self

    def stop(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)
        self.proc = None

    def kill_container(self) -> None:
        """Kill every process in the driver's cgroup at once, as a container runtime does."""
        assert self.cgroup is not None and self.proc is not None
        (self.cgroup / "cgroup.kill").write_text("1\n")
        self.proc.wait(timeout=30)
        self.proc = None

    def remove_cgroups(self) -> None:
        for cgroup in (self.mount_cgroup, self.cgroup):
            if cgroup is not None and cgroup.exists():
                for child in cgroup.iterdir():
                    if child.is_dir():
                        child.rmdir()
                cgroup.rmdir()

    def call(self, service: str, method: str, request: Any, timeout: float = 120) -> Any:
        assert self.channel is not None
        response_type = getattr(csi, f"{method}Response")
        stub = self.channel.unary_unary(f"/csi.v1.{service}/{method}",
                                        request_serializer=lambda m: m.SerializeToString(),
                                        response_deserializer=response_type.FromString)
        try:
            return stub(request, timeout=timeout)
        except grpc.RpcError as e:
            raise CsiError(e.code(), e.details() or "") from None

    def publish(self, volume_id: str, target: str, context: dict[str, str], secrets: dict[str, str] | None = None,
                group: str = "") -> None:
        capability = csi.VolumeCapability()
        capability.CopyFrom(MOUNT)
        capability.mount.volume_mount_group = group
        self.call("Node", "NodePublishVolume", csi.NodePublishVolumeRequest(
            volume_id=volume_id, target_path=target, volume_capability=capability, readonly=True,
            volume_context=context, secrets=secrets or {}))

    def unpublish(self, volume_id: str, target: str) -> None:
        self.call("Node", "NodeUnpublishVolume",
                  csi.NodeUnpublishVolumeRequest(volume_id=volume_id, target_path=target))

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=30) as r:
            return r.read().decode()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def mounts_under_state(self) -> list[str]:
        """Mount points inside the state directory (the volumes' secret tmpfs)."""
        return [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
                if line.split()[1].startswith(self.state_dir)]

    def files_under_state(self, sub: str) -> list[str]:
        root = Path(self.state_dir) / sub
        return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def cgroup2_root() -> Path:
    """Where this machine mounts the cgroup v2 hierarchy."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if fields[2] == "cgroup2":
            return Path(fields[1])
    raise RuntimeError("no cgroup2 filesystem is mounted")


def kerberos_secret(cluster: MiniDfs) -> dict[str, str]:
    """A Kubernetes Secret's data for a Kerberized cluster: keytab, principal, configuration."""
    k = cluster.kerberos
    conf = Path(cluster.conf_dir)
    return {
        "keytab": base64.b64encode(Path(k["client_keytab"]).read_bytes()).decode(),
        "principal": k["client_principal"],
        "krb5.conf": Path(k["krb5_conf"]).read_text(),
        "core-site.xml": (conf / "core-site.xml").read_text(),
        "hdfs-site.xml": (conf / "hdfs-site.xml").read_text(),
    }


def read_as(uid: int, path: str) -> bytes:
    """The file's bytes read by a process running as `uid` (a non-root pod's user)."""
    out = subprocess.run(["cat", path], capture_output=True, user=uid, group=uid, timeout=60)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    return out.stdout


def target_dir(base: str, name: str) -> str:
    """A kubelet-like target path: its parent exists, the target itself is the driver's to create."""
    parent = os.path.join(base, "pods", name, "volumes")
    os.makedirs(parent, exist_ok=True)
    return os.path.join(parent, "mount")
