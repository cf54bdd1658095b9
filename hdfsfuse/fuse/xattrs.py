"""HDFS's own extended attributes and ACLs, as the mount shows them through getfattr and getfacl.

Does I/O (NameNode calls, as the caller). The ACL byte layout lives in `hdfsfuse.fuse.acls`.

- The mount's own: `user.hdfs.replication`, `user.hdfs.block_size`, `user.hdfs.blocks` (the
  block list as JSON), `user.hdfs.checksum` (computed by the DataNodes, no data read) and
  `user.hdfs.ec_policy` on files; `user.hdfs.encryption` on files in an encryption zone (JSON:
  the zone key's name, the file's key version and the cipher suite, never key material);
  `user.hdfsfuse.stats` (live stats as JSON) on the mount root.

- `user.NAME`: an HDFS xattr of the user namespace (listXAttrs for the names, getXAttrs for one
  value). Other HDFS namespaces (trusted, security, system, raw) are not shown.
- `system.posix_acl_access` / `system.posix_acl_default`: built from getAclStatus, asked only of
  files whose status has the HAS_ACL flag (the rest have their permission bits only).
- `user.hdfs.content_summary` (directories; JSON from getContentSummary: sizes, counts, quotas,
  so `du`-like answers need no tree walk) and `user.hdfs.storage_policy` (the policy in effect).
"""

from __future__ import annotations

import errno
import json
import logging
from collections.abc import Callable
from typing import Protocol

import pyfuse3

from hdfsfuse.client import HdfsClient
from hdfsfuse.encryption.info import FileEncryption
from hdfsfuse.erasure.codec import policy_name
from hdfsfuse.errors import AccessDenied, HdfsError
from hdfsfuse.fuse import acls
from hdfsfuse.fuse.attributes import Attributes
from hdfsfuse.fuse.boundary import RequestBoundary
from hdfsfuse.fuse.inodes import Entry
from hdfsfuse.fuse.owners import OwnerIds
from hdfsfuse.namenode.client import FileStatus, NameNodeClient
from hdfsfuse.proto import hdfs_pb2

log = logging.getLogger(__name__)

USER = hdfs_pb2.XAttrProto.USER
HAS_ACL = hdfs_pb2.HdfsFileStatusProto.HAS_ACL
IS_DIR = hdfs_pb2.HdfsFileStatusProto.IS_DIR
IS_FILE = hdfs_pb2.HdfsFileStatusProto.IS_FILE
ACL_NAMES = (acls.ACCESS_XATTR, acls.DEFAULT_XATTR)
CONTENT_SUMMARY = b"user.hdfs.content_summary"
STORAGE_POLICY = b"user.hdfs.storage_policy"
FACTS = (CONTENT_SUMMARY, STORAGE_POLICY)
STATS_XATTR = b"user.hdfsfuse.stats"  # on the mount root: live stats as JSON
CHECKSUM_XATTR = b"user.hdfs.checksum"  # computed on demand by the DataNodes (no data read)
FILE_XATTRS = (b"user.hdfs.replication", b"user.hdfs.block_size", b"user.hdfs.blocks", CHECKSUM_XATTR)
EC_XATTR = b"user.hdfs.ec_policy"  # files and directories with an erasure-coding policy
ENCRYPTION_XATTR = b"user.hdfs.encryption"  # files in an encryption zone: key and key version names
XATTR_SIZE_MAX = 65536  # the kernel's cap on one extended attribute value


def _signed(value: int) -> int:
    """Quotas travel as uint64; Hadoop's -1 (no quota) arrives as 2^64 - 1."""
    return value - (1 << 64) if value >= 1 << 63 else value


def facts_for(st: FileStatus) -> list[bytes]:
    """Which of the computed facts a file or directory has."""
    return list(FACTS) if st.fileType == IS_DIR else [STORAGE_POLICY]


