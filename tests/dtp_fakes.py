"""Builders for DataNode READ_BLOCK responses, byte for byte (parser tests and fake peers)."""

from __future__ import annotations

import struct

from hdfsfuse.datanode.checksum import Checksum
from hdfsfuse.proto import datatransfer_pb2
from hdfsfuse.wire import delimited


def block_op_response(status: int = 0, *, kind: int = 2, bpc: int = 512, chunk_offset: int = 0,
                      message: str = "") -> bytes:
    resp = datatransfer_pb2.BlockOpResponseProto(status=status)
    if status == 0:
        resp.readOpChecksumInfo.checksum.type = kind
        resp.readOpChecksumInfo.checksum.bytesPerChecksum = bpc
        resp.readOpChecksumInfo.chunkOffset = chunk_offset
    if message:
        resp.message = message
    return delimited(resp.SerializeToString())


def packet(offset: int, seqno: int, data: bytes, checksum: Checksum, *, last: bool = False,
           sums: bytes | None = None, proto_header: bool = False) -> bytes:
    if proto_header:
        header = datatransfer_pb2.PacketHeaderProto(
            offsetInBlock=offset, seqno=seqno, lastPacketInBlock=last, dataLen=len(data), syncBlock=False
        ).SerializeToString()
    else:
        header = struct.pack("<BqBqBBBi", 0x09, offset, 0x11, seqno, 0x18, int(last), 0x25, len(data))
    sums = checksum.compute(data) if sums is None else sums
    return struct.pack(">IH", 4 + len(sums) + len(data), len(header)) + header + sums + data


def read_response(block: bytes, offset: int, length: int, *, kind: int = 2, bpc: int = 512,
                  packet_size: int = 65536, proto_header: bool = False) -> bytes:
    """What a DataNode sends for READ_BLOCK(offset, length) of `block`: aligned, packetized."""
    checksum = Checksum(kind, bpc)
    start = offset - offset % bpc
    end = min(len(block), -(-(offset + length) // bpc) * bpc)
    out = [block_op_response(kind=kind, bpc=bpc, chunk_offset=start)]
    per_packet = max(bpc, packet_size - packet_size % bpc)
    seq = 0
    pos = start
    while pos < end:
        n = min(per_packet, end - pos)
        out.append(packet(pos, seq, block[pos : pos + n], checksum, proto_header=proto_header))
        pos += n
        seq += 1
    out.append(packet(end, seq, b"", checksum, last=True, proto_header=proto_header))
    return b"".join(out)
