"""`hdfsfuse csi`: the node plugin's process. Does I/O.

    hdfsfuse csi --endpoint unix:///csi/csi.sock --node-id NODE [--state-dir DIR] [--metrics-address H:P]
                 [--mount-cgroup /host/sys/fs/cgroup/hdfsfuse-csi]

At start it finds the volumes it published before a restart (`Mounter.recover`), then serves the
Identity and Node services on the UNIX socket. On SIGTERM it stops serving and exits; the mounts
stay: each is a session of its own, and with --mount-cgroup in a cgroup of its own, outside the
driver container's, so a container runtime that kills the driver's cgroup leaves them serving.
With --metrics-address it serves each volume's live stats (`hdfsfuse stats`) as Prometheus text
at /metrics, labelled by volume id.
"""

from __future__ import annotations

import concurrent.futures
import http.server
import json
import logging
import os
import signal
import sys
import threading
from urllib.parse import urlparse

import grpc

from hdfsfuse.csi.mounts import Mounter
from hdfsfuse.csi.service import NodeDriver, handlers
from hdfsfuse.errors import ConfigError, HdfsError
from hdfsfuse.fuse.xattrs import STATS_XATTR
from hdfsfuse.stats import prometheus_of

log = logging.getLogger(__name__)

STATS_SECONDS = 2.0  # a volume whose mount does not answer its stats in time is left out of a scrape


def socket_path(endpoint: str) -> str:
    """The file of a `unix:///path` (or `unix:/path`) endpoint."""
    parsed = urlparse(endpoint)
    if parsed.scheme != "unix" or not (parsed.path or "").startswith("/") or parsed.netloc:
        raise ConfigError(f"--endpoint {endpoint!r}: give a UNIX socket, unix:///path/to/csi.sock")
    return parsed.path


def serve(endpoint: str, node_id: str, state_dir: str, metrics_address: str | None = None,
          mount_cgroup: str | None = None) -> int:
    path = socket_path(endpoint)
    if not node_id:
        raise ConfigError("--node-id is empty")
    try:
        mounter = Mounter(state_dir, mount_cgroup=mount_cgroup)
    except (HdfsError, OSError) as e:
        raise ConfigError(str(e)) from None
    kept = mounter.recover()
    log.info("hdfsfuse CSI node %s: %d volume(s) still published", node_id, len(kept))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.exists(path):
        os.unlink(path)  # a socket left by the previous process
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="csi"))
    server.add_generic_rpc_handlers(handlers(NodeDriver(mounter, node_id)))
    if server.add_insecure_port(f"unix://{path}") == 0:
        raise ConfigError(f"cannot listen on {path}")
    server.start()
    metrics = _serve_metrics(metrics_address, mounter) if metrics_address else None
    stopping = threading.Event()

    def stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping (published volumes stay mounted)", signum)
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("serving CSI on %s", path)
    stopping.wait()
    server.stop(grace=5).wait()
    if metrics is not None:
        metrics.shutdown()
    return 0


def volume_stats(mounter: Mounter) -> list[tuple[dict[str, str], dict[str, object]]]:
    """Each published volume's stats snapshot, read from its mount (bounded per volume)."""
    out = []
    for record in mounter.records():
        found: list[dict[str, object]] = []

        def read(target: str = record.target_path, into: list[dict[str, object]] = found) -> None:
            try:
                into.append(json.loads(os.getxattr(target, STATS_XATTR)))
            except (OSError, ValueError):
                pass

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(STATS_SECONDS)
        if found:
            out.append(({"volume_id": record.volume_id}, found[0]))
    return out


def _serve_metrics(address: str, mounter: Mounter) -> http.server.ThreadingHTTPServer:
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise ConfigError(f"--metrics-address {address!r}: give HOST:PORT")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/metrics":
                self.send_error(404)
                return
            body = prometheus_of(volume_stats(mounter)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
    threading.Thread(target=httpd.serve_forever, name="csi-metrics", daemon=True).start()
    return httpd


def main(endpoint: str, node_id: str, state_dir: str, metrics_address: str | None, mount_cgroup: str | None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return serve(endpoint, node_id, state_dir, metrics_address, mount_cgroup)
    except ConfigError as e:
        print(f"hdfsfuse csi: {e}", file=sys.stderr)
        return 2
