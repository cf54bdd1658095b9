"""Short-circuit local reads, sans I/O: the DataNode domain-socket ops, slot words and meta files.

Owns the bytes; `hdfsfuse.local.short_circuit` moves them. The framing is DataTransferProtocol's:

    request:   | 00 1C | op | varint len + proto |       op 87 fds, 88 release, 89 shm
    op 89 reply: varint len + ShortCircuitShmResponseProto {status, error, id {hi, lo}}
                 then one byte (0) carrying SCM_RIGHTS [segment fd]: mmap it shared
    op 87 reply: varint len + BlockOpResponseProto {status, message, shortCircuitAccessVersion}
                 then one byte carrying SCM_RIGHTS [block file fd, meta file fd];
                 byte 1 = USE_RECEIPT_VERIFICATION: the client answers with one byte
    op 88 reply: varint len + ReleaseShortCircuitAccessResponseProto {status, error}

A segment is an array of 64-byte slots. Only the first 8 bytes of a slot are used, one
native-endian word:

    bit 63 VALID | bit 62 ANCHORABLE | ... | bits 0-30 anchor count

The client clears the word and sets VALID before it asks for fds with that slot; the DataNode
clears VALID when the replica stops being valid (deleted, moved, uncached). This reader always
verifies checksums, so it ignores anchors.

The meta file is a 7-byte header, then one big-endian CRC per chunk of the block file:

    | u16 version (1) | u8 type (0 NULL, 1 CRC32, 2 CRC32C) | u32 bytesPerChecksum | BE32 ... |
"""

from __future__ import annotations

import dataclasses
import os
import stat
import struct
from collections.abc import Callable

from google.protobuf.message import Message

from hdfsfuse.datanode.checksum import Checksum
from hdfsfuse.datanode.ops import DATA_TRANSFER_VERSION
from hdfsfuse.errors import HdfsError, InvalidBlockToken, ProtocolError
from hdfsfuse.proto import datatransfer_pb2, hdfs_pb2, rpc_pb2
from hdfsfuse.wire import encode_varint, read_delimited

OP_REQUEST_SHORT_CIRCUIT_FDS = 87
OP_RELEASE_SHORT_CIRCUIT_FDS = 88
OP_REQUEST_SHORT_CIRCUIT_SHM = 89
BLOCK_FORMAT_VERSION = 1  # the highest short-circuit access version this reader knows
SLOT_SIZE = 64
VALID = 1 << 63
SLOT_WORD = struct.Struct("=Q")  # native endian, as the DataNode writes it through Unsafe
META_HEADER = struct.Struct(">HBI")
META_VERSION = 1
USE_RECEIPT_VERIFICATION = 1
MAX_REPLY = 64 * 1024

Status = datatransfer_pb2.Status


class ShortCircuitUnsupported(HdfsError):
    """The DataNode does not serve short-circuit reads at all: use TCP with it for a while."""


