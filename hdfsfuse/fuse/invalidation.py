"""Live invalidation (`-o inotify`): the NameNode's edit stream keeps the kernel's caches fresh.

Does I/O: NameNode RPCs, and cache notifications to the kernel (from a worker thread: they can
block on a request in flight for the same directory). A trio task owned by the mount's nursery:

    getCurrentEditLogTxid                      once: where the stream starts (superuser only)
    every POLL seconds: getEditsFromTxid(next) -> namenode.inotify.changes()
        a name appeared or went   -> the parent's kernel entry for it, and our negative cache
        a file's bytes changed    -> its kernel attributes and pages
        attributes changed        -> its kernel attributes
      (our own attribute cache too; paths the kernel holds nothing for cost nothing)

So entry and attribute timeouts can be long while a change elsewhere shows within about POLL
seconds. A NameNode that refuses the stream (not the HDFS superuser) leaves the timeouts in
charge, with one log line. Anything else going wrong (an unreadable answer, edits the
NameNode no longer has, a failed call) forgets every cached entry and attribute once, with one
log line, and resumes from the NameNode's current txid.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from typing import Protocol

import pyfuse3
import trio

from hdfsfuse.errors import AccessDenied, HdfsError
from hdfsfuse.fuse.inodes import InodeTable
from hdfsfuse.namenode.inotify import Change, changes, next_txid
from hdfsfuse.proto import hdfs_pb2
from hdfsfuse.stats import Stats

log = logging.getLogger(__name__)

POLL = 0.2  # seconds between getEditsFromTxid calls while the stream is idle

# A kernel notification: invalidate_inode(inode, attr_only) or invalidate_entry(parent, name).
Notice = tuple[str, int, bytes | bool]


class EditStream(Protocol):
    async def current_edit_txid(self) -> int: ...
    async def edits_from(self, txid: int) -> hdfs_pb2.EventsListProto: ...


class Caches(Protocol):
    """What the mount caches that a change makes stale (`MountCaches`)."""

    inodes: InodeTable

    def forget_cached(self, inode: int | None, parent: int | None, name: str) -> None: ...
    def forget_path(self, path: str) -> None: ...
    def forget_all(self) -> None: ...


def notices(caches: Caches, change: Change) -> list[Notice]:
    """Forget what `change` made stale in our caches; return the kernel notifications it needs."""
    caches.forget_path(change.path)
    parent, entry, name = caches.inodes.find(change.path)
    if entry is None and parent is None:
        return []
    caches.forget_cached(entry.inode if entry else None, parent.inode if parent else None, name)
    out: list[Notice] = []
    if parent is not None and change.name_changed:
        out.append(("entry", parent.inode, name.encode("utf-8", "surrogateescape")))
        out.append(("inode", parent.inode, True))  # its mtime and link count
    if entry is not None:
        out.append(("inode", entry.inode, not change.data_changed))
    return out


def everything(caches: Caches) -> list[Notice]:
    """Forget every cached entry and attribute (the stream lost track)."""
    caches.forget_all()
    out: list[Notice] = []
    for entry in caches.inodes.entries():
        caches.forget_cached(entry.inode, entry.parent.inode if entry.parent else None, entry.name)
        out.append(("inode", entry.inode, False))
        if entry.parent is not None:
            out.append(("entry", entry.parent.inode, entry.name.encode("utf-8", "surrogateescape")))
    return out


def deliver(batch: list[Notice]) -> None:
    """Send notifications to the kernel (a worker thread). Names and inodes it has already
    forgotten are fine; anything else is logged, never raised."""
    for kind, inode, arg in batch:
        try:
            if kind == "entry":
                pyfuse3.invalidate_entry(inode, arg)  # type: ignore[arg-type]
            else:
                pyfuse3.invalidate_inode(inode, attr_only=bool(arg))
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENOTDIR):
                log.debug("kernel invalidation of inode %d failed: %s", inode, e)


class LiveInvalidation:
    """Tails the NameNode's inotify stream for one mount."""

    def __init__(self, stream: EditStream, caches: Caches, stats: Stats, *, poll: float = POLL,
                 send: Callable[[list[Notice]], None] = deliver) -> None:
        self.stream = stream
        self.caches = caches
        self.stats = stats
        self.poll = poll
        self.send = send

    async def run(self, task_status: trio.TaskStatus[bool] = trio.TASK_STATUS_IGNORED) -> None:
        """Start tailing; `task_status` gets False when the NameNode refuses the stream."""
        try:
            txid = await self.stream.current_edit_txid() + 1
        except AccessDenied as e:
            log.warning("inotify: the NameNode will not stream its edits to this user (%s); changes show "
                        "after entry_timeout/attr_timeout instead", e)
            task_status.started(False)
            return
        except HdfsError as e:
            log.warning("inotify: could not start the edit stream (%s); changes show after "
                        "entry_timeout/attr_timeout instead", e)
            task_status.started(False)
            return
        log.info("inotify: following the NameNode's edits from txid %d", txid)
        task_status.started(True)
        while True:
            try:
                txid = await self._step(txid)
            except Exception as e:  # a background task: never escape; start over from the current edit
                log.error("inotify: unexpected %s: %s", type(e).__name__, e)
                txid = await self._resync(f"{type(e).__name__}: {e}")

    async def _step(self, txid: int) -> int:
        """One poll; returns the txid to ask for next."""
        try:
            answer = await self.stream.edits_from(txid)
            found = changes(answer)
        except HdfsError as e:
            return await self._resync(f"{type(e).__name__}: {e}")
        batch = [n for change in found for n in notices(self.caches, change)]
        if batch:
            await trio.to_thread.run_sync(self.send, batch)
        self.stats.inotify_changes += len(found)
        if not found or answer.lastTxid >= answer.syncTxid:  # caught up: wait for more edits
            await trio.sleep(self.poll)
        return next_txid(answer, txid)

    async def _resync(self, why: str) -> int:
        """Forget everything cached once, then find the stream's current end again."""
        self.stats.inotify_resyncs += 1
        log.warning("inotify: lost the edit stream (%s); forgetting every cached name and attribute once "
                    "and following from the current edit", why)
        await trio.to_thread.run_sync(self.send, everything(self.caches))
        delay = self.poll
        while True:
            await trio.sleep(delay)
            try:
                return await self.stream.current_edit_txid() + 1
            except HdfsError as e:
                log.debug("inotify: current txid unknown (%s); retrying", e)
                delay = min(2 * delay, 5.0)
