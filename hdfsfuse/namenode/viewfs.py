"""A viewfs mount table as one NameNode: typed methods routed to the namespace that holds each path.

    HdfsOperations ──> ViewNameNode.get_file_info("/user/logs/a")
                          │  MountTable.resolve
                          ├── Link(hdfs://ns1, /logs/a) ──> NameNodeClient(ns1).get_file_info("/logs/a")
                          └── Internal("/user", ...)    ──> a directory made here (0555, the mount's user)

Owns: one `NameNodeClient` per namespace the table names (each with its own HA failover and
observer reads), the statuses and listings of the table's internal directories (mount points
listed with their targets' real statuses, beside the fallback's entries), and `route()`, which
gives an open file the namespace and path it lives at, so its block locations, tokens, bad-block
reports, data-encryption keys and inode-path pinning all stay with that namespace. statfs, which
names no file, asks the primary namespace (the merge-slash or fallback target, else the first
link's), then the others.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager

from hdfsfuse.conf.hadoop import ViewTarget
from hdfsfuse.conf.mounttable import Internal, Link
from hdfsfuse.errors import FileNotFound, HdfsError, NotSupported
from hdfsfuse.namenode.client import FileStatus, LocatedBlocks, NameNodeClient, list_pages
from hdfsfuse.proto import hdfs_pb2
from hdfsfuse.security.credentials import RpcAuth

log = logging.getLogger(__name__)

INTERNAL_DIR_MODE = 0o555  # as ViewFileSystem shows its internal directories
NO_QUOTA = (1 << 64) - 1  # Hadoop's -1 in the summary's uint64 quota fields


class ViewNameNode:
    """The NameNode surface the mount uses, over every namespace of a viewfs mount table."""

    def __init__(self, target: ViewTarget, namespaces: dict[str, NameNodeClient]) -> None:
        self.target = target
        self.namespaces = namespaces
        self.primary = namespaces[target.table.targets()[0]]
        self.user = self.primary.user
        self.created_ms = int(time.time() * 1000)

    @classmethod
    @asynccontextmanager
    async def open(cls, target: ViewTarget, auths: dict[str, RpcAuth], **kwargs: float) -> AsyncIterator[ViewNameNode]:
        """A client per namespace (`auths`: each one's login recipe), closed together."""
        async with AsyncExitStack() as stack:
            clients = {
                uri: await stack.enter_async_context(NameNodeClient.open(ns, auth=auths[uri], **kwargs))
                for uri, ns in target.namespaces.items()
            }
            yield cls(target, clients)

    # ----- what the mount reads of a NameNode client ----------------------------------------------

    @property
    def total_timeout(self) -> float:
        return self.primary.total_timeout

    @contextmanager
    def bounded(self, seconds: float) -> Iterator[None]:
        """Every namespace's calls made inside give up after at most `seconds`."""
        with ExitStack() as stack:
            for client in self.namespaces.values():
                stack.enter_context(client.bounded(seconds))
            yield

    @property
    def call_timeout(self) -> float:
        return self.primary.call_timeout

    @property
    def connect_timeout(self) -> float:
        return self.primary.connect_timeout

    @property
    def calls(self) -> collections.Counter[str]:
        return sum((c.calls for c in self.namespaces.values()), collections.Counter())

    @property
    def calls_by_role(self) -> collections.Counter[str]:
        return sum((c.calls_by_role for c in self.namespaces.values()), collections.Counter())

    @property
    def failovers(self) -> int:
        return sum(c.failovers for c in self.namespaces.values())

    @property
    def connects(self) -> int:
        return sum(c.connects for c in self.namespaces.values())

    @property
    def active_address(self) -> str:
        return self.primary.active_address

    async def close_connections(self) -> None:
        for client in self.namespaces.values():
            await client.close_connections()

    # ----- routing ----------------------------------------------------------------------------

    def route(self, path: str) -> tuple[NameNodeClient, str]:
        """The namespace holding the file at view path `path`, and its path there."""
        where = self._where(path)
        if isinstance(where, Internal):
            raise FileNotFound(f"{path}: a directory of the viewfs mount table, not a file")
        return where

    def _where(self, path: str) -> tuple[NameNodeClient, str] | Internal:
        """The namespace and path holding view path `path`, or the table's own directory."""
        where = self.target.table.resolve(path)
        if isinstance(where, Link):
            return self.namespaces[where.target], where.remote
        return where

    # ----- statuses and listings ----------------------------------------------------------------

    def _internal_status(self, directory: Internal, name: str = "") -> FileStatus:
        return hdfs_pb2.HdfsFileStatusProto(
            fileType=hdfs_pb2.HdfsFileStatusProto.IS_DIR, path=name.encode("utf-8", "surrogateescape"), length=0,
            permission=hdfs_pb2.FsPermissionProto(perm=INTERNAL_DIR_MODE), owner=self.user, group=self.user,
            modification_time=self.created_ms, access_time=self.created_ms, fileId=0,
            childrenNum=len(directory.children),
        )

    async def get_file_info(self, path: str) -> FileStatus | None:
        return await self._status(path, link_info=False)

    async def get_file_link_info(self, path: str) -> FileStatus | None:
        return await self._status(path, link_info=True)

    async def _status(self, path: str, *, link_info: bool) -> FileStatus | None:
        try:
            where = self._where(path)
        except FileNotFound:
            return None
        if isinstance(where, Internal):
            return self._internal_status(where)
        client, remote = where
        return await (client.get_file_link_info(remote) if link_info else client.get_file_info(remote))

    async def list_dir(self, path: str, max_pages: int | None = None) -> list[FileStatus]:
        """Every entry of a view directory (`list_pages`)."""
        return await list_pages(self, path, max_pages)

    async def get_listing_page(self, path: str, start_after: bytes = b"", *, need_location: bool = False
                               ) -> hdfs_pb2.DirectoryListingProto:
        where = self._where(path)
        if not isinstance(where, Internal):
            client, remote = where
            return await client.get_listing_page(remote, start_after, need_location=need_location)
        return await self._internal_listing(where, start_after)

    async def _internal_listing(self, directory: Internal, start_after: bytes) -> hdfs_pb2.DirectoryListingProto:
        """Mount points with their targets' statuses (a missing target shows as an empty
        directory, as Java's view does), then the fallback's own entries of that directory."""
        entries: dict[bytes, FileStatus] = {}
        for name in directory.children:
            child = f"{directory.path.rstrip('/')}/{name}"
            status = await self.get_file_info(child)
            if status is None:
                status = self._internal_status(Internal(child, (), None), name)
            status.path = name.encode("utf-8", "surrogateescape")
            entries[status.path] = status
        if directory.fallback is not None:
            fallback = self.namespaces[directory.fallback.target]
            try:
                for status in await fallback.list_dir(directory.fallback.remote):
                    entries.setdefault(status.path, status)
            except FileNotFound:
                pass
        listing = [entries[name] for name in sorted(entries) if name > start_after]
        return hdfs_pb2.DirectoryListingProto(partialListing=listing, remainingEntries=0)

    # ----- facts ------------------------------------------------------------------------------

    async def get_block_locations(self, path: str, offset: int, length: int) -> LocatedBlocks:
        client, remote = self.route(path)
        return await client.get_block_locations(remote, offset, length)

    async def list_xattrs(self, path: str) -> list[hdfs_pb2.XAttrProto]:
        where = self._where(path)
        return [] if isinstance(where, Internal) else await where[0].list_xattrs(where[1])

    async def get_xattr(self, path: str, namespace: int, name: str) -> bytes | None:
        where = self._where(path)
        return None if isinstance(where, Internal) else await where[0].get_xattr(where[1], namespace, name)

    async def get_acl_status(self, path: str) -> hdfs_pb2.AclStatusProto:
        where = self._where(path)
        if isinstance(where, Internal):
            return hdfs_pb2.AclStatusProto(owner=self.user, group=self.user, stickyBit=False,
                                           permission=hdfs_pb2.FsPermissionProto(perm=INTERNAL_DIR_MODE))
        return await where[0].get_acl_status(where[1])

    async def get_content_summary(self, path: str) -> hdfs_pb2.ContentSummaryProto:
        """A mount-table directory sums its mount points (and the fallback's same directory)."""
        where = self._where(path)
        if not isinstance(where, Internal):
            return await where[0].get_content_summary(where[1])
        total = hdfs_pb2.ContentSummaryProto(length=0, fileCount=0, directoryCount=1, quota=NO_QUOTA,
                                             spaceConsumed=0, spaceQuota=NO_QUOTA)
        parts = [await self.get_content_summary(f"{where.path.rstrip('/')}/{name}") for name in where.children]
        if where.fallback is not None:
            try:
                parts.append(await self.namespaces[where.fallback.target].get_content_summary(where.fallback.remote))
            except FileNotFound:
                pass
        for part in parts:
            total.length += part.length
            total.fileCount += part.fileCount
            total.directoryCount += part.directoryCount
            total.spaceConsumed += part.spaceConsumed
        return total

    async def get_storage_policy(self, path: str) -> hdfs_pb2.BlockStoragePolicyProto:
        where = self._where(path)
        if isinstance(where, Internal):
            raise NotSupported(f"{path}: a directory of the viewfs mount table has no storage policy")
        return await where[0].get_storage_policy(where[1])

    async def get_fs_stats(self) -> hdfs_pb2.GetFsStatsResponseProto:
        """The primary namespace's figures (federated namespaces share their DataNodes); the
        next namespace's when it does not answer."""
        clients = [self.primary, *(c for c in self.namespaces.values() if c is not self.primary)]
        for client in clients[:-1]:
            try:
                return await client.get_fs_stats()
            except HdfsError as e:
                log.warning("statfs: %s did not answer (%s); asking the next namespace", client.target.label, e)
        return await clients[-1].get_fs_stats()
