"""The CSI Identity and Node services over gRPC (grpcio), for a node-only driver.

Each call is checked, handed to the `Mounter`, and its errors translated once, here, to gRPC
status codes, with one log line that names the volume and the cause (never a Secret's value):

| cause | status |
|---|---|
| a missing id, path or capability; a bad attribute or Secret key; options the mount refuses | INVALID_ARGUMENT |
| the target holds another volume, or this one with other attributes | ALREADY_EXISTS |
| a stats request for a volume not published there | NOT_FOUND |
| the mount did not come up (NameNode unreachable, Kerberos refused, timeout) | UNAVAILABLE |
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import grpc

from hdfsfuse import __version__
from hdfsfuse.csi.mounts import Mounter, PublishFailed, TargetBusy, is_mounted
from hdfsfuse.csi.volumes import InvalidVolume, plan_publish
from hdfsfuse.proto import csi_pb2 as csi

log = logging.getLogger(__name__)

DRIVER_NAME = "hdfs.csi.hdfsfuse.io"
SERVICE_PREFIX = "csi.v1."


class Abort(Exception):
    """A call's gRPC status and message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _required(value: str, what: str) -> str:
    if not value:
        raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"{what} is missing")
    return value


class NodeDriver:
    """The calls of both services, over one Mounter."""

    def __init__(self, mounter: Mounter, node_id: str) -> None:
        self.mounter = mounter
        self.node_id = node_id

    # ----- Identity --------------------------------------------------------------------------

    def GetPluginInfo(self, request: csi.GetPluginInfoRequest) -> csi.GetPluginInfoResponse:
        return csi.GetPluginInfoResponse(name=DRIVER_NAME, vendor_version=__version__)

    def GetPluginCapabilities(self, request: csi.GetPluginCapabilitiesRequest) -> csi.GetPluginCapabilitiesResponse:
        return csi.GetPluginCapabilitiesResponse()  # no controller: volumes are static or inline

    def Probe(self, request: csi.ProbeRequest) -> csi.ProbeResponse:
        response = csi.ProbeResponse()
        response.ready.value = True
        return response

    # ----- Node ------------------------------------------------------------------------------

    def NodeGetCapabilities(self, request: csi.NodeGetCapabilitiesRequest) -> csi.NodeGetCapabilitiesResponse:
        rpc = csi.NodeServiceCapability.RPC
        return csi.NodeGetCapabilitiesResponse(capabilities=[
            csi.NodeServiceCapability(rpc=rpc(type=t)) for t in (rpc.GET_VOLUME_STATS, rpc.VOLUME_MOUNT_GROUP)])

    def NodeGetInfo(self, request: csi.NodeGetInfoRequest) -> csi.NodeGetInfoResponse:
        return csi.NodeGetInfoResponse(node_id=self.node_id)

    def NodePublishVolume(self, request: csi.NodePublishVolumeRequest) -> csi.NodePublishVolumeResponse:
        volume_id = _required(request.volume_id, "the volume id")
        target = _required(request.target_path, "the target path")
        if not request.HasField("volume_capability"):
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "the volume capability is missing")
        capability = request.volume_capability
        if capability.HasField("block"):
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, "HDFS volumes are filesystems: block access is not offered")
        mount = capability.mount
        if mount.fs_type not in ("", "hdfsfuse", "fuse.hdfsfuse"):
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"fsType {mount.fs_type!r}: this driver mounts hdfsfuse")
        try:
            plan = plan_publish(volume_id, target, dict(request.volume_context), dict(request.secrets),
                                mount.volume_mount_group)
            self.mounter.publish(plan)
        except InvalidVolume as e:
            raise Abort(grpc.StatusCode.INVALID_ARGUMENT, f"volume {volume_id}: {e}") from None
        except TargetBusy as e:
            raise Abort(grpc.StatusCode.ALREADY_EXISTS, f"volume {volume_id}: {e}") from None
        except PublishFailed as e:
            code = grpc.StatusCode.INVALID_ARGUMENT if e.config else grpc.StatusCode.UNAVAILABLE
            raise Abort(code, f"volume {volume_id}: {e}") from None
        return csi.NodePublishVolumeResponse()

    def NodeUnpublishVolume(self, request: csi.NodeUnpublishVolumeRequest) -> csi.NodeUnpublishVolumeResponse:
        volume_id = _required(request.volume_id, "the volume id")
        target = _required(request.target_path, "the target path")
        try:
            self.mounter.unpublish(volume_id, target)
        except TargetBusy as e:
            raise Abort(grpc.StatusCode.FAILED_PRECONDITION, f"volume {volume_id}: {e}") from None
        return csi.NodeUnpublishVolumeResponse()

    def NodeGetVolumeStats(self, request: csi.NodeGetVolumeStatsRequest) -> csi.NodeGetVolumeStatsResponse:
        volume_id = _required(request.volume_id, "the volume id")
        path = _required(request.volume_path, "the volume path")
        record = self.mounter.load(path) if os.path.isabs(path) else None
        if record is None or record.volume_id != volume_id or not is_mounted(path):
            raise Abort(grpc.StatusCode.NOT_FOUND, f"volume {volume_id} is not published at {path}")
        try:
            st = os.statvfs(path)
        except OSError as e:
            raise Abort(grpc.StatusCode.UNAVAILABLE, f"volume {volume_id}: statfs of {path}: {e.strerror}") from None
        unit = csi.VolumeUsage
        return csi.NodeGetVolumeStatsResponse(usage=[
            unit(unit=unit.BYTES, total=st.f_blocks * st.f_frsize, available=st.f_bavail * st.f_frsize,
                 used=(st.f_blocks - st.f_bfree) * st.f_frsize),
            unit(unit=unit.INODES, total=st.f_files, available=st.f_favail, used=st.f_files - st.f_ffree),
        ])


IDENTITY_CALLS = ("GetPluginInfo", "GetPluginCapabilities", "Probe")
NODE_CALLS = ("NodePublishVolume", "NodeUnpublishVolume", "NodeGetVolumeStats", "NodeGetCapabilities", "NodeGetInfo")


def handlers(driver: NodeDriver) -> list[grpc.GenericRpcHandler]:
    """gRPC handlers of the Identity and Node services, by the spec's method names."""

    def unary(name: str) -> grpc.RpcMethodHandler:
        method: Callable[[Any], Any] = getattr(driver, name)
        request_type = getattr(csi, f"{name}Request")

        def call(request: Any, context: grpc.ServicerContext) -> Any:
            try:
                return method(request)
            except Abort as e:
                log.error("%s: %s", name, e)
                context.abort(e.code, str(e))
            except Exception as e:  # a bug or the host refusing (mount(8), a full disk): one line
                log.exception("%s failed", name)
                context.abort(grpc.StatusCode.INTERNAL, f"{name}: {type(e).__name__}: {e}")

        return grpc.unary_unary_rpc_method_handler(call, request_deserializer=request_type.FromString,
                                                   response_serializer=lambda m: m.SerializeToString())

    return [
        grpc.method_handlers_generic_handler(f"{SERVICE_PREFIX}Identity", {n: unary(n) for n in IDENTITY_CALLS}),
        grpc.method_handlers_generic_handler(f"{SERVICE_PREFIX}Node", {n: unary(n) for n in NODE_CALLS}),
    ]
