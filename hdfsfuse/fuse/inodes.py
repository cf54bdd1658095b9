"""The inode table: kernel inode numbers, the NameNode paths behind them, lookup counts. Pure code.

    live entry       inode = the HDFS fileId; NameNode path /.reserved/.inodes/<fileId>
                     (a rename never stales it; a path replaced by another file has another fileId)
    snapshot entry   anything under a `.snapshot` directory shares fileIds with the live files, so
                     it gets an inode of its own from PATH_INODE_BASE up; its NameNode path is
                     its full path, which is immutable (the parent's path plus its name)
    the mount root   ROOT_INODE, whatever its fileId

A federated namespace (a viewfs mount table, or a Router in front of several NameNodes) has no
single inode space: fileIds of different namespaces collide, and a Router cannot resolve
/.reserved/.inodes paths. There (`by_path`) every entry is addressed by its path, as snapshot
copies are, gets an inode of its own from PATH_INODE_BASE up, and remembers the fileId it was
looked up with, so an open can still refuse a file replaced at that path since:

    by inode:  kernel inode ──> Entry(parent, name, nn_path or "by inode", snapshot)
    by path:   kernel inode ──> Entry(parent, name, nn_path = its path, file_id)
    lookup(parent, name) asks the NameNode for  join(parent.nn_path, name)

Lookup counts are the kernel's references (lookup and readdirplus replies) minus forget; an entry
with no references left is dropped. With `index_names` (live invalidation), a (parent inode, name)
index finds the entries the kernel holds for an HDFS path the NameNode says changed.
"""

from __future__ import annotations

import itertools

ROOT_INODE = 1
SNAPSHOT_DIR = ".snapshot"
PATH_INODE_BASE = 1 << 56  # path-addressed inodes (snapshot copies, federated); fileIds are far below


def join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent != "/" else f"/{name}"


def inode_path(file_id: int) -> str:
    return f"/.reserved/.inodes/{file_id}"


class Entry:
    """One kernel inode: how to ask the NameNode about it, and its name for log lines.

    Small on purpose (a listing of a million names makes a million of these): a live entry's
    NameNode path is derived from its inode, and its shown path from its parent's.
    """

    __slots__ = ("_nn_path", "file_id", "inode", "lookups", "name", "parent", "snapshot")

    def __init__(self, inode: int, parent: Entry | None, name: str, nn_path: str | None, snapshot: bool,
                 file_id: int = 0) -> None:
        self.inode = inode
        self.file_id = file_id  # the HDFS fileId it was looked up with (0: a Router's synthetic directory)
        self.parent = parent  # the kernel keeps a parent referenced while it holds a child
        self.name = name
        self._nn_path = nn_path  # None: the inode path of `inode`
        self.snapshot = snapshot  # inside a .snapshot tree: located by path, with an inode of its own
        self.lookups = 0

    @property
    def nn_path(self) -> str:
        """What the NameNode is asked about this inode."""
        return self._nn_path if self._nn_path is not None else inode_path(self.inode)

    @property
    def by_inode(self) -> bool:
        return self._nn_path is None

    @property
    def shown(self) -> str:
        """The path as the mount showed it (for log lines; may be stale after a rename)."""
        return self.name if self.parent is None else join(self.parent.shown, self.name)


class InodeTable:
    """Kernel inodes of one mount and the NameNode paths behind them."""

    def __init__(self, root: str, *, index_names: bool = False) -> None:
        self.root_file_id = 0
        self.by_path = False  # a federated namespace: every entry is addressed by its path
        self.root = root
        root_entry = Entry(ROOT_INODE, None, root, root, SNAPSHOT_DIR in root.split("/"))
        self._entries: dict[int, Entry] = {ROOT_INODE: root_entry}
        # (parent inode, name) -> inode, to find the entries of a path the NameNode says changed
        # (live invalidation only: it costs a dict entry per name the kernel keeps).
        self._names: dict[tuple[int, str], int] | None = {} if index_names else None
        self._path_inodes: dict[str, int] = {}
        self._next_path_inode = itertools.count(PATH_INODE_BASE)

    def set_root(self, file_id: int, *, by_path: bool = False) -> None:
        """The mount root's fileId, once known: from then on it is asked by inode path (unless
        the namespace is federated, `by_path`)."""
        self.root_file_id = file_id
        self.by_path = by_path
        root = self._entries[ROOT_INODE]
        root.file_id = file_id
        if file_id and not root.snapshot and not by_path:
            root._nn_path = inode_path(file_id)

    def get(self, inode: int) -> Entry | None:
        return self._entries.get(inode)

    def child_path(self, parent: Entry, name: str) -> str:
        """The NameNode path of `name` inside `parent`."""
        return join(parent.nn_path, name)

    def child(self, parent: Entry, name: str, file_id: int) -> int:
        """The inode for `name` inside `parent` (created or refreshed), not yet referenced."""
        snapshot = parent.snapshot or name == SNAPSHOT_DIR
        nn_path: str | None = None
        if snapshot or not file_id or self.by_path:  # (no fileId: a Router's synthetic directory)
            nn_path = self.child_path(parent, name)
            inode = self._path_inodes.get(nn_path, 0)
            known = self._entries.get(inode)
            if known is not None and known.file_id != file_id:
                # Another file now has this path: a new inode, so the kernel keeps no page or
                # attribute of the old one for it (the old entry lives on until forgotten).
                self._unname(known)
                inode = 0
            if not inode:
                inode = self._path_inodes[nn_path] = next(self._next_path_inode)
        elif file_id == self.root_file_id:
            return ROOT_INODE
        else:
            inode = file_id
        entry = self._entries.get(inode)
        if entry is None:
            self._entries[inode] = Entry(inode, parent, name, nn_path, snapshot, file_id)
        elif entry.parent is not parent or entry.name != name:  # renamed, or seen through another name
            self._unname(entry)
            entry.parent, entry.name = parent, name
        if self._names is not None:
            self._names[(parent.inode, name)] = inode
        return inode

    def _unname(self, entry: Entry) -> None:
        if self._names is not None and entry.parent is not None:
            key = (entry.parent.inode, entry.name)
            if self._names.get(key) == entry.inode:
                del self._names[key]

    def find(self, path: str) -> tuple[Entry | None, Entry | None, str]:
        """(parent entry, entry, name) the kernel may hold for the HDFS path `path` (needs
        `index_names`); None where it holds nothing. Paths outside the mount root find nothing."""
        assert self._names is not None, "the table keeps no name index"
        root = self.root.rstrip("/")
        if path != root and not path.startswith(root + "/"):
            return None, None, ""
        names = [n for n in path[len(root):].split("/") if n]
        if not names:
            return None, self._entries[ROOT_INODE], ""
        parent: Entry | None = self._entries[ROOT_INODE]
        for name in names[:-1]:
            inode = self._names.get((parent.inode, name)) if parent is not None else None
            parent = self._entries.get(inode) if inode is not None else None
            if parent is None:
                return None, None, names[-1]
        inode = self._names.get((parent.inode, names[-1])) if parent is not None else None
        return parent, self._entries.get(inode) if inode is not None else None, names[-1]

    def entries(self) -> list[Entry]:
        return list(self._entries.values())

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
        self._unname(entry)
        if not entry.by_inode and self._path_inodes.get(entry.nn_path) == inode:
            del self._path_inodes[entry.nn_path]
        return True

    def __len__(self) -> int:
        return len(self._entries)
