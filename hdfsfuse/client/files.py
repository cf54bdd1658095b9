"""An open HDFS file: pinned to its fileId and block ids, with its located blocks and readable length.

An open file is pinned to its fileId: locations are fetched through `/.reserved/.inodes/<id>`
(a rename keeps reading; a replaced file fails with FileChanged, never another file's bytes).
State only: `hdfsfuse.client.locator` fills it, the readers read it.
"""

from __future__ import annotations

import dataclasses
import math

from hdfsfuse.client.blockmap import BlockMap
from hdfsfuse.datanode import ops
from hdfsfuse.datanode.context import ReadContext
from hdfsfuse.encryption.ctr import CtrDecryptor
from hdfsfuse.encryption.info import FileEncryption
from hdfsfuse.erasure.codec import EcPolicy
from hdfsfuse.erasure.reader import GroupPlan, group_plan
from hdfsfuse.local.blockcache.freshness import CacheFreshness
from hdfsfuse.namenode.client import FileStatus, LocatedBlock, NameNodeClient
from hdfsfuse.proto import hdfs_pb2, rpc_pb2
from hdfsfuse.security.transfer import DataTransferSecurity


def locate_path(path: str, file_id: int) -> str:
    """The path that always names this file: its inode, unless it lives in a snapshot.

    A rename keeps the inode path valid; a replaced file has another fileId. Snapshot copies share
    the live file's fileId, so they are located by their own (immutable) path; so are raw paths
    (/.reserved/raw/...: an encrypted file's ciphertext), which the inode path would not keep raw.
    """
    if file_id and ".snapshot" not in path.split("/") and not path.startswith("/.reserved/raw/"):
        return f"/.reserved/.inodes/{file_id}"
    return path


@dataclasses.dataclass(frozen=True, slots=True)
class BlockPlan:
    block: hdfs_pb2.ExtendedBlockProto
    header_field: bytes  # OpReadBlockProto field 1, encoded
    replicas: list[tuple[str, tuple[hdfs_pb2.DatanodeInfoProto, str]]]  # (address, (DatanodeInfo, description))
    what: str
    token: rpc_pb2.TokenProto  # the block token: a SASL handshake's credentials


class HdfsFile:
    """An open HDFS file, pinned to its fileId and block ids: its located blocks and readable length.

    `namenode`: the connection of the identity that opened it (its namespace's, on viewfs); its
    locations and block tokens are always fetched as the opener. `dn_security`: its namespace's
    SASL on DataNode connections (None: none). `ec_policy`: erasure-coded, its blocks are
    striped groups. Behind a Router (`by_inode=False`) it is located by path, and each later
    location fetch checks the fileId again. `encryption`: in an encryption zone, its blocks hold
    ciphertext that `decryptor` (built with its data key) turns into its bytes.
    """

    def __init__(self, path: str, status: FileStatus, window: int, *, namenode: NameNodeClient,
                 dn_security: DataTransferSecurity | None = None, ec_policy: EcPolicy | None = None,
                 by_inode: bool = True, encryption: FileEncryption | None = None,
                 decryptor: CtrDecryptor | None = None) -> None:
        self.path = path
        self.status = status
        self.file_id = status.fileId
        self.namenode = namenode
        self.dn_security = dn_security
        self.ec_policy = ec_policy
        self.by_inode = by_inode
        self.encryption = encryption
        self.decryptor = decryptor
        self.locate_path = locate_path(path, status.fileId) if by_inode else path
        self.window = window  # bytes of block locations per NameNode call
        self.map = BlockMap(path)
        self.freshness = CacheFreshness(path)  # whether the block cache may answer for its blocks
        self.length = 0
        self.under_construction = False
        self.length_checked = -math.inf  # trio time of the last length refresh
        self.length_unknown = ""  # why the readable length of a block being written is unknown
        self.opened = False
        self.dead: dict[int, set[str]] = {}  # block start -> DataNodes that failed reading it
        self._plans: dict[int, BlockPlan] = {}
        self._group_plans: dict[int, GroupPlan] = {}

    @property
    def blocks(self) -> list[LocatedBlock]:
        return self.map.blocks

    @property
    def version(self) -> tuple[int, int, int]:
        """What its bytes are: the length and the last block's id and generation stamp. An append,
        a truncate or a concat changes one of them (an mtime alone may be older than they are)."""
        blocks = self.map.blocks
        if not blocks:
            return (self.length, 0, 0)
        last = blocks[-1].b
        return (self.length, last.blockId, last.generationStamp)

    def forget_plans(self, starts: list[int] | None = None) -> None:
        """Drop cached op headers and replica lists (all, or those of blocks starting at `starts`)."""
        if starts is None:
            self._plans = {}
            self._group_plans = {}
        else:
            for start in starts:
                self._plans.pop(start, None)
                self._group_plans.pop(start, None)

    def block_plan(self, start: int, context: ReadContext) -> BlockPlan:
        """What every read of the block at `start` reuses: the encoded op header and the replicas."""
        plan = self._plans.get(start)
        if plan is None:
            block = self.map.block_at(start)
            what = f"block {block.b.blockId} of {self.path}"
            replicas = []
            for loc in block.locs:
                address = context.address(loc)
                replicas.append((address, (loc, f"{what} on DataNode {address}")))
            header = ops.header_field(ops.encode_op_header(block.b, block.blockToken, context.client_name))
            plan = self._plans[start] = BlockPlan(block.b, header, replicas, what, block.blockToken)
        return plan

    def finalized(self, start: int) -> bool:
        """Whether the block at `start` can no longer change under its id and generation stamp:
        every block but the last one of a file being written."""
        return not (self.under_construction and start == self.map.starts[-1])

    def group_plan(self, start: int, policy: EcPolicy, context: ReadContext) -> GroupPlan:
        """The internal blocks of the erasure-coded group at `start`, with their op headers."""
        plan = self._group_plans.get(start)
        if plan is None:
            plan = self._group_plans[start] = group_plan(
                self.map.block_at(start), policy, self.path, context.client_name, context.address,
            )
        return plan
