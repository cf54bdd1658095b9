"""Running the mount: pre-flight checks, pyfuse3 session, kernel tuning, signals, unmount.

Does I/O. Flow of `run_mount`:

    check the mountpoint -> connect to the NameNode and stat the mount root (bounded)
    -> pyfuse3.init (the mount exists) -> tune the kernel (root only) -> report ready
    -> serve until SIGTERM/SIGINT/SIGHUP or an external unmount -> unmount cleanly

`ready` is called once the mount exists; the CLI uses it to release the waiting parent of a
background mount, and to notify systemd.
"""

from __future__ import annotations

import logging
import os
import re
import resource
import signal
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pyfuse3
import trio

from hdfsfuse.client import HdfsClient
from hdfsfuse.client.options import from_mount_options
from hdfsfuse.conf.hadoop import NameNodeTarget, ViewTarget
from hdfsfuse.conf.mount_options import MountOptions
from hdfsfuse.datanode.buffers import keep_read_buffers
from hdfsfuse.errors import ConfigError
from hdfsfuse.fuse import session
from hdfsfuse.fuse.invalidation import LiveInvalidation
from hdfsfuse.fuse.operations import HdfsOperations
from hdfsfuse.local.io_threads import shorten_switch_interval
from hdfsfuse.stats import Stats, prometheus

log = logging.getLogger(__name__)


def mount_entry(mountpoint: str) -> tuple[str, str] | None:
    """(major:minor, fstype) of the mount at `mountpoint` from /proc/self/mountinfo, if mounted.

    `mountpoint` must already be a resolved absolute path: resolving it here would stat our own
    mount, which blocks until the session serves requests.
    """
    target = mountpoint.rstrip("/") or "/"
    found = None
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) < 10:
            continue
        mnt = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        if mnt == target:
            sep = fields.index("-")
            found = (fields[2], fields[sep + 1])
    return found


def check_mountpoint(mountpoint: str) -> None:
    p = Path(mountpoint)
    if not p.exists():
        raise ConfigError(f"mountpoint {mountpoint} does not exist")
    if not p.is_dir():
        raise ConfigError(f"mountpoint {mountpoint} is not a directory")
    if mount_entry(os.path.realpath(mountpoint)) is not None:
        raise ConfigError(f"mountpoint {mountpoint} is already mounted (umount it first)")


