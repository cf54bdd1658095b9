"""Where an open file's blocks are: location windows merged into its pinned block map, and how far
a file being written can be read. Does I/O (NameNode and DataNode RPCs).

Locations are fetched a window at a time, on demand (`fill_gaps`), and merged into the file's
`BlockMap`, which refuses a block that changed under its id. The readable length of a block
being written comes from its DataNodes (getReplicaVisibleLength), as Java's DFSInputStream learns it.
"""

from __future__ import annotations

import logging

import trio
from google.protobuf.message import DecodeError

from hdfsfuse.client.files import HdfsFile
from hdfsfuse.client.located import LocatedFiles
from hdfsfuse.client.options import ClientOptions
from hdfsfuse.datanode.pieces import clamp
from hdfsfuse.errors import BlockUnavailable, FileChanged, FileNotFound, HdfsError, NotSupported
from hdfsfuse.namenode import ipc
from hdfsfuse.namenode.client import LocatedBlock, LocatedBlocks
from hdfsfuse.namenode.rpc import RpcConnection
from hdfsfuse.proto import hdfs_pb2
from hdfsfuse.security.credentials import RpcAuth
from hdfsfuse.stats import Stats

log = logging.getLogger(__name__)


class Locator:
    def __init__(self, *, user: str, options: ClientOptions, located: LocatedFiles, stats: Stats,
                 nursery: trio.Nursery) -> None:
        self.user = user  # asks DataNodes for the readable length of a block being written
        self.options = options
        self.located = located  # locations kept across opens: an open file asking again outdates them
        self.stats = stats
        self._nursery = nursery  # owns the short-lived DataNode RPC connections

    async def locate(self, file: HdfsFile, offset: int, length: int) -> LocatedBlocks:
        """Fetch the window of locations at `offset` and merge it into the file's pinned block map."""
        namenode = file.namenode
        try:
            lbs = await namenode.get_block_locations(file.locate_path, offset, max(length, file.window))
            if file.opened and not file.by_inode:
                status = await namenode.get_file_info(file.path)
                if status is None or status.fileId != file.file_id:
                    raise FileNotFound(file.path)
        except FileNotFound:
            if not file.opened:
                raise
            self.stats.files_changed += 1
            raise FileChanged(f"{file.path} was deleted or replaced since it was opened") from None
        if file.opened:  # a refused replica or an expired token sent an open file here: what was kept is stale
            self.located.forget(file.file_id)
        await self.apply(file, lbs)
        return lbs

    async def apply(self, file: HdfsFile, lbs: LocatedBlocks) -> None:
        """Merge an answer about the file's blocks (fetched now, or kept from an earlier one)."""
        if lbs.HasField("ecPolicy") != (file.ec_policy is not None):
            self.stats.files_changed += 1
            raise FileChanged(f"{file.path} changed since it was opened: its blocks are "
                              f"{'now' if lbs.HasField('ecPolicy') else 'no longer'} erasure-coded")
        if file.ec_policy is not None and lbs.underConstruction:
            raise NotSupported(f"{file.path}: reading an erasure-coded file while it is being written is not "
                               "supported")
        encrypted = lbs.HasField("fileEncryptionInfo")
        if encrypted != (file.encryption is not None) or (
                file.encryption is not None and lbs.fileEncryptionInfo.iv != file.encryption.iv):
            self.stats.files_changed += 1
            raise FileChanged(f"{file.path} changed since it was opened: its encryption is not the same")
        blocks = list(lbs.blocks)
        length = lbs.fileLength
        unknown = ""
        if lbs.HasField("lastBlock"):
            last = hdfs_pb2.LocatedBlockProto()
            last.CopyFrom(lbs.lastBlock)
            if lbs.underConstruction and not lbs.isLastBlockComplete:
                visible, unknown = await self._visible_length(file.path, last)
                last.b.numBytes = visible
                length = lbs.fileLength + visible
            blocks = [b for b in blocks if b.b.blockId != last.b.blockId]
            if last.b.numBytes or last.locs:
                blocks.append(last)
        try:
            changed = file.map.merge(blocks)
        except FileChanged:
            self.stats.files_changed += 1
            raise
        file.forget_plans(changed)
        file.freshness.note(changed, trio.current_time())
        file.length = length
        file.under_construction = bool(lbs.underConstruction)
        file.length_unknown = unknown
        file.length_checked = trio.current_time()

    async def fill_gaps(self, file: HdfsFile, offset: int, n: int) -> None:
        """Fetch location windows until [offset, offset+n) is known (each window moves forward)."""
        gap = file.map.first_gap(offset, n)
        while gap is not None:
            await self.locate(file, gap, offset + n - gap)
            n = clamp(offset, n, file.length)
            after = file.map.first_gap(offset, n)
            if after is not None and after <= gap:
                self.stats.files_changed += 1
                raise FileChanged(f"{file.path} changed since it was opened: no block holds offset {after}")
            gap = after

    async def grow(self, file: HdfsFile, *, strict: bool = True) -> None:
        """For a file being written: learn how far it can be read now (rate-limited).

        `strict` (a read at or past the known end): raise when the readable length cannot be
        known, rather than answer a silently short end of file.
        """
        if not file.under_construction:
            return
        if trio.current_time() - file.length_checked >= self.options.length_refresh_seconds:
            await self.locate(file, max(0, file.length - 1), 1)
        if strict and file.length_unknown:
            raise BlockUnavailable(file.length_unknown)

    async def _visible_length(self, path: str, last: LocatedBlock) -> tuple[int, str]:
        """The readable length of a block being written, as Java's DFSInputStream learns it.

        Returns (length, "") or, when no DataNode can say, (the NameNode's figure, why not).
        """
        if not last.locs:
            if last.b.numBytes:
                return last.b.numBytes, f"{path}: the block being written has no locations yet"
            return 0, ""
        errors = []
        for loc in last.locs:
            # With block tokens on, ClientDatanodeProtocol authenticates with the block token (SASL).
            conn = RpcConnection(
                loc.id.ipAddr, loc.id.ipcPort, nursery=self._nursery,
                auth=RpcAuth(self.user, token=last.blockToken if last.blockToken.identifier else None),
                protocol=ipc.DATANODE_PROTOCOL, connect_timeout=self.options.timeouts.connect,
            )
            try:
                body = await conn.call(
                    "getReplicaVisibleLength",
                    hdfs_pb2.GetReplicaVisibleLengthRequestProto(block=last.b).SerializeToString(),
                    timeout=self.options.timeouts.read,
                )
                return hdfs_pb2.GetReplicaVisibleLengthResponseProto.FromString(body).length, ""
            except (HdfsError, DecodeError) as e:
                errors.append(f"{loc.id.ipAddr}:{loc.id.ipcPort}: {e}")
            finally:
                await conn.aclose()
        why = f"{path}: no DataNode gave the readable length of block {last.b.blockId}: {'; '.join(errors)}"
        log.warning("%s", why)
        return last.b.numBytes, why
