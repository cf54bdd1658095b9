"""HDFS ACLs as POSIX ACL xattr values: entries ordered, unknown names dropped."""

from __future__ import annotations

import pytest

from hdfsfuse.fuse import acls

# ----- the pure conversion ---------------------------------------------------------------------

def _status(perm: int, *entries: tuple[int, int, int, str]) -> object:
    from hdfsfuse.proto import hdfs_pb2

    st = hdfs_pb2.AclStatusProto(owner="o", group="g", sticky=False, permission=hdfs_pb2.FsPermissionProto(perm=perm))
    for scope, kind, perm_bits, name in entries:
        st.entries.add(scope=scope, type=kind, permissions=perm_bits, name=name)
    return st


def test_the_conversion_orders_entries_and_drops_unknown_names() -> None:
    from hdfsfuse.proto import hdfs_pb2

    e = hdfs_pb2.AclEntryProto
    ids = {"ann": 1001, "bob": 1000, "ops": 50}.get
    assert acls.access_acl(_status(0o644), ids, ids) is None  # permission bits only
    st = _status(0o750, (e.ACCESS, e.USER, 4, "ann"), (e.ACCESS, e.GROUP, 1, "ops"), (e.ACCESS, e.USER, 6, "bob"),
                 (e.ACCESS, e.USER, 7, "ghost"), (e.DEFAULT, e.OTHER, 0, ""))
    assert acls.decode(acls.access_acl(st, ids, ids) or b"") == [
        (acls.USER_OBJ, 7, acls.UNDEFINED_ID), (acls.USER, 6, 1000), (acls.USER, 4, 1001),
        (acls.GROUP_OBJ, 5, acls.UNDEFINED_ID), (acls.GROUP, 1, 50), (acls.MASK, 5, acls.UNDEFINED_ID),
        (acls.OTHER, 0, acls.UNDEFINED_ID)]  # no unnamed group entry: the group bits stand in
    assert acls.decode(acls.default_acl(st, ids, ids) or b"") == [(acls.OTHER, 0, acls.UNDEFINED_ID)]
    with pytest.raises(ValueError, match="version-2"):
        acls.decode(b"\x01\x00\x00\x00")