async def fact_value(nn: NameNodeClient, nn_path: str, st: FileStatus, name: bytes) -> bytes | None:
    """A computed fact (content summary, storage policy), or None when it does not apply."""
    if name == STORAGE_POLICY:
        return (await nn.get_storage_policy(nn_path)).name.encode()
    if st.fileType != IS_DIR:
        return None
    cs = await nn.get_content_summary(nn_path)
    summary: dict[str, object] = {
        "length": cs.length, "files": cs.fileCount, "directories": cs.directoryCount,
        "quota": _signed(cs.quota), "space_consumed": cs.spaceConsumed, "space_quota": _signed(cs.spaceQuota),
        "type_quotas": {hdfs_pb2.StorageTypeProto.Name(t.type): {"quota": _signed(t.quota), "consumed": t.consumed}
                        for t in cs.typeQuotaInfos.typeQuotaInfo if _signed(t.quota) >= 0},  # the types with one
    }
    if cs.erasureCodingPolicy:
        summary["erasure_coding_policy"] = cs.erasureCodingPolicy
    return json.dumps(summary).encode()


async def names(nn: NameNodeClient, nn_path: str, st: FileStatus) -> list[bytes]:
    """The HDFS user xattrs of a file or directory, and its ACL xattrs when it has an ACL.

    A NameNode with xattrs turned off (`dfs.namenode.xattrs.enabled=false`), or one that will
    not list them to this caller, just has none to show: listing names never fails for it.
    """
    try:
        listed = await nn.list_xattrs(nn_path)
    except HdfsError as e:
        if not isinstance(e, AccessDenied) and "XAttr" not in str(e):
            raise
        log.debug("listXAttrs %s: %s", nn_path, e)
        listed = []
    found = [b"user." + x.name.encode() for x in listed if x.namespace == USER]
    if st.flags & HAS_ACL:
        found.append(acls.ACCESS_XATTR)
        if st.fileType == IS_DIR:
            found.append(acls.DEFAULT_XATTR)
    return found


async def user_value(nn: NameNodeClient, nn_path: str, name: bytes) -> bytes | None:
    """The value of HDFS xattr `user.NAME` (`name` without the prefix), or None."""
    return await nn.get_xattr(nn_path, USER, name.decode(errors="surrogateescape"))


async def acl_value(nn: NameNodeClient, nn_path: str, st: FileStatus, name: bytes, uid_of: acls.IdOf,
                    gid_of: acls.IdOf) -> bytes | None:
    """An ACL xattr in the kernel's form, or None when the file has no such ACL."""
    if not st.flags & HAS_ACL or (name == acls.DEFAULT_XATTR and st.fileType != IS_DIR):
        return None
    status = await nn.get_acl_status(nn_path)
    if name == acls.ACCESS_XATTR:
        return acls.access_acl(status, uid_of, gid_of)
    return acls.default_acl(status, uid_of, gid_of)


async def blocks_value(nn: NameNodeClient, nn_path: str, shown: str, window: int) -> bytes:
    """user.hdfs.blocks: the block list as JSON, fetched `window` bytes of file at a time.

    The kernel caps an xattr value at 64 KiB: a longer list is E2BIG, found without asking
    the NameNode for the whole file's locations.
    """
    blocks: list[dict[str, object]] = []
    size, offset = 2, 0
    while True:
        lbs = await nn.get_block_locations(nn_path, offset, window)
        fresh = [b for b in lbs.blocks if b.offset >= offset]
        for b in fresh:
            item: dict[str, object] = {"offset": b.offset, "length": b.b.numBytes,
                                       "hosts": [f"{loc.id.hostName}:{loc.id.xferPort}" for loc in b.locs]}
            if b.HasField("blockIndices"):  # a striped group: the internal block index on each host
                item["indices"] = list(b.blockIndices)
            size += len(json.dumps(item)) + 2
            if size > XATTR_SIZE_MAX:
                log.warning("%s: user.hdfs.blocks would be over %d bytes (E2BIG)", shown, XATTR_SIZE_MAX)
                raise pyfuse3.FUSEError(errno.E2BIG)
            blocks.append(item)
        if not fresh or (lbs.HasField("lastBlock") and fresh[-1].b.blockId == lbs.lastBlock.b.blockId):
            return json.dumps(blocks).encode()
        offset = fresh[-1].offset + max(1, fresh[-1].b.numBytes)


class Handlers(Protocol):
    """What the xattr handlers use of the FUSE operations (`hdfsfuse.fuse.operations.HdfsOperations`)."""

    attributes: Attributes
    boundary: RequestBoundary
    owners: OwnerIds

    def entry(self, inode: int) -> Entry: ...

    def caller_namenode(self, ctx: pyfuse3.RequestContext | None) -> NameNodeClient: ...


