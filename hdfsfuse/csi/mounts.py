"""Publishing and unpublishing volumes: the driver's side of each mount. Does I/O.

Each published volume is one `hdfsfuse mount -f` process in a session of its own, so it outlives
the driver: a driver restarted (or upgraded) finds its volumes again from its state directory
and /proc/self/mountinfo. The driver learns that a mount is ready as systemd would, from a
READY=1 datagram on a socket of its own ($NOTIFY_SOCKET), and why it failed from the process's
last line (its log is the volume's log file, kept under the state directory).

State directory (a host path that survives the driver):

    volumes/<key>.json   one record per target path: volume id, target, fingerprint, pid, paths
    secrets/<key>/       the volume's credential files, on a private tmpfs (0700, files 0600)
    logs/<key>.log       the mount's log

A record is written before its mount starts and removed after it ends, so whatever a crash left
half-done is cleaned at the next start (`recover`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from hdfsfuse.csi.volumes import PublishPlan, file_path
from hdfsfuse.daemon import mount_entry
from hdfsfuse.errors import HdfsError

log = logging.getLogger(__name__)

COMMAND = [sys.executable, "-m", "hdfsfuse.cli"]  # each volume's `hdfsfuse mount -f`
UNMOUNT_SECONDS = 10.0  # fusermount3 on a mount whose daemon hangs must not hang kubelet
EXIT_SECONDS = 10.0  # a daemon's own exit after its unmount


class PublishFailed(HdfsError):
    """The mount did not come up; `config` when its options or credentials were refused as given."""

    def __init__(self, message: str, *, config: bool = False) -> None:
        super().__init__(message)
        self.config = config


class TargetBusy(HdfsError):
    """The target path holds another volume, or this volume with other attributes."""


@dataclasses.dataclass
class Record:
    volume_id: str
    target_path: str
    fingerprint: str
    pid: int = 0
    secrets_dir: str = ""

    @property
    def key(self) -> str:
        return target_key(self.target_path)


def target_key(target_path: str) -> str:
    return hashlib.sha256(os.path.normpath(target_path).encode()).hexdigest()[:32]


def is_mounted(path: str) -> bool:
    return mount_entry(os.path.normpath(path)) is not None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class Mounter:
    """Publishes and unpublishes volumes; one lock per target path, so kubelet's retries and
    concurrent calls for the same target never interleave."""

    def __init__(self, state_dir: str, *, publish_timeout: float = 60.0, mount_cgroup: str | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.publish_timeout = publish_timeout
        # A cgroup (v2) directory outside the driver container's: each mount process moves into a
        # child of it, so a container runtime that kills the driver's cgroup leaves the mounts be.
        self.mount_cgroup = Path(mount_cgroup) if mount_cgroup else None
        if self.mount_cgroup is not None:
            if not (self.mount_cgroup.parent / "cgroup.procs").exists():
                raise HdfsError(f"--mount-cgroup {mount_cgroup}: its parent is not a cgroup v2 directory")
            self.mount_cgroup.mkdir(exist_ok=True)
        for sub in ("volumes", "secrets", "logs"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    # ----- records ---------------------------------------------------------------------------

    def _record_path(self, key: str) -> Path:
        return self.state_dir / "volumes" / f"{key}.json"

    def load(self, target_path: str) -> Record | None:
        try:
            return Record(**json.loads(self._record_path(target_key(target_path)).read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def records(self) -> list[Record]:
        out = []
        for path in sorted((self.state_dir / "volumes").glob("*.json")):
            try:
                out.append(Record(**json.loads(path.read_text())))
            except (OSError, ValueError, TypeError):
                log.warning("ignoring an unreadable volume record %s", path)
        return out

    def _save(self, record: Record) -> None:
        path = self._record_path(record.key)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(record)))
        os.replace(tmp, path)

    def log_file(self, target_path: str) -> Path:
        return self.state_dir / "logs" / f"{target_key(target_path)}.log"

    def _lock(self, target_path: str) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(target_key(target_path), threading.Lock())

    # ----- publish ---------------------------------------------------------------------------

    def publish(self, plan: PublishPlan) -> None:
        """Mount `plan` at its target path; nothing is left behind when it fails. Idempotent."""
        with self._lock(plan.target_path):
            record = self.load(plan.target_path)
            if is_mounted(plan.target_path):
                if record is None:
                    raise TargetBusy(f"{plan.target_path} already holds another mount")
                if record.volume_id != plan.volume_id:
                    raise TargetBusy(f"{plan.target_path} already holds volume {record.volume_id}")
                if record.fingerprint != plan.fingerprint:
                    raise TargetBusy(f"{plan.target_path} already holds volume {record.volume_id} "
                                     "with other attributes")
                if _alive(record.pid):
                    return  # already published as asked
            if record is not None:  # left by a crash, or its mount died: clean it first
                self._teardown(record)
            self._mount(plan)

    def _mount(self, plan: PublishPlan) -> None:
        key = target_key(plan.target_path)
        record = Record(plan.volume_id, plan.target_path, plan.fingerprint)
        self._save(record)
        try:
            os.makedirs(plan.target_path, exist_ok=True)
            secrets_dir = ""
            if plan.files:
                secrets_dir = str(self.state_dir / "secrets" / key)
                record.secrets_dir = secrets_dir
                self._save(record)
                _write_secrets(secrets_dir, plan.files)
            record.pid = self._start(plan, secrets_dir)
            self._save(record)
        except BaseException:
            self._teardown(record)
            raise
        log.info("published volume %s at %s (pid %d)", plan.volume_id, plan.target_path, record.pid)

    def _start(self, plan: PublishPlan, secrets_dir: str) -> int:
        """Start the mount process and wait for READY=1, or for it to fail; its pid. A process
        that is not ready when this returns or raises is killed."""
        log_path = self.log_file(plan.target_path)
        # An abstract socket: no file to leave behind, no path-length limit; a name nobody guesses.
        notify_name = f"@hdfsfuse-csi-{os.getpid()}-{target_key(plan.target_path)}-{secrets.token_hex(8)}"
        options = plan.mount_options(secrets_dir)
        argv = [*COMMAND, "mount", "-f", plan.source, plan.target_path, "-o", ",".join(options)]
        env = {**os.environ, **plan.environment(secrets_dir), "NOTIFY_SOCKET": notify_name}
        env.pop("JOURNAL_STREAM", None)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
            notify.bind("\0" + notify_name[1:])
            start = log_path.stat().st_size if log_path.exists() else 0
            with log_path.open("ab") as log_out:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_out, stderr=log_out,
                                        env=env, start_new_session=True, close_fds=True)
            self._children[proc.pid] = proc
            try:
                self._adopt(proc.pid, plan.target_path)
                deadline = time.monotonic() + self.publish_timeout
                while True:
                    notify.settimeout(max(0.01, min(0.1, deadline - time.monotonic())))
                    with contextlib.suppress(TimeoutError):
                        if b"READY=1" in notify.recv(4096).split(b"\n"):
                            return proc.pid
                    code = proc.poll()
                    if code is not None:
                        raise PublishFailed(_last_error(log_path, start, plan), config=code == 2)
                    if time.monotonic() > deadline:
                        raise PublishFailed(f"cannot mount {plan.source} at {plan.target_path}: not ready after "
                                            f"{self.publish_timeout:g} s")
            except BaseException:
                _stop(proc.pid)
                raise

    def _cgroup(self, target_path: str) -> Path | None:
        return None if self.mount_cgroup is None else self.mount_cgroup / target_key(target_path)

    def _adopt(self, pid: int, target_path: str) -> None:
        """Move a new mount process into its own cgroup, out of the driver's."""
        cgroup = self._cgroup(target_path)
        if cgroup is not None:
            cgroup.mkdir(exist_ok=True)
            (cgroup / "cgroup.procs").write_text(f"{pid}\n")

    # ----- unpublish -------------------------------------------------------------------------

    def unpublish(self, volume_id: str, target_path: str) -> None:
        """Unmount the target (lazily when busy: never hangs) and remove what publish made. Idempotent."""
        with self._lock(target_path):
            record = self.load(target_path)
            if record is None:
                if is_mounted(target_path):
                    raise TargetBusy(f"{target_path} holds a mount this driver did not make")
                _remove_target(target_path)
                return
            if record.volume_id != volume_id:
                raise TargetBusy(f"{target_path} holds volume {record.volume_id}, not {volume_id}")
            self._teardown(record)
            log.info("unpublished volume %s from %s", volume_id, target_path)

    def _teardown(self, record: Record) -> None:
        if is_mounted(record.target_path):
            _unmount(record.target_path)
        self._wait_exit(record.pid)
        if record.secrets_dir:
            _remove_secrets(record.secrets_dir)
        cgroup = self._cgroup(record.target_path)
        if cgroup is not None and not _alive(record.pid):
            with contextlib.suppress(FileNotFoundError):
                cgroup.rmdir()
        _remove_target(record.target_path)
        with contextlib.suppress(FileNotFoundError):
            self._record_path(record.key).unlink()

    def _wait_exit(self, pid: int) -> None:
        """Reap the mount process once unmounted; one still serving open files (a lazy
        unmount) is left to finish them."""
        child = self._children.pop(pid, None)
        deadline = time.monotonic() + EXIT_SECONDS
        while _alive(pid) and time.monotonic() < deadline:
            if child is not None and child.poll() is not None:
                return
            time.sleep(0.05)
        if child is not None and child.poll() is None:
            self._children[pid] = child  # still serving what a pod holds open; reaped later

    # ----- restart ---------------------------------------------------------------------------

    def recover(self) -> list[Record]:
        """At start: keep the volumes whose mounts still serve; clean up the rest. The kept ones."""
        kept = []
        for record in self.records():
            if is_mounted(record.target_path) and _alive(record.pid):
                kept.append(record)
                continue
            log.warning("volume %s at %s: its mount is gone; cleaning up", record.volume_id, record.target_path)
            self._teardown(record)
        if self.mount_cgroup is not None:  # cgroups of mounts that served open files after their unpublish
            keys = {record.key for record in kept}
            for cgroup in self.mount_cgroup.iterdir():
                if cgroup.is_dir() and cgroup.name not in keys:
                    with contextlib.suppress(OSError):
                        cgroup.rmdir()
        return kept


