"""A file's COMPOSITE_CRC checksum from its DataNodes (OP_BLOCK_CHECKSUM, or OP_BLOCK_GROUP_CHECKSUM
for an erasure-coded file's block groups): no data is read. The arithmetic is
`hdfsfuse.client.filechecksum`. Does I/O.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from hdfsfuse.client import filechecksum
from hdfsfuse.client.files import HdfsFile
from hdfsfuse.client.locator import Locator
from hdfsfuse.datanode.context import ReadContext
from hdfsfuse.datanode.reader import block_op
from hdfsfuse.errors import BlockUnavailable, HdfsError, NotSupported
from hdfsfuse.namenode.client import LocatedBlock
from hdfsfuse.proto import datatransfer_pb2


async def file_checksum(file: HdfsFile, context: ReadContext, locator: Locator) -> str:
    """`COMPOSITE-CRC32C 0a1b2c3d`: the checksum Java's `getFileChecksum` gives with
    dfs.checksum.combine.mode=COMPOSITE_CRC."""
    if file.under_construction:
        raise NotSupported(f"{file.path}: the file is being written; its checksum is not final")
    if file.length == 0:
        return filechecksum.EMPTY_FILE
    if file.map.first_gap(0, file.length) is not None:
        await locator.fill_gaps(file, 0, file.length)
    crcs: list[tuple[int, int]] = []
    kind = None
    for piece in file.map.pieces(0, file.length):
        block = file.map.block_at(piece.block_start)
        if file.ec_policy is not None:
            request = filechecksum.encode_group_request(block, file.status.ecPolicy, piece.length)
            addresses = [context.address(loc) for loc in block.locs]
            what = f"block group {block.b.blockId} of {file.path}"
        else:
            request = filechecksum.encode_request(block.b, block.blockToken)
            plan = file.block_plan(piece.block_start, context)
            addresses, what = [address for address, _ in plan.replicas], plan.what
        crc, block_kind = await _block_crc(file, block, request, addresses, what, context)
        if kind is not None and block_kind != kind:
            raise NotSupported(f"{file.path}: its blocks use different checksum types; COMPOSITE_CRC needs one")
        kind = block_kind
        crcs.append((crc, piece.length))
    assert kind is not None
    return filechecksum.describe(filechecksum.file_crc(crcs, kind), kind)


async def _block_crc(file: HdfsFile, block: LocatedBlock, request: bytes, addresses: list[str], what: str,
                     context: ReadContext) -> tuple[int, int]:
    """(CRC, checksum type) of one block or block group, from the first DataNode that answers."""
    security = None if file.dn_security is None else file.dn_security.for_block(block.blockToken)
    errors = []
    for address in dict.fromkeys(addresses):  # a group's DataNode may hold two of its blocks
        try:
            raw = await block_op(address, request, f"{what} on DataNode {address}", context.timeouts,
                                 context.stats, security)
            reply = datatransfer_pb2.BlockOpResponseProto.FromString(raw)
        except (HdfsError, DecodeError) as e:
            errors.append(f"{address}: {e}")
            continue
        answer = reply.checksumResponse
        if reply.status != datatransfer_pb2.SUCCESS or len(answer.blockChecksum) != 4:
            message = reply.message.strip().splitlines()[0] if reply.message.strip() else ""
            errors.append(f"{address}: {datatransfer_pb2.Status.Name(reply.status)} {message}".rstrip())
            continue
        if answer.crcType not in filechecksum.POLYNOMIALS:
            raise NotSupported(f"{what} has no CRC checksums (type {answer.crcType})")
        return int.from_bytes(answer.blockChecksum, "big"), answer.crcType
    raise BlockUnavailable(f"{what}: no DataNode gave its checksum: {'; '.join(errors) or 'no locations'}")
