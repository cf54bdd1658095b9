"""HDFS's own extended attributes and ACLs through the real mount: user.* xattrs by getfattr and
os.getxattr, ACLs as system.posix_acl_access / _default in the kernel's binary form."""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from hdfsfuse.fuse import acls
from tests.conftest import random_bytes
from tests.minidfs import MiniDfs


def test_hdfs_user_xattrs_show_beside_ours(cluster: MiniDfs, data_dir: str, mount) -> None:  # type: ignore[no-untyped-def]
    cluster.put_bytes(random_bytes(1000, seed=190), f"{data_dir}/f")
    cluster.setxattr(f"{data_dir}/f", "user.color", "blue")
    cluster.setxattr(f"{data_dir}/f", "user.empty", "")
    cluster.setxattr(f"{data_dir}/f", "trusted.hidden", "x")  # another namespace: not shown
    cluster.setxattr(data_dir, "user.owner-team", "storage")
    m = mount(cluster)
    f = m.path(f"{data_dir}/f")
    assert set(os.listxattr(f)) == {"user.hdfs.replication", "user.hdfs.block_size", "user.hdfs.blocks",
                                    "user.hdfs.checksum", "user.hdfs.storage_policy", "user.color", "user.empty"}
    assert os.getxattr(f, "user.color") == b"blue"
    assert os.getxattr(f, "user.empty") == b""
    assert os.getxattr(m.path(data_dir), "user.owner-team") == b"storage"
    assert os.listxattr(m.path(data_dir)) == ["user.hdfs.content_summary", "user.hdfs.storage_policy",
                                              "user.owner-team"]
    with pytest.raises(OSError) as e:
        os.getxattr(f, "user.nope")
    assert e.value.errno == errno.ENODATA
    dump = subprocess.run(["getfattr", "-d", f], capture_output=True, text=True, check=True).stdout
    assert 'user.color="blue"' in dump and "user.hdfs.replication=" in dump


def test_acls_show_as_posix_acls(cluster: MiniDfs, data_dir: str, mount) -> None:  # type: ignore[no-untyped-def]
    cluster.put_bytes(random_bytes(1000, seed=191), f"{data_dir}/f")
    cluster.command("chmod", path=f"{data_dir}/f", mode="640")
    cluster.command("set_acl", path=f"{data_dir}/f", spec="user:nobody:r--,group:daemon:rw-,user:no-such-user:rwx")
    cluster.put_bytes(b"plain", f"{data_dir}/plain")  # before the default ACL: it inherits none
    cluster.command("set_acl", path=data_dir, spec="default:user:nobody:r-x,default:group::r--")
    m = mount(cluster)
    f = m.path(f"{data_dir}/f")
    assert "system.posix_acl_access" in os.listxattr(f)
    got = acls.decode(os.getxattr(f, "system.posix_acl_access"))
    nobody, daemon = 65534, 1
    # Owner rw-, named user nobody r--, the group entry (r--), named group daemon rw-, mask = the
    # group bits after setfacl (rw-: the union), other ---. The user with no local account is left out.
    assert got == [(acls.USER_OBJ, 6, acls.UNDEFINED_ID), (acls.USER, 4, nobody),
                   (acls.GROUP_OBJ, 4, acls.UNDEFINED_ID), (acls.GROUP, 6, daemon),
                   (acls.MASK, 7, acls.UNDEFINED_ID), (acls.OTHER, 0, acls.UNDEFINED_ID)]
    shown = subprocess.run(["getfacl", "-n", f], capture_output=True, text=True, check=True).stdout
    for line in ("user::rw-", "user:65534:r--", "group::r--", "group:1:rw-", "mask::rwx", "other::---"):
        assert line in shown.split(), shown
    default = acls.decode(os.getxattr(m.path(data_dir), "system.posix_acl_default"))
    assert (acls.USER, 5, nobody) in default and (acls.GROUP_OBJ, 4, acls.UNDEFINED_ID) in default
    with pytest.raises(OSError) as e:
        os.getxattr(m.path(f"{data_dir}/plain"), "system.posix_acl_access")  # permission bits only
    assert e.value.errno == errno.ENODATA
    assert "system.posix_acl_access" not in os.listxattr(m.path(f"{data_dir}/plain"))


