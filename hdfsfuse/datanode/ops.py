"""DataTransferProtocol requests, sans I/O: op headers and READ_BLOCK. Pure code, no I/O.

Request (client -> DataNode xfer port):

    +-------+------+-------------------------------------------+
    | 00 1C | 0x51 | varint len + OpReadBlockProto             |
    +-------+------+-------------------------------------------+
     version 28, op READ_BLOCK; OpReadBlockProto = {1 header, 2 offset, 3 len, 4 sendChecksums,
     5 cachingStrategy}; the header (block + token + client name) is encoded once per block.

The response is parsed by `hdfsfuse.datanode.dtp`.
"""

from __future__ import annotations

import struct

from hdfsfuse.proto import datatransfer_pb2, hdfs_pb2, rpc_pb2
from hdfsfuse.wire import encode_varint

DATA_TRANSFER_VERSION = 28
OP_READ_BLOCK = 81
_OP_PREFIX = struct.pack(">hB", DATA_TRANSFER_VERSION, OP_READ_BLOCK)


def encode_op_header(block: hdfs_pb2.ExtendedBlockProto, token: rpc_pb2.TokenProto, client_name: str) -> bytes:
    """The serialized ClientOperationHeaderProto for a block: built once, reused per read."""
    return datatransfer_pb2.ClientOperationHeaderProto(
        baseHeader=datatransfer_pb2.BaseHeaderProto(block=block, token=token), clientName=client_name
    ).SerializeToString()


def header_field(op_header: bytes) -> bytes:
    """Field 1 of OpReadBlockProto (the operation header), encoded once per block."""
    return b"\x0a" + encode_varint(len(op_header)) + op_header


_READ_TAIL = b"\x20\x01\x2a\x00"  # 4: sendChecksums = true; 5: cachingStrategy = {} (DataNode defaults)


def encode_read_block(field1: bytes, offset: int, length: int) -> bytes:
    """OP_READ_BLOCK for `length` bytes at `offset` in the block, given `header_field(op_header)`."""
    body = field1 + b"\x10" + encode_varint(offset) + b"\x18" + encode_varint(length) + _READ_TAIL
    return _OP_PREFIX + encode_varint(len(body)) + body
