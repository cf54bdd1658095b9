"""Short-circuit reads without a cluster: a fake DataNode socket that hangs, and a large local read
through io_uring, verified and exact."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio
import trio.testing

from hdfsfuse.local import uring
from hdfsfuse.local.short_circuit import ShortCircuitReads
from hdfsfuse.proto import hdfs_pb2, rpc_pb2
from hdfsfuse.stats import Stats
from tests.conftest import random_bytes
from tests.minidfs import trusted_socket_base
from tests.page_residency import page_cache_bypass_unavailable

MiB = 1 << 20


# ----- fake DataNode sockets: what a real DataNode will not do on demand -----------------------------


def _loc(port: int) -> hdfs_pb2.DatanodeInfoProto:
    return hdfs_pb2.DatanodeInfoProto(id=hdfs_pb2.DatanodeIDProto(
        ipAddr="127.0.0.1", hostName="localhost", datanodeUuid="fake", xferPort=port, infoPort=0, ipcPort=0))


BLOCK = hdfs_pb2.ExtendedBlockProto(poolId="BP-1", blockId=1, generationStamp=1, numBytes=100)


@pytest.mark.parametrize("behaviour", ["hang", "garbage", "no_fds"])
async def test_a_fake_datanode_socket_never_hangs_a_read(behaviour: str) -> None:
    base = Path(trusted_socket_base())
    directory = Path(os.path.realpath(base)) / f"fake-{os.getpid()}-{behaviour}"
    directory.mkdir(mode=0o755, exist_ok=True)
    path = directory / "dn.4242"
    connections = 0

    async def serve(sock: trio.socket.SocketType) -> None:
        nonlocal connections
        connections += 1
        with sock:
            await sock.recv(4096)
            if behaviour == "garbage":
                await sock.send(b"\x05\xff\xff\xff\xff\xff")
            elif behaviour == "no_fds":  # SUCCESS for a shm request, and a byte with no fd on it
                await sock.send(b"\x08\x08\x00\x1a\x04\x08\x01\x10\x02" + b"\x00")
            await trio.sleep_forever()

    listener = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    try:
        await listener.bind(str(path))
        listener.listen()
        async with trio.open_nursery() as nursery:
            async def accept_forever() -> None:
                while True:
                    conn, _ = await listener.accept()
                    nursery.start_soon(serve, conn)

            nursery.start_soon(accept_forever)
            stats = Stats()
            reads = ShortCircuitReads(str(directory / "dn._PORT"), "c", timeout=0.5, stats=stats, nursery=nursery)
            with trio.fail_after(5):
                assert await reads.read(_loc(4242), BLOCK, rpc_pb2.TokenProto(), 0, 10, "blk") is None
                assert await reads.read(_loc(4242), BLOCK, rpc_pb2.TokenProto(), 0, 10, "blk") is None
            assert connections == 1  # the failure is remembered: the second read did not ask
            assert stats.short_circuit_fallbacks == 2 and stats.short_circuit_reads == 0
            reads.close()
            nursery.cancel_scope.cancel()
    finally:
        listener.close()
        path.unlink(missing_ok=True)
        directory.rmdir()


@pytest.mark.skipif(uring.unavailable() is not None, reason=str(uring.unavailable()))
async def test_a_large_local_read_through_io_uring_is_verified_and_exact(tmp_path: Path) -> None:
    """The O_DIRECT read of a large range through io_uring (no worker thread): exact bytes for
    aligned and unaligned ranges, every chunk verified, a short file refused. Local files only:
    a replica's fds as a DataNode would pass them."""
    from hdfsfuse.datanode.checksum import CHECKSUM_CRC32C, Checksum
    from hdfsfuse.errors import ChecksumMismatch
    from hdfsfuse.local import short_circuit_protocol as scp
    from hdfsfuse.local.replica_files import LocalReplica
    from hdfsfuse.local.uring import UringReads
    from hdfsfuse.local.verified_io import ShortRead

    checksum = Checksum(CHECKSUM_CRC32C, 512)
    data = random_bytes(3 * MiB + 1000, seed=1703)
    (tmp_path / "blk").write_bytes(data)
    (tmp_path / "meta").write_bytes(scp.META_HEADER.pack(1, CHECKSUM_CRC32C, 512) + checksum.compute(data))
    if page_cache_bypass_unavailable(tmp_path / "blk") is not None:
        pytest.skip(str(page_cache_bypass_unavailable(tmp_path / "blk")))
    replica = LocalReplica(("s", "BP-1", 1, 1), os.open(tmp_path / "blk", os.O_RDONLY),
                       os.open(tmp_path / "meta", os.O_RDONLY), checksum, len(data), None, None, 0)  # type: ignore[arg-type]
    replica.open_direct()
    assert replica.direct_fd >= 0
    ring = UringReads()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ring.serve)
            await trio.testing.wait_all_tasks_blocked()
            tail = (len(data) - 200_000) // 4096 * 4096 + 5
            for offset, length in [(0, MiB), (4096 * 3 + 17, 300_000), (tail, len(data) - tail),
                                   (2 * MiB, len(data) - 2 * MiB)]:
                got = await replica.read_direct_through(ring, offset, length, "blk")
                assert got == data[offset : offset + length], (offset, length)
            assert await replica.read_direct_through(ring, 512, 300_000, "blk") is None  # not 4 KiB-aligned
            flipped = bytearray(data)
            flipped[MiB + 4097] ^= 1
            (tmp_path / "blk").write_bytes(flipped)
            with pytest.raises(ChecksumMismatch, match=f"at block offset {MiB + 4096}"):
                await replica.read_direct_through(ring, MiB, MiB, "blk")
            os.truncate(tmp_path / "blk", 2 * MiB + 100)
            with pytest.raises(ShortRead):
                await replica.read_direct_through(ring, 2 * MiB, MiB, "blk")
            nursery.cancel_scope.cancel()
    finally:
        replica.close_files()
