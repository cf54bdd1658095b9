"""The NameNode client: typed ClientNamenodeProtocol methods, HA failover and retries.

Does I/O through `hdfsfuse.namenode.rpc.RpcConnection` (one per NameNode). Layering:

    typed method (3 lines) -> call(): failover / retry policy -> RpcConnection.call()

- StandbyException or a connection failure: move to the next NameNode and remember the one
  that answers.
- SafeModeException / RetriableException: back off and retry.
- Everything is bounded by `total_timeout`; giving up names every NameNode tried and why.
"""

from __future__ import annotations

import collections
import getpass
import logging
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Protocol, TypeVar

import trio
from google.protobuf.message import DecodeError, Message

from hdfsfuse.conf.hadoop import NameNodeTarget
from hdfsfuse.errors import (
    AuthenticationRequired,
    ConnectionLost,
    FileNotFound,
    HdfsError,
    NameNodeUnavailable,
    NotADirectory,
    ProtocolError,
    Retriable,
    RpcTimeout,
    StandbyNameNode,
)
from hdfsfuse.namenode.observers import COORDINATED_READS, ObserverReads
from hdfsfuse.namenode.rpc import RpcConnection, StateAlignment
from hdfsfuse.proto import hdfs_pb2
from hdfsfuse.security.credentials import RpcAuth

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)

FileStatus = hdfs_pb2.HdfsFileStatusProto
LocatedBlocks = hdfs_pb2.LocatedBlocksProto
LocatedBlock = hdfs_pb2.LocatedBlockProto


def resolve_user(explicit: str | None = None) -> str:
    """The HDFS user: an explicit option, else $HADOOP_USER_NAME, else the login name."""
    if explicit:
        return explicit
    if os.environ.get("HADOOP_USER_NAME"):
        return os.environ["HADOOP_USER_NAME"]
    return getpass.getuser()