class ShortCircuitRefused(HdfsError):
    """The DataNode would not pass this block's fds (unknown block, wrong generation stamp)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ShmId:
    hi: int
    lo: int

    def __str__(self) -> str:
        return f"{self.hi & 0xFFFFFFFFFFFFFFFF:016x}{self.lo & 0xFFFFFFFFFFFFFFFF:016x}"


@dataclasses.dataclass(frozen=True, slots=True)
class SlotId:
    shm: ShmId
    index: int

    def proto(self) -> datatransfer_pb2.ShortCircuitShmSlotProto:
        return datatransfer_pb2.ShortCircuitShmSlotProto(
            shmId=datatransfer_pb2.ShortCircuitShmIdProto(hi=self.shm.hi, lo=self.shm.lo), slotIdx=self.index,
        )


def _request(op: int, message: bytes) -> bytes:
    return struct.pack(">hB", DATA_TRANSFER_VERSION, op) + encode_varint(len(message)) + message


def encode_shm_request(client_name: str) -> bytes:
    return _request(OP_REQUEST_SHORT_CIRCUIT_SHM,
                    datatransfer_pb2.ShortCircuitShmRequestProto(clientName=client_name).SerializeToString())


def encode_fds_request(block: hdfs_pb2.ExtendedBlockProto, token: rpc_pb2.TokenProto, slot: SlotId) -> bytes:
    request = datatransfer_pb2.OpRequestShortCircuitAccessProto(
        header=datatransfer_pb2.BaseHeaderProto(block=block, token=token), maxVersion=BLOCK_FORMAT_VERSION,
        slotId=slot.proto(), supportsReceiptVerification=True,
    )
    return _request(OP_REQUEST_SHORT_CIRCUIT_FDS, request.SerializeToString())


def encode_release(slot: SlotId) -> bytes:
    request = datatransfer_pb2.ReleaseShortCircuitAccessRequestProto(slotId=slot.proto())
    return _request(OP_RELEASE_SHORT_CIRCUIT_FDS, request.SerializeToString())


def parse_reply(buf: bytes | bytearray, message: Message) -> int:
    """Parse one varint-delimited reply at the start of `buf` into `message`; return the bytes
    it took. Raises NeedData when `buf` holds only part of it, ProtocolError when it is garbage."""
    raw, end = read_delimited(buf, 0, MAX_REPLY)
    try:
        message.ParseFromString(bytes(raw))
    except Exception as e:  # DecodeError, or a value out of range
        raise ProtocolError(f"undecodable short-circuit reply: {e}") from None
    return end


def check_shm_reply(reply: datatransfer_pb2.ShortCircuitShmResponseProto, where: str) -> ShmId:
    if reply.status != Status.SUCCESS or not reply.HasField("id"):
        raise ShortCircuitUnsupported(
            f"{where} gave no shared-memory segment ({Status.Name(reply.status)}: {reply.error or 'no reason'})"
        )
    return ShmId(reply.id.hi, reply.id.lo)


def check_fds_reply(reply: datatransfer_pb2.BlockOpResponseProto, where: str) -> None:
    """Raise what a non-SUCCESS answer to a fds request means for the reader."""
    status = reply.status
    if status == Status.SUCCESS:
        return
    detail = f"{where}: {Status.Name(status)}: {reply.message or 'no reason given'}"
    if status == Status.ERROR_ACCESS_TOKEN:
        raise InvalidBlockToken(detail)
    if status == Status.ERROR_UNSUPPORTED:
        raise ShortCircuitUnsupported(detail)
    raise ShortCircuitRefused(detail)


def checksum_of_meta(header: bytes, where: str) -> Checksum:
    """The checksum scheme a meta file's 7-byte header announces."""
    if len(header) != META_HEADER.size:
        raise ProtocolError(f"{where}: the meta file is shorter than its header")
    version, kind, bpc = META_HEADER.unpack(header)
    if version != META_VERSION:
        raise ProtocolError(f"{where}: meta file version {version}, expected {META_VERSION}")
    return Checksum.of(kind, bpc)


def slot_is_valid(segment: bytes | bytearray | memoryview, index: int) -> bool:
    return bool(SLOT_WORD.unpack_from(segment, index * SLOT_SIZE)[0] & VALID)


def socket_path(pattern: str, xfer_port: int) -> str:
    """dfs.domain.socket.path for one DataNode: `_PORT` becomes its xfer port."""
    return pattern.replace("_PORT", str(xfer_port))


def unsafe_socket_path(path: str, stat_of: Callable[[str], os.stat_result], euid: int) -> str | None:
    """Why `path` is not a safe DataNode socket, or None: the rule Hadoop's DomainSocket applies.

    Every directory above the socket must be writable only by root or us: not world-writable,
    not group-writable unless its group is root, and owned by root or us. Anyone else who could
    write there could put a fake DataNode in its place and hand us other files' descriptors.
    """
    if not path.startswith("/") or path.endswith("/"):
        return f"{path!r} is not an absolute socket path"
    parts = [p for p in path.split("/")[:-1] if p]
    for directory in ["/"] + ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]:
        st = stat_of(directory)
        mode = st.st_mode
        if not stat.S_ISDIR(mode):
            return f"{directory} in {path} is not a directory"
        if mode & 0o002:
            return f"{directory} in {path} is world-writable (mode {mode & 0o777:04o})"
        if mode & 0o020 and st.st_gid != 0:
            return f"{directory} in {path} is group-writable and its group is not root"
        if mode & 0o200 and st.st_uid not in (0, euid):
            return f"{directory} in {path} is owned by uid {st.st_uid}, neither root nor us"
    return None