def tune_kernel(mountpoint: str, options: MountOptions) -> None:
    """As root: set the mount's readahead (bdi) and the connection's max_background."""
    if os.geteuid() != 0:
        return
    entry = mount_entry(mountpoint)
    if entry is None:
        return
    dev = entry[0]
    _write_sysfs(f"/sys/class/bdi/{dev}/read_ahead_kb", options.read_ahead_kb)
    conn = Path("/sys/fs/fuse/connections") / dev.split(":")[1]
    if not conn.exists() and Path("/sys/fs/fuse/connections").is_dir():
        # fusectl is normally mounted by systemd; mount it if it is not.
        subprocess.run(["mount", "-t", "fusectl", "fusectl", "/sys/fs/fuse/connections"], capture_output=True)
    if conn.exists():
        _write_sysfs(str(conn / "max_background"), options.max_background)
        _write_sysfs(str(conn / "congestion_threshold"), max(1, options.max_background * 3 // 4))


async def tune_kernel_after_init(mountpoint: str, options: MountOptions) -> None:
    """`tune_kernel` once the kernel has the answer to FUSE_INIT: it then lowers the mount's
    readahead to INIT's max_readahead (128 KiB), so a value set earlier would not last. A stat
    of the mount point returns only after INIT (this daemon answers it meanwhile)."""
    try:
        await trio.to_thread.run_sync(os.stat, mountpoint, abandon_on_cancel=True)
    except OSError as e:
        log.warning("kernel tuning skipped: %s", e)
        return
    tune_kernel(mountpoint, options)


def _write_sysfs(path: str, value: int) -> None:
    try:
        Path(path).write_text(f"{value}\n")
    except OSError as e:
        log.warning("could not set %s to %d: %s", path, value, e)


def notify_systemd(message: str) -> None:
    """Send an sd_notify datagram if $NOTIFY_SOCKET is set (no dependency needed)."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        try:
            s.sendto(message.encode(), addr)
        except OSError as e:
            log.warning("could not notify systemd: %s", e)


def check_identity(options: MountOptions, client: HdfsClient) -> None:
    """Per-caller identity needs credentials that can stand for other users."""
    creds = client.credentials
    if options.identity == "caller" and creds is not None and creds.kerberos and creds.login is None:
        raise ConfigError(f"identity=caller: the mount authenticates with {creds.token_source}; only a Kerberos "
                          "login can act for other users (mount with -o keytab=FILE,principal=NAME)")
    if options.identity == "ticket_cache" and (creds is None or not creds.kerberos):
        raise ConfigError("identity=ticket_cache needs a Kerberos cluster (hadoop.security.authentication=kerberos)")


def check_view(options: MountOptions, target: NameNodeTarget | ViewTarget) -> None:
    """What a viewfs mount (several namespaces) cannot do."""
    if not isinstance(target, ViewTarget):
        return
    if options.inotify:
        raise ConfigError(f"{target.label}: -o inotify follows one NameNode's edit log; a viewfs mount has "
                          f"{len(target.namespaces)} namespaces (mount each hdfs:// namespace for live invalidation)")
    if options.identity != "mount":
        raise ConfigError(f"{target.label}: identity={options.identity} is not supported on viewfs mounts; "
                          "requests run as the mount's user")


FD_LIMIT = 65536  # open files the daemon asks for, within its hard limit


def raise_fd_limit(wanted: int = FD_LIMIT) -> int:
    """Raise this process's soft limit on open files toward its hard limit (to `wanted` at most),
    and return the soft limit in force. A mount holds three descriptors for each block it reads
    locally (its block and meta files, and the block file's O_DIRECT open; up to 256 blocks),
    the block cache's files and its DataNode connections; a login shell's soft limit is often
    1024, and its hard limit much higher (systemd's default is 524288)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as e:
        log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, e)
        return soft
    return target


async def run_mount(
    source: str, target: NameNodeTarget | ViewTarget, mountpoint: str, options: MountOptions,
    ready: Callable[[], None], debug: bool = False, preflight_timeout: float = 10.0,
) -> None:
    """Mount, serve until told to stop, unmount. Raises before mounting if anything is wrong."""
    raise_fd_limit()
    keep_read_buffers()
    shorten_switch_interval()
    stats = Stats()
    async with HdfsClient.open_target(target, options=from_mount_options(options), stats=stats) as client:
        check_identity(options, client)
        async with trio.open_nursery() as nursery:
            ops = HdfsOperations(client, target.path, options, mountpoint, nursery)
            # Before mounting, fail fast: an unreachable NameNode is reported within the bound.
            with client.namenode.bounded(preflight_timeout), trio.fail_after(preflight_timeout + 5):
                await ops.init_root()
            if options.metrics_port:
                await nursery.start(serve_metrics, options.metrics_port, lambda: prometheus(ops.stats_snapshot()))
            fuse_opts = options.fuse_options(source)
            if debug:
                fuse_opts.add("debug")
            pyfuse3.init(ops, mountpoint, fuse_opts)
            try:
                nursery.start_soon(tune_kernel_after_init, mountpoint, options)
                # The edit stream's own nursery: it stops (and its kernel notifications, which use
                # the FUSE session, finish) before the session is closed below.
                async with trio.open_nursery() as notifying:
                    live = LiveInvalidation(client.namenode, ops.caches, stats)
                    if options.inotify and await notifying.start(live.run):
                        ops.names.until_changed()  # the edit stream tells what changed from now on
                    nursery.start_soon(_stop_on_signals)
                    log.info("mounted %s at %s", source, mountpoint)
                    ready()
                    # One idle reader task: each request otherwise passes pyfuse3's read lock
                    # through every idle task. Busy tasks still start others, up to 256, so
                    # concurrent requests run concurrently.
                    try:
                        with session.serving():
                            await pyfuse3.main(min_tasks=1, max_tasks=256)
                    finally:
                        notifying.cancel_scope.cancel()
            finally:
                pyfuse3.close(unmount=True)
                log.info("unmounted %s", mountpoint)
                nursery.cancel_scope.cancel()


async def serve_metrics(port: int, render: Callable[[], str], *,
                        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the live stats as Prometheus text on 127.0.0.1:`port` (any GET path)."""

    async def handle(stream: trio.SocketStream) -> None:
        try:
            await answer(stream)
        except Exception as e:  # one bad scrape (a reset, garbage) must not stop the mount
            log.debug("metrics request failed: %s: %s", type(e).__name__, e)
        finally:
            await trio.aclose_forcefully(stream)

    async def answer(stream: trio.SocketStream) -> None:
        request = b""
        with trio.move_on_after(5):
            while b"\r\n\r\n" not in request and len(request) < 8192:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                request += chunk
        if request.startswith(b"GET "):
            body = render().encode()
            head = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
        else:
            body = b"only GET is supported\n"
            head = b"HTTP/1.0 405 Method Not Allowed\r\nContent-Type: text/plain\r\n"
        with trio.move_on_after(5):
            await stream.send_all(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)

    try:
        listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    except OSError as e:
        raise ConfigError(f"metrics_port={port}: cannot listen on 127.0.0.1:{port}: {e.strerror}") from None
    task_status.started()
    await trio.serve_listeners(handle, listeners)


async def _stop_on_signals() -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            log.info("received %s; unmounting", signal.Signals(signum).name)
            pyfuse3.terminate()
            return
