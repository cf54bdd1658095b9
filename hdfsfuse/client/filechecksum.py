"""A file's COMPOSITE_CRC checksum from its blocks' checksums, as `hdfs dfs -checksum` gives it with
`dfs.checksum.combine.mode=COMPOSITE_CRC`. Pure code, no I/O.

Each DataNode answers OP_BLOCK_CHECKSUM with its block's CRC (the CRC32C or CRC32 of the whole
block, composed from its chunk CRCs), so no data crosses the wire:

    request:  00 1C | 0x55 | varint len + OpBlockChecksumProto {header {block, token},
                                            blockChecksumOptions {COMPOSITE_CRC, stripeLength 0}}
    response: varint len + BlockOpResponseProto {status, checksumResponse {bytesPerCrc,
                                            crcPerBlock, blockChecksum (4 bytes BE), crcType}}

An erasure-coded file's block groups are asked with OP_BLOCK_GROUP_CHECKSUM (0x5A) instead, at any
one of the group's DataNodes, which digests the group's data blocks in file order (reconstructing
a lost one) and answers the same response:

    request:  00 1C | 0x5A | varint len + OpBlockGroupChecksumProto {header {group, token},
                            datanodes, blockTokens, ecPolicy, blockIndices, requestedNumBytes,
                            blockChecksumOptions {COMPOSITE_CRC, stripeLength 0}}

The file's CRC composes the block (or group) CRCs in order: crc(A || B) = crc(A) * x^(8 |B|) mod P xor
crc(B), in the reflected representation (CrcUtil.compose, the same as zlib's crc32_combine).
The result therefore equals the CRC of the whole file's bytes. Like Hadoop's CrcComposer, a
running value of 0 counts as "nothing yet" and is replaced by the next block's CRC.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from hdfsfuse.datanode.checksum import CHECKSUM_CRC32, CHECKSUM_CRC32C
from hdfsfuse.datanode.ops import DATA_TRANSFER_VERSION
from hdfsfuse.proto import datatransfer_pb2, hdfs_pb2, rpc_pb2
from hdfsfuse.wire import encode_varint

OP_BLOCK_CHECKSUM = 85
OP_BLOCK_GROUP_CHECKSUM = 90
_COMPOSITE = datatransfer_pb2.BlockChecksumOptionsProto(blockChecksumType=datatransfer_pb2.COMPOSITE_CRC,
                                                        stripeLength=0)
POLYNOMIALS = {CHECKSUM_CRC32C: 0x82F63B78, CHECKSUM_CRC32: 0xEDB88320}  # reflected, x^32 implicit
ALGORITHMS = {CHECKSUM_CRC32C: "COMPOSITE-CRC32C", CHECKSUM_CRC32: "COMPOSITE-CRC32"}
_X0 = 0x80000000  # the polynomial 1 in the reflected representation
# Hadoop answers an empty file with this fixed value in every combine mode (DFSClient special-cases
# length 0: bytesPerCRC 0, crcPerBlock 0, the MD5 of an empty MD5 list).
EMPTY_FILE = "MD5-of-0MD5-of-0CRC32 00000000000000000000000070bc8f4b72a86921468bf8e8441dce5100000000"


def multiply_mod(a: int, b: int, poly: int) -> int:
    """a * b mod P for polynomials in the reflected 32-bit representation."""
    product = 0
    m = _X0
    while m and a:
        if a & m:
            product ^= b
            a ^= m
        m >>= 1
        b = (b >> 1) ^ poly if b & 1 else b >> 1
    return product


def monomial(length_bytes: int, poly: int) -> int:
    """x^(8 * length_bytes) mod P (square and multiply)."""
    if length_bytes < 0:
        raise ValueError("a length cannot be negative")
    product, power = _X0, _X0 >> 8  # 1 and x^8
    while length_bytes:
        if length_bytes & 1:
            product = multiply_mod(product, power, poly)
        power = multiply_mod(power, power, poly)
        length_bytes >>= 1
    return product


def compose(crc_a: int, crc_b: int, length_b: int, poly: int) -> int:
    """The CRC of A || B from the CRCs of A and B and the length of B."""
    return multiply_mod(crc_a, monomial(length_b, poly), poly) ^ crc_b


def file_crc(blocks: Iterable[tuple[int, int]], kind: int) -> int:
    """Compose (block CRC, bytes of the file in that block) in order, as CrcComposer does."""
    poly = POLYNOMIALS[kind]
    current = 0
    for crc, length in blocks:
        current = crc if current == 0 else compose(current, crc, length, poly)
    return current


def describe(crc: int, kind: int) -> str:
    """`COMPOSITE-CRC32C 0a1b2c3d`: the algorithm and the checksum's bytes, as `hdfs dfs -checksum` prints them."""
    return f"{ALGORITHMS[kind]} {crc:08x}"


def encode_request(block: hdfs_pb2.ExtendedBlockProto, token: rpc_pb2.TokenProto) -> bytes:
    op = datatransfer_pb2.OpBlockChecksumProto(
        header=datatransfer_pb2.BaseHeaderProto(block=block, token=token), blockChecksumOptions=_COMPOSITE,
    ).SerializeToString()
    return struct.pack(">hB", DATA_TRANSFER_VERSION, OP_BLOCK_CHECKSUM) + encode_varint(len(op)) + op


def encode_group_request(group: hdfs_pb2.LocatedBlockProto, policy: hdfs_pb2.ErasureCodingPolicyProto,
                         requested: int) -> bytes:
    """OP_BLOCK_GROUP_CHECKSUM for a located block group, digesting its first `requested` bytes."""
    op = datatransfer_pb2.OpBlockGroupChecksumProto(
        header=datatransfer_pb2.BaseHeaderProto(block=group.b, token=group.blockToken),
        datanodes=datatransfer_pb2.DatanodeInfosProto(datanodes=group.locs),
        blockTokens=group.blockTokens, ecPolicy=policy, blockIndices=list(group.blockIndices),
        requestedNumBytes=requested, blockChecksumOptions=_COMPOSITE,
    ).SerializeToString()
    return struct.pack(">hB", DATA_TRANSFER_VERSION, OP_BLOCK_GROUP_CHECKSUM) + encode_varint(len(op)) + op
