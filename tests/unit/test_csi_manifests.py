"""The Kubernetes files of the CSI driver (hdfsfuse/csi/kubernetes): every object parses as the
`kubernetes` package's model of its kind and loses no field doing so (a misspelt or misplaced
field would be dropped), and they say what the driver needs: the CSIDriver's modes, the plugin's
arguments (accepted by `hdfsfuse csi` itself), the host paths and the sidecars."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from hdfsfuse.cli import build_parser
from hdfsfuse.csi.service import DRIVER_NAME
from hdfsfuse.csi.volumes import plan_publish

KUBERNETES = Path(__file__).resolve().parents[2] / "hdfsfuse" / "csi" / "kubernetes"
FILES = sorted(KUBERNETES.rglob("*.yaml"))
MODELS = {("v1", "PersistentVolume"): "V1PersistentVolume", ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
          ("v1", "Pod"): "V1Pod", ("v1", "ServiceAccount"): "V1ServiceAccount", ("v1", "Secret"): "V1Secret",
          ("apps/v1", "DaemonSet"): "V1DaemonSet", ("storage.k8s.io/v1", "CSIDriver"): "V1CSIDriver"}


def objects() -> list[dict[str, Any]]:
    return [doc for f in FILES for doc in yaml.safe_load_all(f.read_text()) if doc]


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    [found] = [o for o in objects() if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    return found


def as_model(obj: dict[str, Any]) -> Any:
    api = client.ApiClient()
    return api.deserialize(json.dumps(obj), MODELS[(obj["apiVersion"], obj["kind"])], "application/json")


def test_the_files_are_there() -> None:
    names = {f.relative_to(KUBERNETES).as_posix() for f in KUBERNETES.rglob("*") if f.is_file()}
    assert {"csidriver.yaml", "daemonset.yaml", "rbac.yaml", "Dockerfile", "examples/static-volume-keytab.yaml",
            "examples/inline-volume.yaml"} <= names


@pytest.mark.parametrize("obj", objects(), ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_each_object_matches_its_schema_field_for_field(obj: dict[str, Any]) -> None:
    model = as_model(obj)
    back = client.ApiClient().sanitize_for_serialization(model)
    assert back == obj  # nothing unknown was dropped, nothing mistyped was coerced


def test_the_csidriver_is_node_only_for_both_lifecycles() -> None:
    spec = one("CSIDriver")["spec"]
    assert one("CSIDriver")["metadata"]["name"] == DRIVER_NAME
    assert spec["attachRequired"] is False and spec["podInfoOnMount"] is True
    assert set(spec["volumeLifecycleModes"]) == {"Persistent", "Ephemeral"}


def test_the_daemonset_runs_what_the_driver_accepts() -> None:
    pod = one("DaemonSet")["spec"]["template"]["spec"]
    assert pod["hostPID"] is True  # mounts outlive the container's PID namespace
    containers = {c["name"]: c for c in pod["containers"]}
    assert set(containers) == {"hdfsfuse-csi", "node-driver-registrar", "liveness-probe"}
    plugin = containers["hdfsfuse-csi"]
    args = build_parser().parse_args([a.replace("$(NODE_NAME)", "node-1") for a in plugin["args"]])
    assert args.command == "csi" and args.endpoint == "unix:///csi/csi.sock"
    assert args.mount_cgroup and args.mount_cgroup.startswith("/host/sys/fs/cgroup/")
    mounts = {m["mountPath"]: m for m in plugin["volumeMounts"]}
    assert mounts["/var/lib/kubelet"]["mountPropagation"] == "Bidirectional"
    assert mounts[args.state_dir]["mountPropagation"] == "Bidirectional"
    assert "/dev/fuse" in mounts and "/host/sys/fs/cgroup" in mounts
    registrar = containers["node-driver-registrar"]["args"]
    assert f"--kubelet-registration-path=/var/lib/kubelet/plugins/{DRIVER_NAME}/csi.sock" in registrar
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["plugin-dir"]["hostPath"]["path"] == f"/var/lib/kubelet/plugins/{DRIVER_NAME}"


def test_the_examples_volumes_are_publishable() -> None:
    pv = one("PersistentVolume")["spec"]["csi"]
    inline = one("Pod", "report")
    for csi in (pv, inline["spec"]["volumes"][0]["csi"]):
        assert csi["driver"] == DRIVER_NAME
        plan_publish("v", "/target", csi["volumeAttributes"], {})  # the attributes pass the mount's checks
