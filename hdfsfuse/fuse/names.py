"""What listings told about names, so that a later lookup, and the open after it, ask the NameNode
nothing. Pure code.

    (directory inode, name) -> (expiry, status)   what a listing page or a lookup said
    directory inode -> Order                      the names of its last listing, in order, and
                                                  the located windows planned over them
    directory path -> directory inode             to forget what the edit stream says changed

An entry answers lookups until its expiry: `ttl` after the NameNode gave it (entry_timeout), or,
with live invalidation, until the edit stream says the name changed (`until_changed`). At most
`capacity` entries are kept, the oldest dropped first.

An expired entry stays until it is replaced or dropped: a window fetched to renew it carries no
locations when its file's locations are still kept (`expired`), and is then the listing's page
of `LS_LIMIT` names that holds it.

**Located windows.** A listing that carries locations (getListing with needLocation) ends a
page after about `dfs.ls.limit` block replicas. Over a directory's listed order the windows are
planned the way the NameNode cuts such pages (`window_starts`), so that one located listing
answers every open in its window: the first open of a file in a window fetches the whole
window. In a directory with no listing, once two lookups in a row found files there (a loader is
walking it), a window is fetched from the next name on (`start_before`).
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import math

from hdfsfuse.proto import hdfs_pb2

FileStatus = hdfs_pb2.HdfsFileStatusProto
IS_FILE = hdfs_pb2.HdfsFileStatusProto.IS_FILE
WALK_HORIZON = 60.0  # seconds: lookups further apart than this (or ttl) are not one walk
LS_LIMIT = 1000  # dfs.ls.limit: entries per listing page, and block replicas per located page
_SIGNED = bytes((b ^ 0x80) for b in range(256))  # the NameNode orders names as signed bytes


def signed_key(name: bytes) -> bytes:
    """A key that sorts names the way the NameNode does (Java's signed byte comparison)."""
    return name.translate(_SIGNED)


def start_before(name: bytes) -> bytes:
    """A `startAfter` for a listing page that begins at `name` (or the names just before it)."""
    if not name:
        return b""
    last = name[-1]
    if last == 0x80:  # the least signed byte: drop it (the prefix sorts first)
        return name[:-1]
    return name[:-1] + bytes([(last - 1) & 0xFF])


def replicas(status: FileStatus) -> int:
    """The block replicas a located listing counts for `status` (the NameNode's page budget)."""
    if status.fileType != IS_FILE or status.length <= 0:
        return 0
    blocks = -(-status.length // status.blocksize) if status.blocksize else 1
    return blocks * max(1, status.block_replication)


def window_starts(costs: list[int], limit: int = LS_LIMIT) -> list[int]:
    """Where the NameNode would end located pages over entries of these costs (replicas each):
    a page takes entries while fewer than `limit` and while its budget of `limit` replicas is
    not spent (FSDirStatAndListingOp.getListing)."""
    starts = [0]
    budget, count = limit, 0
    for i, cost in enumerate(costs):
        if count == limit or budget <= 0:
            starts.append(i)
            budget, count = limit, 0
        budget -= cost
        count += 1
    return starts


@dataclasses.dataclass
class Order:
    """A directory's names as its last listing gave them (NameNode order), with their costs."""

    names: list[bytes] = dataclasses.field(default_factory=list)
    costs: list[int] = dataclasses.field(default_factory=list)
    _starts: list[int] | None = None

    def extend(self, statuses: list[FileStatus]) -> None:
        self.names.extend(s.path for s in statuses)
        self.costs.extend(replicas(s) for s in statuses)
        self._starts = None

    def window_after(self, name: bytes, *, located: bool = True) -> bytes | None:
        """The `startAfter` of the planned window that holds `name`; None when the listing did
        not have it (a name created since, or one that does not exist: one cheap lookup).

        A located window ends where the NameNode ends a located page; a plain one (`located`
        False: names only) is a page of `LS_LIMIT` names from the start of the listing."""
        at = bisect.bisect_left(self.names, signed_key(name), key=signed_key)
        if at == len(self.names) or self.names[at] != name:
            return None
        if not located:
            start = at - at % LS_LIMIT
        else:
            if self._starts is None:
                self._starts = window_starts(self.costs)
            start = self._starts[bisect.bisect_right(self._starts, at) - 1]
        return self.names[start - 1] if start > 0 else b""


class NameCache:
    def __init__(self, ttl: float, capacity: int) -> None:
        self.ttl = ttl
        self.capacity = capacity
        # Each status is kept serialized: a parsed one would keep its whole listing page alive.
        self._entries: collections.OrderedDict[tuple[int, bytes], tuple[float, bytes]] = collections.OrderedDict()
        self._orders: dict[int, Order] = {}
        self._paths: dict[str, int] = {}  # a directory's HDFS path when listed -> its inode
        self._walks: dict[int, tuple[float, int]] = {}  # directory -> (last lookup asked, files found in a row)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def enabled(self) -> bool:
        return self.capacity > 0

    def until_changed(self) -> None:
        """Live invalidation runs: entries live until the edit stream says they changed."""
        self.ttl = math.inf

    # ----- storing ------------------------------------------------------------------------------

    def store(self, directory: int, path: str, named: list[tuple[bytes, FileStatus]], now: float) -> None:
        """Remember what a page (or a lookup) of `directory`, at HDFS `path`, said about names."""
        if not self.enabled:
            return
        expiry = now + self.ttl
        self._paths[path] = directory
        for name, status in named:
            key = (directory, name)
            self._entries[key] = (expiry, status.SerializeToString())
            self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def listed(self, directory: int, start_after: bytes, statuses: list[FileStatus]) -> None:
        """A page of a plain listing walked from the start: extend the directory's order."""
        if not self.enabled:
            return
        order = self._orders.get(directory)
        if not start_after or order is None or not order.names or order.names[-1] != start_after:
            if start_after:
                return  # not walked from the start: no order to plan windows over
            order = self._orders[directory] = Order()
        order.extend(statuses)
        while sum(len(o.names) for o in self._orders.values()) > self.capacity and len(self._orders) > 1:
            del self._orders[next(iter(self._orders))]

    # ----- answering ----------------------------------------------------------------------------

    def get(self, directory: int, name: bytes, now: float) -> tuple[float, FileStatus] | None:
        """(expiry, status) of `name` while the entry is fresh."""
        found = self._entries.get((directory, name))
        if found is None or found[0] <= now:
            return None
        return found[0], FileStatus.FromString(found[1])

    def expired(self, directory: int, name: bytes) -> FileStatus | None:
        """The status an entry of `name` held, fresh or not: a hint, never an answer (a window
        renewing names whose files' locations are still kept need not carry locations)."""
        found = self._entries.get((directory, name))
        return FileStatus.FromString(found[1]) if found is not None else None

    def looked_up(self, directory: int, now: float, *, found: bool) -> None:
        """A lookup in `directory` was asked of the NameNode: it found a file, or nothing (a
        missing name ends a walk: probes for names that do not exist fetch no windows)."""
        if not self.enabled:
            return
        horizon = min(self.ttl, WALK_HORIZON)
        last, count = self._walks.get(directory, (-math.inf, 0))
        count = count + 1 if found and now - last < horizon else int(found)
        self._walks[directory] = (now, count)
        if len(self._walks) > self.capacity:
            self._walks = {d: w for d, w in self._walks.items() if now - w[0] < horizon}

    def window_after(self, directory: int, name: bytes, now: float, *, located: bool = True) -> bytes | None:
        """The `startAfter` of a window (`located`, or of names only) worth fetching for `name`, or None.

        Planned over the directory's listed order when the name is in it; else, from the name
        on, once two lookups in a row in this directory found files (a loader walking a
        directory it did not list), each within `ttl` of the one before."""
        if not self.enabled:
            return None
        order = self._orders.get(directory)
        if order is not None and order.names:
            return order.window_after(name, located=located)
        last, count = self._walks.get(directory, (-math.inf, 0))
        if count >= 2 and now - last < min(self.ttl, WALK_HORIZON):
            return start_before(name)
        return None

    # ----- forgetting ---------------------------------------------------------------------------

    def forget(self, directory: int, name: bytes) -> None:
        self._entries.pop((directory, name), None)

    def forget_path(self, path: str) -> None:
        """The edit stream says `path` changed: forget its entry, and whatever was listed at or
        under it (a renamed or deleted directory)."""
        parent, _, name = path.rpartition("/")
        directory = self._paths.get(parent or "/")
        if directory is not None:
            self.forget(directory, name.encode("utf-8", "surrogateescape"))
        below = [p for p in self._paths if p == path or p.startswith(path.rstrip("/") + "/")]
        for p in below:
            inode = self._paths.pop(p)
            self._orders.pop(inode, None)
            for key in [k for k in self._entries if k[0] == inode]:
                del self._entries[key]

    def clear(self) -> None:
        self._entries.clear()
        self._orders.clear()
        self._paths.clear()
        self._walks.clear()
