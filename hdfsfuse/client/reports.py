"""Bad-block reports: a replica that served a corrupt chunk is named to the NameNode, in the background."""

from __future__ import annotations

import logging

import trio

from hdfsfuse.client.files import HdfsFile
from hdfsfuse.datanode.context import xfer_address
from hdfsfuse.namenode.client import LocatedBlock
from hdfsfuse.proto import hdfs_pb2, rpc_pb2
from hdfsfuse.stats import Stats

log = logging.getLogger(__name__)


class BadBlockReports:
    def __init__(self, stats: Stats, nursery: trio.Nursery) -> None:
        self.stats = stats
        self._nursery = nursery  # reports never hold up the read that found the corruption

    def replicas(self, file: HdfsFile, block: LocatedBlock, bad: list[hdfs_pb2.DatanodeInfoProto]) -> None:
        """Tell the NameNode which replicas of a block served corrupt data."""
        self._send(file, hdfs_pb2.LocatedBlockProto(
            b=block.b, offset=block.offset, locs=bad, corrupt=False, blockToken=block.blockToken
        ))

    def internal_block(self, file: HdfsFile, block: hdfs_pb2.ExtendedBlockProto, loc: hdfs_pb2.DatanodeInfoProto,
                       token: rpc_pb2.TokenProto) -> None:
        """Tell the NameNode an erasure-coded group's internal block is corrupt on `loc`."""
        self._send(file, hdfs_pb2.LocatedBlockProto(b=block, offset=0, locs=[loc], corrupt=False, blockToken=token))

    def _send(self, file: HdfsFile, report: LocatedBlock) -> None:
        """Send one report in the background, to the namespace that holds the file."""
        path, namenode = file.path, file.namenode

        async def send() -> None:
            try:
                await namenode.report_bad_blocks([report])
                self.stats.bad_block_reports += 1
                log.warning(
                    "%s: reported corrupt replica(s) of block %d on %s to the NameNode",
                    path, report.b.blockId, ", ".join(xfer_address(b) for b in report.locs),
                )
            except Exception as e:  # a background task: log, never escape
                log.error("%s: reporting corrupt block %d failed: %s", path, report.b.blockId, e)

        self._nursery.start_soon(send)
