"""What the mount keeps about names and files, and what forgets it when the NameNode says a
name or a file changed: the kernel-facing attributes, absent names, names from listings and
block locations kept across opens. Used by the request handlers (a file gone from its name)
and by live invalidation (`-o inotify`: the edit stream). Pure bookkeeping over those parts.
"""

from __future__ import annotations

from hdfsfuse.client.located import LocatedFiles
from hdfsfuse.fuse.attributes import Attributes, NegativeCache
from hdfsfuse.fuse.inodes import Entry, InodeTable
from hdfsfuse.fuse.names import NameCache


class MountCaches:
    """The caches a change makes stale, forgotten together."""

    def __init__(self, inodes: InodeTable, attributes: Attributes, negative: NegativeCache, names: NameCache,
                 located: LocatedFiles) -> None:
        self.inodes = inodes
        self.attributes = attributes
        self.negative = negative
        self.names = names
        self.located = located

    def forget_cached(self, inode: int | None, parent: int | None, name: str) -> None:
        """Drop our cached attributes of `inode` and `parent`, and a cached absence or status of
        `name` in `parent` (live invalidation: the NameNode says they changed)."""
        for known in (inode, parent):
            if known is not None:
                self.attributes.forget(known)
        if inode is not None:
            self.located.forget(inode)
        if parent is not None:
            raw = name.encode("utf-8", "surrogateescape")
            self.negative.forget((parent, raw))
            self.names.forget(parent, raw)

    def forget_path(self, path: str) -> None:
        """The NameNode says `path` changed: forget what listings said about it, whether or not
        the kernel holds it (live invalidation)."""
        self.names.forget_path(path)

    def forget_all(self) -> None:
        """The edit stream lost track: forget every kept name and location."""
        self.names.clear()
        self.located.clear()

    def forget_entry(self, entry: Entry) -> None:
        """The NameNode says this inode's file is gone from its name: ask again next time."""
        self.attributes.forget(entry.inode)
        self.located.forget(entry.inode)
        if entry.parent is not None:
            self.names.forget(entry.parent.inode, entry.name.encode("utf-8", "surrogateescape"))
