"""HDFS's own extended attributes and ACLs, as the mount shows them through getfattr and getfacl.

Does I/O (NameNode calls, as the caller). The mount's own `user.hdfs.*` attributes live in
`hdfsfuse.fs`; the ACL byte layout lives in `hdfsfuse.acls`.

- `user.NAME`: an HDFS xattr of the user namespace (listXAttrs for the names, getXAttrs for one
  value). Other HDFS namespaces (trusted, security, system, raw) are not shown.
- `system.posix_acl_access` / `system.posix_acl_default`: built from getAclStatus, asked only of
  files whose status has the HAS_ACL flag (the rest have their permission bits only).
"""

from __future__ import annotations

from hdfsfuse import acls
from hdfsfuse.namenode import FileStatus, NameNodeClient
from hdfsfuse.proto import hdfs_pb2

USER = hdfs_pb2.XAttrProto.USER
HAS_ACL = hdfs_pb2.HdfsFileStatusProto.HAS_ACL
IS_DIR = hdfs_pb2.HdfsFileStatusProto.IS_DIR
ACL_NAMES = (acls.ACCESS_XATTR, acls.DEFAULT_XATTR)


async def names(nn: NameNodeClient, nn_path: str, st: FileStatus) -> list[bytes]:
    """The HDFS user xattrs of a file or directory, and its ACL xattrs when it has an ACL."""
    found = [b"user." + x.name.encode() for x in await nn.list_xattrs(nn_path) if x.namespace == USER]
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
