"""The NameNode client without a cluster: user resolution, and an unreachable NameNode named in
the error with what was tried."""

from __future__ import annotations

import pytest
import trio

from hdfsfuse import errors
from hdfsfuse.conf.hadoop import NameNodeTarget
from hdfsfuse.namenode.client import NameNodeClient, resolve_user
from hdfsfuse.proto import hdfs_pb2

TYPES = {hdfs_pb2.HdfsFileStatusProto.IS_DIR: "dir", hdfs_pb2.HdfsFileStatusProto.IS_FILE: "file",
         hdfs_pb2.HdfsFileStatusProto.IS_SYMLINK: "symlink"}


def test_user_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HADOOP_USER_NAME", "envuser")
    assert resolve_user("explicit") == "explicit"
    assert resolve_user() == "envuser"
    monkeypatch.delenv("HADOOP_USER_NAME")
    import getpass

    assert resolve_user() == getpass.getuser()


async def test_unreachable_namenode_names_what_was_tried() -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    target = NameNodeTarget("dead", (("127.0.0.1", port),), "/")
    async with NameNodeClient.open(target, total_timeout=1.0) as nn:
        with pytest.raises(errors.NameNodeUnavailable, match=f"127.0.0.1:{port}"):
            await nn.get_file_info("/")