class NameNodeClient:
    def __init__(
        self,
        target: NameNodeTarget,
        *,
        nursery: trio.Nursery,
        user: str | None = None,
        auth: RpcAuth | None = None,
        call_timeout: float = 20.0,
        total_timeout: float = 60.0,
        connect_timeout: float = 5.0,
    ) -> None:
        self.target = target
        self.auth = auth or RpcAuth(resolve_user(user))
        self.user = self.auth.user
        self.call_timeout = call_timeout
        self.total_timeout = total_timeout
        self.connect_timeout = connect_timeout
        alignment = StateAlignment() if target.observer_reads else None
        self._conns = [
            RpcConnection(host, port, auth=self.auth, nursery=nursery, connect_timeout=connect_timeout,
                          alignment=alignment)
            for host, port in target.addresses
        ]
        self.observers = ObserverReads(self._conns, self._msync) if target.observer_reads else None
        self._active = 0
        self._server_defaults: hdfs_pb2.FsServerDefaultsProto | None = None
        self.calls: collections.Counter[str] = collections.Counter()
        self.calls_by_role: collections.Counter[str] = collections.Counter()  # "observer" / "active"
        self.failovers = 0

    @contextmanager
    def bounded(self, seconds: float) -> Iterator[None]:
        """Calls made inside give up after at most `seconds` (a mount's preflight fails fast)."""
        kept = self.total_timeout
        self.total_timeout = min(kept, seconds)
        try:
            yield
        finally:
            self.total_timeout = kept

    @classmethod
    @asynccontextmanager
    async def open(cls, target: NameNodeTarget, **kwargs: object) -> AsyncIterator[NameNodeClient]:
        """A client whose connection reader tasks live in a nursery of its own.

        Reader tasks never raise, so an exception group here carries only the body's own
        exception; it is unwrapped so callers see the error they raised.
        """
        try:
            async with trio.open_nursery() as nursery:
                client = cls(target, nursery=nursery, **kwargs)  # type: ignore[arg-type]
                try:
                    yield client
                finally:
                    with trio.CancelScope(shield=True):
                        await client.aclose()
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    @property
    def active_address(self) -> str:
        return self._conns[self._active].address

    @property
    def connects(self) -> int:
        return sum(c.connects for c in self._conns)

    @property
    def router(self) -> bool:
        """A federation Router, by configuration or by its answers: files behind it are named by
        path (its fileIds are not unique, and /.reserved/.inodes paths do not resolve)."""
        return self.target.router or any(c.router for c in self._conns)

    def route(self, path: str) -> tuple[NameNodeClient, str]:
        """The client and path that hold the file at `path` (a viewfs mount routes; one
        NameNode holds everything)."""
        return self, path

    async def aclose(self) -> None:
        for conn in self._conns:
            await conn.aclose()

    async def close_connections(self) -> None:
        """Close the sockets but stay usable: a later call reconnects (an evicted identity that
        an open file still uses)."""
        for conn in self._conns:
            await conn.close_link()

    # ----- the generic call ---------------------------------------------------------------------

    async def call(self, method: str, request: Message, response_type: type[M]) -> M:
        """Call `method` on the active NameNode, failing over and retrying within the bound."""
        payload = request.SerializeToString()
        deadline = trio.current_time() + self.total_timeout
        if self.observers is not None and method in COORDINATED_READS:
            body = await self.observers.read(method, payload, min(self.call_timeout, self.total_timeout))
            if body is not None:
                self.calls[method] += 1
                self.calls_by_role["observer"] += 1
                return self._parse(method, body, response_type, "an observer")
        tried: dict[str, str] = {}
        failures_this_round = 0
        backoff = 0.05
        while True:
            remaining = deadline - trio.current_time()
            if remaining <= 0:
                detail = ", ".join(f"{addr} ({why})" for addr, why in tried.items()) or "none"
                raise NameNodeUnavailable(
                    f"{method}: no NameNode of {self.target.label} answered within "
                    f"{self.total_timeout:g}s; tried {detail}"
                )
            index = self._active
            conn = self._conns[index]
            try:
                self.calls[method] += 1
                self.calls_by_role["active"] += 1
                body = await conn.call(method, payload, timeout=min(self.call_timeout, remaining))
            except AuthenticationRequired:
                raise
            except (StandbyNameNode, ConnectionLost, RpcTimeout) as e:
                tried[conn.address] = "standby" if isinstance(e, StandbyNameNode) else str(e)
                failures_this_round += 1
                if len(self._conns) > 1:
                    self._failover(index, e)
                if failures_this_round >= len(self._conns):
                    failures_this_round = 0
                    await trio.sleep(min(backoff, max(0.0, deadline - trio.current_time())))
                    backoff = min(backoff * 2, 1.0)
                continue
            except Retriable as e:
                tried[conn.address] = str(e)
                log.info("%s on %s: %s; retrying in %.2fs", method, conn.address, e, backoff)
                await trio.sleep(min(backoff, max(0.0, deadline - trio.current_time())))
                backoff = min(backoff * 2, 2.0)
                continue
            return self._parse(method, body, response_type, conn.address)

    @staticmethod
    def _parse(method: str, body: bytes, response_type: type[M], source: str) -> M:
        response = response_type()
        try:
            response.ParseFromString(body)
        except DecodeError as e:
            raise ProtocolError(f"{method}: bad response from {source}: {e}") from None
        return response

    async def _msync(self) -> None:
        """Learn the active's state id before reading from an observer."""
        try:
            await self.call("msync", hdfs_pb2.MsyncRequestProto(), hdfs_pb2.MsyncResponseProto)
        except HdfsError as e:
            if "NoSuchMethod" not in e.java_class and "UnsupportedOperation" not in e.java_class:
                raise
            log.info("the NameNode has no msync (%s); observer reads rely on the state ids of other calls", e)

    def _failover(self, failed_index: int, why: Exception) -> None:
        if self._active == failed_index:
            self._active = (failed_index + 1) % len(self._conns)
            self.failovers += 1
            log.warning(
                "NameNode %s failed (%s); failing over to %s",
                self._conns[failed_index].address, why, self._conns[self._active].address,
            )

    # ----- typed methods ------------------------------------------------------------------------

    async def get_file_info(self, path: str) -> FileStatus | None:
        return await self._status("getFileInfo", hdfs_pb2.GetFileInfoRequestProto(src=path),
                                  hdfs_pb2.GetFileInfoResponseProto)

    async def get_file_link_info(self, path: str) -> FileStatus | None:
        return await self._status("getFileLinkInfo", hdfs_pb2.GetFileLinkInfoRequestProto(src=path),
                                  hdfs_pb2.GetFileLinkInfoResponseProto)

    async def _status(
        self, method: str, request: Message,
        response_type: type[hdfs_pb2.GetFileInfoResponseProto] | type[hdfs_pb2.GetFileLinkInfoResponseProto],
    ) -> FileStatus | None:
        r = await self.call(method, request, response_type)
        if not r.HasField("fs") and self.observers is not None:
            # An observer may not have applied another client's create yet: msync, ask again.
            await self.observers.sync()
            r = await self.call(method, request, response_type)
        return r.fs if r.HasField("fs") else None

    async def sync_for_open(self) -> None:
        """Close-to-open consistency with observer reads: see every write made before this open."""
        if self.observers is not None:
            await self.observers.sync()

    async def get_listing_page(self, path: str, start_after: bytes = b"", *, need_location: bool = False
                               ) -> hdfs_pb2.DirectoryListingProto:
        """One page of a directory's entries after `start_after`. `need_location`: each file's
        status also carries its block locations (the NameNode then ends a page after about
        `dfs.ls.limit` block replicas rather than `dfs.ls.limit` entries)."""
        r = await self.call(
            "getListing",
            hdfs_pb2.GetListingRequestProto(src=path, startAfter=start_after, needLocation=need_location),
            hdfs_pb2.GetListingResponseProto,
        )
        if not r.HasField("dirList"):
            raise FileNotFound(f"{path}: no such directory")
        listing = r.dirList
        # A listing of a file is the file itself, with an empty name.
        if not start_after and len(listing.partialListing) == 1 and not listing.partialListing[0].path:
            raise NotADirectory(f"{path}: not a directory")
        return listing

    async def list_dir(self, path: str, max_pages: int | None = None) -> list[FileStatus]:
        """Every entry of a directory, all pages via startAfter; at most `max_pages` pages."""
        return await list_pages(self, path, max_pages)

    async def get_block_locations(self, path: str, offset: int, length: int) -> LocatedBlocks:
        r = await self.call(
            "getBlockLocations",
            hdfs_pb2.GetBlockLocationsRequestProto(src=path, offset=offset, length=length),
            hdfs_pb2.GetBlockLocationsResponseProto,
        )
        if not r.HasField("locations"):
            raise FileNotFound(f"{path}: file does not exist")
        return r.locations

    async def list_xattrs(self, path: str) -> list[hdfs_pb2.XAttrProto]:
        """The names (no values) of the extended attributes the caller may see."""
        r = await self.call("listXAttrs", hdfs_pb2.ListXAttrsRequestProto(src=path), hdfs_pb2.ListXAttrsResponseProto)
        return list(r.xAttrs)

    async def get_xattr(self, path: str, namespace: int, name: str) -> bytes | None:
        """One extended attribute's value, or None when the file has no such attribute."""
        request = hdfs_pb2.GetXAttrsRequestProto(src=path, xAttrs=[hdfs_pb2.XAttrProto(namespace=namespace, name=name)])
        try:
            r = await self.call("getXAttrs", request, hdfs_pb2.GetXAttrsResponseProto)
        except HdfsError as e:
            if e.java_class in ("org.apache.hadoop.hdfs.protocol.XAttrNotFoundException", "java.io.IOException") and (
                "attributes provided was not found" in str(e)
            ):
                return None  # Hadoop 3.5 says XAttrNotFoundException; older NameNodes a plain IOException
            raise
        return r.xAttrs[0].value if r.xAttrs else None

    async def get_acl_status(self, path: str) -> hdfs_pb2.AclStatusProto:
        r = await self.call("getAclStatus", hdfs_pb2.GetAclStatusRequestProto(src=path),
                            hdfs_pb2.GetAclStatusResponseProto)
        return r.result

    async def get_content_summary(self, path: str) -> hdfs_pb2.ContentSummaryProto:
        r = await self.call("getContentSummary", hdfs_pb2.GetContentSummaryRequestProto(path=path),
                            hdfs_pb2.GetContentSummaryResponseProto)
        return r.summary

    async def get_storage_policy(self, path: str) -> hdfs_pb2.BlockStoragePolicyProto:
        """The storage policy in effect for `path` (its own, or inherited)."""
        r = await self.call("getStoragePolicy", hdfs_pb2.GetStoragePolicyRequestProto(path=path),
                            hdfs_pb2.GetStoragePolicyResponseProto)
        return r.storagePolicy

    async def get_data_encryption_key(self) -> hdfs_pb2.DataEncryptionKeyProto | None:
        """The block pool's data-encryption key; None when block tokens are off (Java then skips
        the encrypted handshake too)."""
        r = await self.call("getDataEncryptionKey", hdfs_pb2.GetDataEncryptionKeyRequestProto(),
                            hdfs_pb2.GetDataEncryptionKeyResponseProto)
        return r.dataEncryptionKey if r.HasField("dataEncryptionKey") else None

    async def get_server_defaults(self) -> hdfs_pb2.FsServerDefaultsProto:
        if self._server_defaults is None:
            r = await self.call("getServerDefaults", hdfs_pb2.GetServerDefaultsRequestProto(),
                                hdfs_pb2.GetServerDefaultsResponseProto)
            self._server_defaults = r.serverDefaults
        return self._server_defaults

    async def current_edit_txid(self) -> int:
        """The last edit-log transaction id (inotify; the HDFS superuser only)."""
        r = await self.call("getCurrentEditLogTxid", hdfs_pb2.GetCurrentEditLogTxidRequestProto(),
                            hdfs_pb2.GetCurrentEditLogTxidResponseProto)
        return r.txid

    async def edits_from(self, txid: int) -> hdfs_pb2.EventsListProto:
        """The inotify events from edit `txid` on (the HDFS superuser only)."""
        r = await self.call("getEditsFromTxid", hdfs_pb2.GetEditsFromTxidRequestProto(txid=txid),
                            hdfs_pb2.GetEditsFromTxidResponseProto)
        return r.eventsList

    async def get_fs_stats(self) -> hdfs_pb2.GetFsStatsResponseProto:
        return await self.call("getFsStats", hdfs_pb2.GetFsStatusRequestProto(),
                               hdfs_pb2.GetFsStatsResponseProto)

    async def get_link_target(self, path: str) -> str:
        r = await self.call("getLinkTarget", hdfs_pb2.GetLinkTargetRequestProto(path=path),
                            hdfs_pb2.GetLinkTargetResponseProto)
        if not r.HasField("targetPath"):
            raise FileNotFound(f"{path}: not a symlink")
        return r.targetPath

    async def report_bad_blocks(self, blocks: list[LocatedBlock]) -> None:
        await self.call("reportBadBlocks", hdfs_pb2.ReportBadBlocksRequestProto(blocks=blocks),
                        hdfs_pb2.ReportBadBlocksResponseProto)


__all__ = ["FileStatus", "HdfsError", "LocatedBlock", "LocatedBlocks", "NameNodeClient", "resolve_user"]


class Lists(Protocol):
    async def get_listing_page(self, path: str, start_after: bytes = b"", *, need_location: bool = False
                               ) -> hdfs_pb2.DirectoryListingProto: ...


async def list_pages(namenode: Lists, path: str, max_pages: int | None = None) -> list[FileStatus]:
    """Every entry of a directory, page after page (startAfter); at most `max_pages` pages."""
    entries: list[FileStatus] = []
    start_after = b""
    pages = 0
    while True:
        page = await namenode.get_listing_page(path, start_after)
        pages += 1
        entries.extend(page.partialListing)
        if page.remainingEntries == 0 or not page.partialListing:
            return entries
        if max_pages is not None and pages >= max_pages:
            log.warning("%s: listing truncated at %d pages (%d entries)", path, pages, len(entries))
            return entries
        start_after = page.partialListing[-1].path