def test_the_kernel_enforces_hdfs_acls_under_default_permissions(cluster: MiniDfs, data_dir: str, mount) -> None:  # type: ignore[no-untyped-def]
    data = cluster.put_bytes(random_bytes(3000, seed=192), f"{data_dir}/secret")
    cluster.command("chown", path=f"{data_dir}/secret", owner="root", group="root")
    cluster.command("chmod", path=f"{data_dir}/secret", mode="600")
    cluster.put_bytes(b"also secret", f"{data_dir}/closed")
    cluster.command("chown", path=f"{data_dir}/closed", owner="root", group="root")
    cluster.command("chmod", path=f"{data_dir}/closed", mode="600")
    cluster.command("set_acl", path=f"{data_dir}/secret", spec="user:nobody:r--")
    m = mount(cluster, "allow_other")  # with the mount's identity: the kernel checks permissions

    def read_as_nobody(path: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["runuser", "-u", "nobody", "--", "cat", path], capture_output=True)

    allowed = read_as_nobody(m.path(f"{data_dir}/secret"))  # mode 600, but the ACL grants nobody r--
    assert allowed.returncode == 0 and allowed.stdout == data, allowed.stderr
    denied = read_as_nobody(m.path(f"{data_dir}/closed"))  # mode 600 and no ACL
    assert denied.returncode != 0 and b"Permission denied" in denied.stderr


# ----- the pure conversion ---------------------------------------------------------------------


@pytest.mark.parametrize(("size", "block_size"), [(0, 1 << 20), (100, 1 << 20), (3 * (1 << 20), 1 << 20),
                                                  (2_500_001, 256 * 1024), (777_777, 65536)])
def test_the_file_checksum_matches_javas_composite_crc(cluster: MiniDfs, data_dir: str, shared_mount,  # type: ignore[no-untyped-def]
                                                       size: int, block_size: int) -> None:
    import google_crc32c

    data = cluster.put_bytes(random_bytes(size, seed=size), f"{data_dir}/f", block_size=block_size)
    java = cluster.command("file_checksum", path=f"{data_dir}/f")
    ours = os.getxattr(shared_mount.path(f"{data_dir}/f"), "user.hdfs.checksum").decode()
    assert ours == f"{java['algorithm']} {java['bytes']}"
    if size:
        assert ours == f"COMPOSITE-CRC32C {google_crc32c.value(data):08x}"  # the CRC of the whole file
    blocks = len(cluster.blocks(f"{data_dir}/f"))
    assert blocks == -(-size // block_size)


def test_content_summaries_quotas_and_storage_policies(cluster: MiniDfs, data_dir: str, shared_mount) -> None:  # type: ignore[no-untyped-def]
    import json

    cluster.mkdir(f"{data_dir}/sub")
    cluster.put_bytes(random_bytes(1000, seed=193), f"{data_dir}/a", replication=2)
    cluster.put_bytes(random_bytes(2 * (1 << 20) + 1, seed=194), f"{data_dir}/sub/b", replication=3)
    cluster.command("set_quota", path=f"{data_dir}/sub", ns=100, space=64 << 20)
    cluster.command("set_storage_policy", path=f"{data_dir}/sub", policy="COLD")
    summary = json.loads(os.getxattr(shared_mount.path(data_dir), "user.hdfs.content_summary"))
    length = 1000 + 2 * (1 << 20) + 1
    assert summary == {"length": length, "files": 2, "directories": 2, "quota": -1,
                       "space_consumed": 1000 * 2 + (2 * (1 << 20) + 1) * 3, "space_quota": -1, "type_quotas": {}}
    sub = json.loads(os.getxattr(shared_mount.path(f"{data_dir}/sub"), "user.hdfs.content_summary"))
    assert (sub["quota"], sub["space_quota"], sub["files"], sub["directories"]) == (100, 64 << 20, 1, 1)
    assert os.getxattr(shared_mount.path(f"{data_dir}/sub/b"), "user.hdfs.storage_policy") == b"COLD"  # inherited
    assert os.getxattr(shared_mount.path(f"{data_dir}/a"), "user.hdfs.storage_policy") == b"HOT"  # the default
    with pytest.raises(OSError) as e:
        os.getxattr(shared_mount.path(f"{data_dir}/a"), "user.hdfs.content_summary")  # files have none
    assert e.value.errno == errno.ENODATA
