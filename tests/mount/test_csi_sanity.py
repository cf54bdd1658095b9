"""csi-sanity (kubernetes-csi/csi-test v5) against the CSI node plugin, a real cluster behind it.

The driver is node-only: volumes are static PersistentVolumes or inline volumes, so it has no
Controller service and csi-sanity's Controller specs do not apply (skipped by name). Two Node specs
need a volume to publish, which csi-sanity asks a Controller to create: a stand-in Controller here
answers CreateVolume with what a static PersistentVolume would carry (the cluster's URI as the
`source` attribute), so those specs publish and unpublish real mounts through the driver.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_tools import protoc

from tests.csi_driver import CSI_SANITY, Driver
from tests.minidfs import MiniDfs

# csi.v1's CreateVolume and DeleteVolume, as far as a static volume needs them (field numbers of the spec).
STAND_IN_PROTO = """
syntax = "proto3";
package csi.v1;
message CreateVolumeRequest { string name = 1; }
message CreateVolumeResponse { Volume volume = 1; }
message Volume { int64 capacity_bytes = 1; string volume_id = 2; map<string, string> volume_context = 3; }
message DeleteVolumeRequest { string volume_id = 1; }
message DeleteVolumeResponse {}
"""
NOT_A_NODE_DRIVERS = r"\[Controller Server\]"  # csi-sanity's Controller, snapshot and health specs


def stand_in_messages(work: Path) -> Any:
    (work / "csi_static_volumes.proto").write_text(STAND_IN_PROTO)
    if protoc.main(["protoc", f"-I{work}", f"--python_out={work}", "csi_static_volumes.proto"]) != 0:
        raise RuntimeError("protoc failed")
    sys.path.insert(0, str(work))
    try:
        return importlib.import_module("csi_static_volumes_pb2")
    finally:
        sys.path.remove(str(work))


@pytest.fixture
def driver() -> Iterator[Driver]:
    d = Driver().start()
    yield d
    d.stop()


@pytest.fixture
def stand_in_controller(cluster: MiniDfs, driver: Driver, tmp_path: Path) -> Iterator[str]:
    """A Controller endpoint whose CreateVolume names a static volume of the shared cluster (its
    Identity calls, which csi-sanity also makes there, go to the driver)."""
    messages = stand_in_messages(tmp_path)
    to_driver = grpc.insecure_channel(driver.endpoint)

    def forwarded(method: str) -> grpc.RpcMethodHandler:
        call = to_driver.unary_unary(f"/csi.v1.Identity/{method}")  # bytes in, bytes out
        return grpc.unary_unary_rpc_method_handler(lambda request, context: call(request, timeout=30))

    def create(request: Any, context: grpc.ServicerContext) -> Any:
        return messages.CreateVolumeResponse(volume=messages.Volume(
            volume_id=f"static-{request.name}", capacity_bytes=0,
            volume_context={"source": f"{cluster.uri}/", "hadoop_conf": cluster.conf_dir}))

    def delete(request: Any, context: grpc.ServicerContext) -> Any:
        return messages.DeleteVolumeResponse()

    def unary(fn: Any, request_type: Any) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=request_type.FromString,
                                                   response_serializer=lambda m: m.SerializeToString())

    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers([
        grpc.method_handlers_generic_handler("csi.v1.Controller", {
            "CreateVolume": unary(create, messages.CreateVolumeRequest),
            "DeleteVolume": unary(delete, messages.DeleteVolumeRequest)}),
        grpc.method_handlers_generic_handler("csi.v1.Identity", {
            m: forwarded(m) for m in ("GetPluginInfo", "GetPluginCapabilities", "Probe")}),
    ])
    endpoint = f"unix://{tmp_path}/controller.sock"
    server.add_insecure_port(endpoint)
    server.start()
    yield endpoint
    server.stop(grace=None)
    to_driver.close()


def test_csi_sanity_passes_for_a_node_driver(driver: Driver, stand_in_controller: str, tmp_path: Path) -> None:
    run = subprocess.run(
        [str(CSI_SANITY), "--csi.endpoint", driver.endpoint, "--csi.controllerendpoint", stand_in_controller,
         "--csi.mountdir", str(tmp_path / "mount"), "--csi.stagingdir", str(tmp_path / "staging"),
         "--ginkgo.skip", NOT_A_NODE_DRIVERS, "--ginkgo.no-color", "--ginkgo.v"],
        capture_output=True, text=True, timeout=600)
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-6000:] + "\n" + driver.log_text()[-3000:]
    # The specs that publish real mounts ran (not skipped), with the rest of Identity and Node.
    for spec in ("NodeUnpublishVolume should remove target path",
                 "NodeGetVolumeStats should fail when volume does not exist on the specified path",
                 "NodePublishVolume should fail when no volume capability is provided",
                 "Identity Service GetPluginInfo should return appropriate information"):
        assert spec.split(" should ")[1] in report, spec
    assert "published volume static-sanity-node-unpublish-volume" in driver.log_text()
    assert " 0 Failed " in report.replace("|", " ")
