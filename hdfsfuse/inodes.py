"""The inode table: kernel inode numbers, the NameNode paths behind them, lookup counts. Pure code.

    live entry       inode = the HDFS fileId; NameNode path /.reserved/.inodes/<fileId>
                     (a rename never stales it; a path replaced by another file has another fileId)
    snapshot entry   anything under a `.snapshot` directory shares fileIds with the live files, so
                     it gets an inode of its own from SNAPSHOT_INODE_BASE up; its NameNode path is
                     its full path, which is immutable (the parent's path plus its name)
    the mount root   ROOT_INODE, whatever its fileId

    kernel inode ──> Entry(nn_path, shown, snapshot)
    lookup(parent, name) asks the NameNode for  join(parent.nn_path, name)

Lookup counts are the kernel's references (lookup and readdirplus replies) minus forget; an entry
with no references left is dropped.
"""

from __future__ import annotations

import dataclasses
import itertools

ROOT_INODE = 1
SNAPSHOT_DIR = ".snapshot"
SNAPSHOT_INODE_BASE = 1 << 56  # HDFS fileIds count up from 16385: far below this


def join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent != "/" else f"/{name}"


def inode_path(file_id: int) -> str:
    return f"/.reserved/.inodes/{file_id}"


@dataclasses.dataclass(slots=True)
class Entry:
    nn_path: str  # what the NameNode is asked about this inode
    shown: str  # the path as the mount showed it (for log lines; may be stale after a rename)
    snapshot: bool  # inside a .snapshot tree: located by path, with an inode of its own
    lookups: int = 0


class InodeTable:
    """Kernel inodes of one mount and the NameNode paths behind them."""

    def __init__(self, root: str) -> None:
        self.root_file_id = 0
        self._entries: dict[int, Entry] = {ROOT_INODE: Entry(root, root, SNAPSHOT_DIR in root.split("/"))}
        self._snapshot_inodes: dict[str, int] = {}
        self._next_snapshot_inode = itertools.count(SNAPSHOT_INODE_BASE)

    def set_root(self, file_id: int) -> None:
        """The mount root's fileId, once known: from then on it is asked by inode path."""
        self.root_file_id = file_id
        root = self._entries[ROOT_INODE]
        if file_id and not root.snapshot:
            root.nn_path = inode_path(file_id)

    def get(self, inode: int) -> Entry | None:
        return self._entries.get(inode)

    def child_path(self, parent: Entry, name: str) -> str:
        """The NameNode path of `name` inside `parent`."""
        return join(parent.nn_path, name)

    def child(self, parent: Entry, name: str, file_id: int) -> int:
        """The inode for `name` inside `parent` (created or refreshed), not yet referenced."""
        shown = join(parent.shown, name)
        snapshot = parent.snapshot or name == SNAPSHOT_DIR
        if snapshot or not file_id:  # (no fileId: a router's synthetic directory; only a path names it)
            nn_path = self.child_path(parent, name)
            inode = self._snapshot_inodes.get(nn_path) or next(self._next_snapshot_inode)
            self._snapshot_inodes[nn_path] = inode
        elif file_id == self.root_file_id:
            return ROOT_INODE
        else:
            inode, nn_path = file_id, inode_path(file_id)
        entry = self._entries.get(inode)
        if entry is None:
            self._entries[inode] = Entry(nn_path, shown, snapshot)
        else:
            entry.shown = shown
        return inode

    def referenced(self, inode: int) -> None:
        """The kernel got one more reference to `inode` (a lookup or readdirplus reply)."""
        entry = self._entries.get(inode)
        if entry is not None:
            entry.lookups += 1

    def forget(self, inode: int, n: int) -> bool:
        """The kernel dropped `n` references; True when the entry is gone."""
        entry = self._entries.get(inode)
        if entry is None or inode == ROOT_INODE:
            return False
        entry.lookups -= n
        if entry.lookups > 0:
            return False
        del self._entries[inode]
        if entry.snapshot or not entry.nn_path.startswith("/.reserved/.inodes/"):
            self._snapshot_inodes.pop(entry.nn_path, None)
        return True

    def __len__(self) -> int:
        return len(self._entries)
