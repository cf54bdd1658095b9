"""Faults through the library: malformed DataNode bytes fail over, or answer EIO."""

from __future__ import annotations

import errno
import struct

import pytest
import trio

from hdfsfuse import errors
from hdfsfuse.client import ClientOptions, HdfsClient
from hdfsfuse.datanode.checksum import Checksum
from hdfsfuse.datanode.connection import Timeouts
from hdfsfuse.proto import hdfs_pb2
from tests.conftest import random_bytes
from tests.dtp_fakes import block_op_response, packet
from tests.minidfs import MiniDfs

MiB = 1 << 20
FAST = "connect_timeout=1,read_timeout=1,total_timeout=6,request_timeout=10,namenode_timeout=20"


def _fake_datanode_reply(kind: str) -> bytes:
    c = Checksum(2, 512)
    payload = bytes(512)
    if kind == "bad seqno":
        return block_op_response() + packet(0, 5, payload, c)
    if kind == "oversized PLEN":
        return block_op_response() + struct.pack(">IH", 64 * MiB, 25) + bytes(25)
    if kind == "truncated header":
        return block_op_response() + packet(0, 0, payload, c)[:15]
    return b"\xff" * 64  # garbage


@pytest.mark.parametrize("kind", ["bad seqno", "oversized PLEN", "truncated header", "garbage"])
async def test_malformed_datanode_bytes_fail_over_or_eio(cluster: MiniDfs, data_dir: str, kind: str) -> None:
    data = cluster.put_bytes(random_bytes(4096, seed=79), f"{data_dir}/fake")

    async def fake(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        await stream.send_all(_fake_datanode_reply(kind))
        await trio.sleep(30)  # a truncated reply: then silence

    async with trio.open_nursery() as n:
        listeners = await n.start(trio.serve_tcp, fake, 0)
        fake_port = listeners[0].socket.getsockname()[1]
        options = ClientOptions(timeouts=Timeouts(connect=1, read=1, total=10))
        async with HdfsClient.connect(cluster.uri, conf_dir=cluster.conf_dir, options=options) as client:
            f = await client.open(f"{data_dir}/fake")
            impostor = hdfs_pb2.DatanodeInfoProto()
            impostor.CopyFrom(f.blocks[0].locs[0])
            impostor.id.xferPort = fake_port
            f.blocks[0].locs.insert(0, impostor)
            f.forget_plans()
            assert bytes(await client.read_range(f, 0, 4096)) == data  # failed over to a real replica
            del f.blocks[0].locs[1:]
            f.forget_plans()
            client.locator.locate = _no_locate  # type: ignore[method-assign]
            with pytest.raises(errors.BlockUnavailable) as e:
                await client.read_range(f, 0, 4096)
            assert errors.to_errno(e.value) == errno.EIO
        n.cancel_scope.cancel()


async def _no_locate(file: object, offset: int, length: int) -> None:
    """Keep the fake replica as the only location (a real refresh would restore the good ones)."""
