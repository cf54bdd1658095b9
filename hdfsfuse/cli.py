"""The `hdfsfuse` command: mount (foreground or background), umount. Does I/O.

    hdfsfuse mount SOURCE MOUNTPOINT [-o opt,...] [-f|--foreground] [--debug]
    hdfsfuse SOURCE MOUNTPOINT [-o opt,...]          (the form mount.fuse3 and fstab use)
    hdfsfuse umount [-z] MOUNTPOINT
    hdfsfuse stats [--json] MOUNTPOINT
    hdfsfuse csi --endpoint unix:///csi/csi.sock --node-id NODE   (the Kubernetes CSI node plugin)

Errors before mounting print one line and exit non-zero, leaving nothing mounted. The
background form returns only once the mount exists.
"""

from __future__ import annotations

import argparse
import json
import logging
import logging.handlers
import os
import subprocess
import sys
from collections.abc import Callable

import trio

from hdfsfuse import __version__
from hdfsfuse.conf.hadoop import NameNodeTarget, ViewTarget, load_hadoop_conf, resolve_source
from hdfsfuse.conf.mount_options import HELP, LOG_LEVELS, MountOptions, parse_options
from hdfsfuse.daemon import check_mountpoint, check_view, mount_entry, notify_systemd, run_mount
from hdfsfuse.errors import ConfigError, HdfsError
from hdfsfuse.fuse.xattrs import STATS_XATTR

log = logging.getLogger("hdfsfuse")

USAGE = """\
hdfsfuse mount SOURCE MOUNTPOINT [-o OPTIONS] [-f|--foreground] [--debug]
       hdfsfuse SOURCE MOUNTPOINT [-o OPTIONS]
       hdfsfuse umount [-z] MOUNTPOINT
       hdfsfuse stats [--json] MOUNTPOINT
       hdfsfuse csi --endpoint unix:///PATH --node-id NODE [--state-dir DIR] [--metrics-address HOST:PORT]
                    [--mount-cgroup DIR]
       hdfsfuse --version | --help

SOURCE is hdfs://HOST[:PORT][/PATH], hdfs://NAMESERVICE[/PATH] or hdfs:///PATH (fs.defaultFS);
PATH becomes the root of the mount."""


class _JournalFormatter(logging.Formatter):
    """Prefix each line with its syslog priority (<3> error ... <7> debug) for journald."""

    PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}

    def format(self, record: logging.LogRecord) -> str:
        return f"<{self.PRIORITY.get(record.levelno, 6)}>{super().format(record)}"


def setup_logging(options: MountOptions, *, foreground: bool, debug: bool) -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    level = logging.DEBUG if debug else LOG_LEVELS[options.log_level]
    root.setLevel(level)
    handler: logging.Handler
    if foreground or debug:
        handler = logging.StreamHandler(sys.stderr)
        if os.environ.get("JOURNAL_STREAM"):
            handler.setFormatter(_JournalFormatter("%(name)s: %(message)s"))
        else:
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    elif options.log_file:
        handler = logging.FileHandler(options.log_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    elif os.path.exists("/dev/log"):
        handler = logging.handlers.SysLogHandler(address="/dev/log")
        handler.setFormatter(logging.Formatter("hdfsfuse[%(process)d]: %(name)s: %(message)s"))
    else:
        handler = logging.NullHandler()
    root.addHandler(handler)


def _first_error(exc: BaseException) -> BaseException:
    """The meaningful error inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        preferred = [e for e in exc.exceptions if not isinstance(e, trio.Cancelled)]
        exc = (preferred or list(exc.exceptions))[0]
    return exc


def _describe(exc: BaseException) -> str:
    exc = _first_error(exc)
    if isinstance(exc, trio.TooSlowError):
        return "the NameNode did not answer in time"
    if isinstance(exc, RuntimeError) and "fuse" in str(exc).lower():
        return f"the kernel refused the mount ({exc}); is /dev/fuse available and the mountpoint free?"
    return str(exc) or type(exc).__name__


_EXPECTED = (HdfsError, OSError, RuntimeError, trio.TooSlowError)


def _mount_errors(exc: BaseException) -> bool:
    return isinstance(_first_error(exc), _EXPECTED)


def cmd_mount(source: str, mountpoint: str, option_strings: list[str], foreground: bool, debug: bool) -> int:
    try:
        options = parse_options(option_strings)
        check_mountpoint(mountpoint)
        target = resolve_source(source, load_hadoop_conf(options.hadoop_conf))
        check_view(options, target)
    except ConfigError as e:
        print(f"hdfsfuse: {e}", file=sys.stderr)
        return 2
    mountpoint = os.path.realpath(mountpoint)
    if foreground:
        setup_logging(options, foreground=True, debug=debug)
        return _serve(source, target, mountpoint, options, debug, ready=lambda: notify_systemd("READY=1"))
    return _background(source, target, mountpoint, options, debug)


def _serve(source: str, target: NameNodeTarget | ViewTarget, mountpoint: str, options: MountOptions, debug: bool,
           ready: Callable[[], None], on_error: Callable[[str], None] | None = None) -> int:
    try:
        trio.run(run_mount, source, target, mountpoint, options, ready, debug)
    except KeyboardInterrupt:
        return 0
    except BaseException as e:
        if not _mount_errors(e):
            raise
        message = f"cannot mount {source} at {mountpoint}: {_describe(e)}"
        if on_error is not None:
            on_error(message)
        else:
            print(f"hdfsfuse: {message}", file=sys.stderr)
        log.error("%s", message)
        return 1
    return 0


def _background(source: str, target: NameNodeTarget | ViewTarget, mountpoint: str, options: MountOptions,
                debug: bool) -> int:
    """Fork; the parent returns once the child reports the mount exists (or why it failed)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid > 0:
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as r:
            message = r.read().decode(errors="replace")
        if message.startswith("ok"):
            return 0
        os.waitpid(pid, 0)
        print(f"hdfsfuse: {message.strip() or 'the mount process died before mounting'}", file=sys.stderr)
        return 1
    os.close(read_fd)
    os.setsid()
    setup_logging(options, foreground=False, debug=debug)
    reported = False

    def report(message: str) -> None:
        nonlocal reported
        if not reported:
            reported = True
            os.write(write_fd, message.encode())
            os.close(write_fd)

    def ready() -> None:
        report("ok\n")
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)

    code = 1
    try:
        code = _serve(source, target, mountpoint, options, debug, ready=ready, on_error=report)
    finally:
        report("the mount process exited before mounting\n")
        os._exit(code)


