"""The inode table (pure): inode paths for live files, inodes of their own for snapshot copies."""

from __future__ import annotations

from hdfsfuse.fuse.inodes import PATH_INODE_BASE, ROOT_INODE, InodeTable


def test_live_entries_are_fileids_asked_by_inode_path() -> None:
    t = InodeTable("/data")
    root = t.get(ROOT_INODE)
    assert root is not None and root.nn_path == "/data"
    t.set_root(16390)
    assert root.nn_path == "/.reserved/.inodes/16390"
    assert t.child_path(root, "f") == "/.reserved/.inodes/16390/f"
    ino = t.child(root, "f", 16400)
    entry = t.get(ino)
    assert ino == 16400 and entry is not None
    assert entry.nn_path == "/.reserved/.inodes/16400" and entry.shown == "/data/f" and not entry.snapshot
    assert t.child(root, "again-the-root", 16390) == ROOT_INODE


def test_snapshot_copies_get_their_own_inodes() -> None:
    t = InodeTable("/")
    t.set_root(16385)
    root = t.get(ROOT_INODE)
    assert root is not None
    d = t.get(t.child(root, "d", 16386))
    assert d is not None
    live = t.child(d, "file", 16387)
    snapdir = t.get(t.child(d, ".snapshot", 16386))
    assert snapdir is not None and snapdir.snapshot
    s1 = t.get(t.child(snapdir, "s1", 16386))
    assert s1 is not None
    copy = t.child(s1, "file", 16387)  # the same fileId as the live file
    assert copy != live and copy >= PATH_INODE_BASE
    entry = t.get(copy)
    assert entry is not None and entry.snapshot
    assert entry.nn_path == "/.reserved/.inodes/16386/.snapshot/s1/file"
    assert t.child(s1, "file", 16387) == copy  # stable while remembered
    s2 = t.get(t.child(snapdir, "s2", 16386))
    assert s2 is not None and t.child(s2, "file", 16387) not in (copy, live)


def test_lookup_counts_and_forget() -> None:
    t = InodeTable("/")
    t.set_root(16385)
    root = t.get(ROOT_INODE)
    assert root is not None
    ino = t.child(root, "f", 20000)
    t.referenced(ino)
    t.referenced(ino)
    assert not t.forget(ino, 1) and t.get(ino) is not None
    assert t.forget(ino, 1) and t.get(ino) is None
    assert not t.forget(ROOT_INODE, 5) and t.get(ROOT_INODE) is not None
    snap = t.child(root, ".snapshot", 16385)
    t.referenced(snap)
    assert t.forget(snap, 1)
    assert t.child(root, ".snapshot", 16385) != snap  # a forgotten snapshot inode is not reused