class ExtendedAttributes:
    """listxattr and getxattr of the mount: its own attributes, NameNode facts, ACLs and user xattrs."""

    def __init__(self, ops: Handlers, client: HdfsClient, stats_snapshot: Callable[[], dict[str, object]]) -> None:
        self.ops = ops
        self.client = client
        self.stats_snapshot = stats_snapshot

    async def _status(self, inode: int, ctx: pyfuse3.RequestContext) -> FileStatus:
        fresh = self.ops.attributes.fresh(inode)
        if fresh is not None:
            return fresh.status
        st = await self.ops.caller_namenode(ctx).get_file_link_info(self.ops.entry(inode).nn_path)
        if st is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        self.ops.attributes.store(inode, st)
        return st

    async def list(self, inode: int, ctx: pyfuse3.RequestContext) -> list[bytes]:
        if inode == pyfuse3.ROOT_INODE:
            return [STATS_XATTR]
        entry = self.ops.entry(inode)
        with self.ops.boundary.request("listxattr", entry):
            st = await self._status(inode, ctx)
            hdfs_names = await names(self.ops.caller_namenode(ctx), entry.nn_path, st)
        shown = (list(FILE_XATTRS) if st.fileType == IS_FILE else []) + facts_for(st)
        if st.HasField("ecPolicy"):
            shown.append(EC_XATTR)
        if st.HasField("fileEncryptionInfo"):
            shown.append(ENCRYPTION_XATTR)
        return shown + [n for n in hdfs_names if n not in shown]

    async def get(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        if name == EC_XATTR:
            with self.ops.boundary.request("getxattr", self.ops.entry(inode)):
                st = await self._status(inode, ctx)
            if not st.HasField("ecPolicy"):
                raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
            return policy_name(st.ecPolicy).encode()
        if name == ENCRYPTION_XATTR:
            with self.ops.boundary.request("getxattr", self.ops.entry(inode)):
                st = await self._status(inode, ctx)
                if not st.HasField("fileEncryptionInfo"):
                    raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
                info = FileEncryption.from_proto(self.ops.entry(inode).shown, st.fileEncryptionInfo)
            return json.dumps(info.describe()).encode()
        if name not in FILE_XATTRS:
            if inode == pyfuse3.ROOT_INODE and name == STATS_XATTR:
                return json.dumps(self.stats_snapshot()).encode()
            if name.startswith(b"user.") or name in ACL_NAMES:
                return await self._hdfs_xattr(inode, name, ctx)
            # No security labels here. EOPNOTSUPP (not ENODATA) lets tools like `ls -l`
            # remember that for the whole mount instead of asking for every entry.
            raise pyfuse3.FUSEError(errno.EOPNOTSUPP)
        entry = self.ops.entry(inode)
        with self.ops.boundary.request("getxattr", entry):
            st = await self._status(inode, ctx)
            if st.fileType != IS_FILE:
                raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
            if name == b"user.hdfs.replication":
                return str(st.block_replication).encode()
            if name == b"user.hdfs.block_size":
                return str(st.blocksize).encode()
            if name == CHECKSUM_XATTR:
                file = await self.client.open(entry.nn_path, namenode=self.ops.caller_namenode(ctx))
                return (await self.client.file_checksum(file)).encode()
            window = 10 * (st.blocksize or 128 * 1024 * 1024)
            return await blocks_value(self.ops.caller_namenode(ctx), entry.nn_path, entry.shown, window)

    async def _hdfs_xattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        """A NameNode fact, an ACL or an HDFS user xattr (`hdfsfuse.fuse.xattrs`); ENODATA when none."""
        entry = self.ops.entry(inode)
        with self.ops.boundary.request("getxattr", entry):
            nn = self.ops.caller_namenode(ctx)
            if name in FACTS:
                value = await fact_value(nn, entry.nn_path, await self._status(inode, ctx), name)
            elif name in ACL_NAMES:
                st = await self._status(inode, ctx)
                value = await acl_value(nn, entry.nn_path, st, name, self.ops.owners.known_user,
                                               self.ops.owners.known_group)
            else:
                value = await user_value(nn, entry.nn_path, name[len(b"user.") :])
        if value is None:
            raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
        return value
