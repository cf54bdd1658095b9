"""The mount's attribute cache (`fuse.attributes.Attributes`): statuses kept serialized, entries
dropped once expired unless their inode is open."""

from __future__ import annotations

from hdfsfuse.conf.mount_options import MountOptions
from hdfsfuse.fuse.attributes import Attributes
from hdfsfuse.fuse.owners import OwnerIds
from hdfsfuse.proto import hdfs_pb2


def status(file_id: int, length: int = 10) -> hdfs_pb2.HdfsFileStatusProto:
    return hdfs_pb2.HdfsFileStatusProto(
        fileType=hdfs_pb2.HdfsFileStatusProto.IS_FILE, path=b"f", length=length, fileId=file_id, owner="u",
        group="g", permission=hdfs_pb2.FsPermissionProto(perm=0o644), modification_time=1, access_time=1)


def test_expired_entries_are_dropped_unless_open() -> None:
    open_inodes = {2}
    cache = Attributes(MountOptions(attr_timeout=0.0), OwnerIds(0, 0), "/", "/mnt", open_inodes.__contains__)
    for inode in (1, 2, 3):
        cache.store(inode, status(inode))
    # Expired at once (attr_timeout 0): each store dropped the ones before it, but for the open inode.
    assert cache.get(1) is None and cache.fresh(2) is None
    kept = cache.get(2)
    assert kept is not None and kept.status.fileId == 2 and kept.attrs.st_size == 10
    open_inodes.clear()
    cache.store(4, status(4))
    assert cache.get(2) is None and len(cache) == 0  # (the new entry expired at once too)


def test_fresh_entries_stay_and_give_their_status() -> None:
    cache = Attributes(MountOptions(attr_timeout=60.0), OwnerIds(0, 0), "/", "/mnt", lambda inode: False)
    for inode in range(1, 101):
        cache.store(inode, status(inode, length=inode))
    assert len(cache) == 100
    fresh = cache.fresh(7)
    assert fresh is not None and fresh.status == status(7, length=7) and fresh.attrs.st_size == 7


def test_many_open_files_cost_a_store_a_few_steps() -> None:
    open_inodes = set(range(1, 1001))
    cache = Attributes(MountOptions(attr_timeout=0.0), OwnerIds(0, 0), "/", "/mnt", open_inodes.__contains__)
    for inode in range(1, 1001):
        cache.store(inode, status(inode))
    open_inodes.clear()  # all closed: each store drops a few more of the expired ones
    stores = 0
    while len(cache) > 1:
        stores += 1
        cache.store(2000 + stores, status(2000 + stores))
    assert 1000 // 8 <= stores <= 1000 // 7 + 1
