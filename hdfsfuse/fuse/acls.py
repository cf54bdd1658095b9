"""HDFS ACLs as Linux POSIX ACL xattrs (`system.posix_acl_access`, `system.posix_acl_default`).
Pure code, no I/O.

getAclStatus gives the permission bits and the *extended* entries only: named users and groups
and the unnamed group entry (access scope), and every default-scope entry. The owner, mask and
other entries of the access ACL live in the permission bits (the group bits are the mask once an
ACL exists), as in POSIX. The kernel's binary form (little-endian):

    +-------------+   +---------+---------+-----------+
    | version = 2 |   | tag u16 | perm u16| id u32    |  x entries, sorted by tag, then id
    +-------------+   +---------+---------+-----------+
      tags: USER_OBJ 0x01, USER 0x02, GROUP_OBJ 0x04, GROUP 0x08, MASK 0x10, OTHER 0x20

Named entries need a local uid or gid; a name with none cannot be shown and is left out.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from hdfsfuse.proto import hdfs_pb2

ACCESS_XATTR = b"system.posix_acl_access"
DEFAULT_XATTR = b"system.posix_acl_default"

USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
UNDEFINED_ID = 0xFFFFFFFF
_HEADER = struct.pack("<I", 2)
_ENTRY = struct.Struct("<HHI")

Entry = hdfs_pb2.AclEntryProto
IdOf = Callable[[str], int | None]  # a local uid/gid for an HDFS user/group name, or None


def access_acl(status: hdfs_pb2.AclStatusProto, uid_of: IdOf, gid_of: IdOf) -> bytes | None:
    """The access ACL in the kernel's form; None when the file has only its permission bits."""
    extended = [e for e in status.entries if e.scope == Entry.ACCESS]
    if not extended:
        return None
    perm = status.permission.perm
    entries = [(USER_OBJ, (perm >> 6) & 7, UNDEFINED_ID), (MASK, (perm >> 3) & 7, UNDEFINED_ID),
               (OTHER, perm & 7, UNDEFINED_ID)]
    if not any(e.type == Entry.GROUP and not e.name for e in extended):
        entries.append((GROUP_OBJ, (perm >> 3) & 7, UNDEFINED_ID))
    entries += _entries(extended, uid_of, gid_of)
    return _encode(entries)


def default_acl(status: hdfs_pb2.AclStatusProto, uid_of: IdOf, gid_of: IdOf) -> bytes | None:
    """A directory's default ACL in the kernel's form; None when it has none."""
    defaults = [e for e in status.entries if e.scope == Entry.DEFAULT]
    if not defaults:
        return None
    return _encode(_entries(defaults, uid_of, gid_of))


def _entries(entries: list[hdfs_pb2.AclEntryProto], uid_of: IdOf, gid_of: IdOf) -> list[tuple[int, int, int]]:
    out = []
    for e in entries:
        perm = int(e.permissions) & 7
        if e.type == Entry.USER:
            ident = uid_of(e.name) if e.name else UNDEFINED_ID
            tag = USER if e.name else USER_OBJ
        elif e.type == Entry.GROUP:
            ident = gid_of(e.name) if e.name else UNDEFINED_ID
            tag = GROUP if e.name else GROUP_OBJ
        elif e.type == Entry.MASK:
            ident, tag = UNDEFINED_ID, MASK
        else:
            ident, tag = UNDEFINED_ID, OTHER
        if ident is not None:
            out.append((tag, perm, ident))
    return out


def _encode(entries: list[tuple[int, int, int]]) -> bytes:
    unique = {(tag, ident): (tag, perm, ident) for tag, perm, ident in entries}  # later entries win
    entries = [unique[k] for k in sorted(unique)]  # by tag, then id: the kernel's order
    return _HEADER + b"".join(_ENTRY.pack(tag, perm, ident) for tag, perm, ident in entries)


def decode(raw: bytes) -> list[tuple[int, int, int]]:
    """(tag, perm, id) of a kernel-form ACL (tests and logs)."""
    if raw[:4] != _HEADER or (len(raw) - 4) % _ENTRY.size:
        raise ValueError("not a version-2 POSIX ACL")
    return [_ENTRY.unpack_from(raw, at) for at in range(4, len(raw), _ENTRY.size)]