def _write_secrets(secrets_dir: str, files: dict[str, bytes]) -> None:
    os.makedirs(secrets_dir, mode=0o700, exist_ok=True)
    if not os.path.ismount(secrets_dir):
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0700,size=4m,nosuid,nodev,noexec",
                        "hdfsfuse-csi-secrets", secrets_dir], check=True, capture_output=True)
    for name, data in files.items():
        path = os.path.join(secrets_dir, file_path(name))
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


def _remove_secrets(secrets_dir: str) -> None:
    if os.path.ismount(secrets_dir):
        subprocess.run(["umount", "-l", secrets_dir], capture_output=True)
    shutil.rmtree(secrets_dir, ignore_errors=True)


def _unmount(target_path: str) -> None:
    """fusermount3 -u; when the mount is busy (a pod still holds files open), detach it lazily."""
    for argv in (["fusermount3", "-u", target_path], ["fusermount3", "-uz", target_path],
                 ["umount", "-l", target_path]):
        try:
            subprocess.run(argv, capture_output=True, timeout=UNMOUNT_SECONDS)
        except subprocess.TimeoutExpired:
            log.warning("%s did not return within %g s", " ".join(argv), UNMOUNT_SECONDS)
        if not is_mounted(target_path):
            return
    raise TargetBusy(f"cannot unmount {target_path}")


def _remove_target(target_path: str) -> None:
    """The SP removes the target directory it created (and must not remove anything else)."""
    try:
        os.rmdir(target_path)
    except FileNotFoundError:
        pass
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EBUSY):
            raise


def _stop(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def _last_error(log_path: Path, start: int, plan: PublishPlan) -> str:
    """The mount's own one-line reason, from what it logged during this publish."""
    try:
        with log_path.open("rb") as f:
            f.seek(start)
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        lines = []
    for line in reversed(lines):
        if line.startswith("hdfsfuse: "):
            return line.removeprefix("hdfsfuse: ")
    return f"cannot mount {plan.source} at {plan.target_path}: the mount process exited"