def cmd_umount(mountpoint: str, lazy: bool) -> int:
    mountpoint = os.path.realpath(mountpoint) if mount_entry(mountpoint) is None else mountpoint
    if mount_entry(mountpoint) is None:
        print(f"hdfsfuse: {mountpoint} is not mounted", file=sys.stderr)
        return 1
    cmd = ["fusermount3", "-u", *(["-z"] if lazy else []), mountpoint]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"hdfsfuse: umount {mountpoint} failed: {proc.stderr.strip()}", file=sys.stderr)
        return 1
    return 0


def cmd_stats(mountpoint: str, as_json: bool) -> int:
    """Print the running daemon's live stats (read from a control xattr on the mount root)."""
    try:
        raw = os.getxattr(mountpoint, STATS_XATTR)
    except OSError as e:
        print(f"hdfsfuse: cannot read stats from {mountpoint}: {e.strerror} (is it an hdfsfuse mount?)",
              file=sys.stderr)
        return 1
    snap = json.loads(raw)
    if as_json:
        print(json.dumps(snap, indent=1))
        return 0
    for key, value in snap.items():
        if isinstance(value, dict):
            print(f"{key}:")
            for k, v in value.items():
                print(f"  {k:30s} {v}")
        else:
            print(f"{key:32s} {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hdfsfuse", usage=USAGE, description="Mount HDFS read-only with FUSE.",
        epilog=HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"hdfsfuse {__version__}")
    sub = p.add_subparsers(dest="command")
    m = sub.add_parser("mount", help="mount HDFS", epilog=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    m.add_argument("source")
    m.add_argument("mountpoint")
    m.add_argument("-o", dest="options", action="append", default=[], metavar="OPTIONS")
    m.add_argument("-f", "--foreground", action="store_true", help="stay in the foreground (for systemd)")
    m.add_argument("--debug", action="store_true", help="foreground, debug logging and FUSE tracing")
    u = sub.add_parser("umount", help="unmount")
    u.add_argument("-z", "--lazy", action="store_true", help="detach now even if files are open")
    u.add_argument("mountpoint")
    s = sub.add_parser("stats", help="live statistics of a running mount")
    s.add_argument("--json", action="store_true")
    s.add_argument("mountpoint")
    c = sub.add_parser("csi", help="serve as a Kubernetes CSI node plugin (docs/kubernetes.md)")
    c.add_argument("--endpoint", required=True, help="the gRPC socket, unix:///csi/csi.sock")
    c.add_argument("--node-id", required=True, help="this node's name, as Kubernetes knows it")
    c.add_argument("--state-dir", default="/var/lib/hdfsfuse-csi",
                   help="where volume records, credentials (tmpfs) and mount logs live; a host path")
    c.add_argument("--metrics-address", help="serve each volume's stats as Prometheus text at HOST:PORT/metrics")
    c.add_argument("--mount-cgroup", help="a cgroup v2 directory (of the host's) for the mount processes, so "
                   "they outlive the driver's container (docs/kubernetes.md)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0].startswith("hdfs://"):
        args = ["mount", *args]  # mount.fuse3 / fstab: hdfsfuse SOURCE MOUNTPOINT -o OPTS
    parser = build_parser()
    ns = parser.parse_args(args)
    if ns.command == "mount":
        return cmd_mount(ns.source, ns.mountpoint, ns.options, ns.foreground or ns.debug, ns.debug)
    if ns.command == "umount":
        return cmd_umount(ns.mountpoint, ns.lazy)
    if ns.command == "stats":
        return cmd_stats(ns.mountpoint, ns.json)
    if ns.command == "csi":
        from hdfsfuse.csi import server  # grpcio: the csi extra

        return server.main(ns.endpoint, ns.node_id, ns.state_dir, ns.metrics_address, ns.mount_cgroup)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
