"""DataTransferProtocol READ_BLOCK, sans I/O: the response and packet parser.

Owns the bytes of one exact-length block read. No sockets: `hdfsfuse.datanode.connection` moves the bytes.

The request is encoded by `hdfsfuse.datanode.ops`.

Response (DataNode -> client):

    varint len + BlockOpResponseProto {status, readOpChecksumInfo {checksum, chunkOffset}}
    then packets, each:
    +-----------+-----------+-------------------+---------------------+-------------+
    | u32 PLEN  | u16 HLEN  | PacketHeaderProto | checksums (BE32 x k)| data        |
    +-----------+-----------+-------------------+---------------------+-------------+
      PLEN = 4 + len(checksums) + len(data); the header is HLEN bytes, not varint-prefixed.
    ... ending with an empty packet {dataLen 0, lastPacketInBlock true}.

Then the client sends ClientReadStatusProto{CHECKSUM_OK} (02 08 06) and may reuse the socket.

The DataNode widens the range to whole checksum chunks: up to bpc-1 bytes before `offset` and
after `offset + length`. The parser verifies every chunk and trims those bytes away, writing the
exact requested bytes into `output`.

The packet loop's common case (complete data packets with the fixed 25-byte header, every check
passed) runs in one call of the `_chunked_crc` C extension when it is built; it stops before any
other packet, and the Python loop takes that one exactly as it takes every packet without it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from hdfsfuse.datanode.buffers import read_buffer
from hdfsfuse.datanode.checksum import CHECKSUM_NULL, Checksum, chunked_crc
from hdfsfuse.errors import HdfsError, InvalidBlockToken, ProtocolError
from hdfsfuse.proto import datatransfer_pb2
from hdfsfuse.wire import NEED_DATA, NeedData, _NeedDataType, decode_varint, read_delimited

MAX_PACKET_SIZE = 16 * 1024 * 1024
MAX_HEADER_LEN = 1024
MAX_RESPONSE_LEN = 1024 * 1024

STATUS_CHECKSUM_OK = b"\x02\x08\x06"  # delimited ClientReadStatusProto{status: CHECKSUM_OK}
STATUS_SUCCESS = b"\x02\x08\x00"  # ... {status: SUCCESS}, when checksums were not verified

_PKT_PREFIX = struct.Struct(">IH")
# The usual 25-byte header: 09 offsetInBlock(8) 11 seqno(8) 18 last(1) 25 dataLen(4)
_FIXED_HEADER = struct.Struct("<BqBqBBBi")

Status = datatransfer_pb2.Status
# The native packet loop (None without the C extension: the Python loop takes every packet).
_take_data_packets = None if chunked_crc is None else chunked_crc.take_data_packets


class ReplicaError(HdfsError):
    """The DataNode refused the read (status ERROR...): try another replica."""


@dataclass(frozen=True, slots=True)
class ReadStarted:
    checksum: Checksum
    chunk_offset: int


@dataclass(frozen=True, slots=True)
class PacketReceived:
    data_len: int  # payload bytes in the packet, including chunk-alignment bytes


@dataclass(frozen=True, slots=True)
class ReadFinished:
    status_reply: bytes  # what to send back so the DataNode keeps the connection


Event = ReadStarted | PacketReceived | ReadFinished


def _fast_success(raw: bytes) -> tuple[int, int, int] | None:
    """(type, bytesPerChecksum, chunkOffset) of the usual SUCCESS response, parsed by hand.

    Handles exactly `08 00 22 L [0a L2 [08 t] [10 bpc]] [10 chunkOffset]`, Java's field order;
    anything else returns None and goes through protobuf.
    """
    try:
        if raw[0] != 0x08 or raw[1] != 0x00 or raw[2] != 0x22:
            return None
        info_len, pos = decode_varint(raw, 3, 5)
        if pos + info_len != len(raw) or raw[pos] != 0x0A:
            return None
        cs_len, p = decode_varint(raw, pos + 1, 5)
        cs_end = p + cs_len
        if raw[p] != 0x08:
            return None
        kind, p = decode_varint(raw, p + 1, 5)
        if raw[p] != 0x10:
            return None
        bpc, p = decode_varint(raw, p + 1, 5)
        if p != cs_end or raw[p] != 0x10:
            return None
        chunk_offset, p = decode_varint(raw, p + 1)
        if p != len(raw):
            return None
        return kind, bpc, chunk_offset
    except (IndexError, NeedData, ProtocolError):
        return None


def _parse_packet_header(raw: bytes | memoryview) -> tuple[int, int, bool, int]:
    """(offsetInBlock, seqno, lastPacketInBlock, dataLen), fast path for the fixed layout."""
    if len(raw) == 25:
        t1, offset, t2, seqno, t3, last, t4, data_len = _FIXED_HEADER.unpack(raw)
        if (t1, t2, t3, t4) == (0x09, 0x11, 0x18, 0x25) and last in (0, 1):
            return offset, seqno, bool(last), data_len
    header = datatransfer_pb2.PacketHeaderProto()
    try:
        header.ParseFromString(bytes(raw))
    except DecodeError as e:
        raise ProtocolError(f"bad packet header: {e}") from None
    for field in ("offsetInBlock", "seqno", "lastPacketInBlock", "dataLen"):
        if not header.HasField(field):
            raise ProtocolError(f"packet header lacks {field}")
    return header.offsetInBlock, header.seqno, header.lastPacketInBlock, header.dataLen


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a read's bytes go in a caller's buffer instead of a buffer of their own.

    Block byte p of a read of [offset, offset+length) lands at

        base + (p - offset) + (p // cell - offset // cell) * gap      (cell 0: no gaps)

    so the cells of one striped unit land straight at their places in a group's buffer, with
    the other units' cells of each row (`gap` bytes) between them:

        unit 1's block:  |c1      |c4      |c7 ...
        group buffer:    |c0 |c1 |c2 |c3 |c4 |c5 |c6 |c7 ...    (k = 3: gap = 2 cells)
    """

    base: int
    cell: int = 0
    gap: int = 0

    def at(self, p: int, offset: int) -> int:
        """Where block byte p of a read starting at block `offset` lands."""
        return self.base + (p - offset) + ((p // self.cell - offset // self.cell) * self.gap if self.cell else 0)


class ReadBlockParser:
    """Parses one READ_BLOCK response for `length` bytes at block offset `offset`.

    `feed()` bytes, or receive them straight into `receive_buffer()` and report them with
    `filled()`, then call `next_event()` until NEED_DATA. The requested bytes land in
    `output`: exactly `length` bytes of its own, or the caller's buffer at the places
    `placement` gives. `what` names the block and DataNode in errors.
    Bytes after the final packet are a protocol error: nothing may follow until our status.
    With `keep`, the verified chunk-aligned payload and its checksums are also kept
    (`kept_data` from block offset `chunk_offset`, `kept_sums`), for the block cache.
    """

    def __init__(self, offset: int, length: int, what: str = "block", *, keep: bool = False,
                 into: tuple[bytearray, Placement] | None = None) -> None:
        if offset < 0 or length <= 0:
            raise ValueError("a read needs offset >= 0 and length > 0")
        self.offset = offset
        self.length = length
        self.what = what
        if into is None:
            self.output = read_buffer(length)  # every byte written before `done` (not zeroed first)
            self.placement: Placement | None = None
        else:
            self.output, self.placement = into
            last = self.placement.at(offset + length - 1, offset)
            if self.placement.base < 0 or last >= len(self.output) or (self.placement.gap and not self.placement.cell):
                raise ValueError(f"{what}: a placement outside its {len(self.output)}-byte buffer")
        self.checksum: Checksum | None = None
        # Received bytes: [_lo, _hi) are not parsed yet; past _hi is room for the next receive
        # (not zeroed: never parsed, every view of the buffer ends at _hi).
        self._buf = bytearray()
        self._lo = self._hi = 0
        # The most one receive is offered: about the whole response (a small read's fits in
        # one), and never more than the caller asks.
        self._receive_cap = length + length // 16 + 4096
        self._state = "response"
        self._seqno = 0
        self._start_pos = 0  # chunkOffset: where the DataNode's aligned range starts
        self._pos = 0  # block offset of the next expected packet byte
        self.keep = keep
        self.kept_data = bytearray()
        self.kept_sums = bytearray()

    @property
    def chunk_offset(self) -> int:
        """Where the DataNode's chunk-aligned range (and `kept_data`) starts in the block."""
        return self._start_pos

    @property
    def done(self) -> bool:
        return self._state == "done"

    @property
    def received(self) -> int:
        """Payload bytes received so far, chunk alignment included."""
        return self._pos - self._start_pos

    @property
    def position(self) -> int:
        """The block offset the verified bytes reach: every requested byte below it is in `output`."""
        return self._pos

    @property
    def buffered(self) -> int:
        return self._hi - self._lo

    @property
    def bytes_due(self) -> int:
        """A lower bound on the bytes still to arrive (at least 1 until the end): the payload not
        yet received, less what is buffered and not yet parsed. Packet headers and checksums only
        add to what really comes."""
        if self._state != "packets":
            return 1
        return max(1, self.offset + self.length - self._pos - (self._hi - self._lo))

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        n = len(data)
        self._make_room(n)
        self._buf[self._hi : self._hi + n] = data
        self.filled(n)

    def receive_buffer(self, size: int) -> memoryview:
        """Room for the next received bytes (at most `size`), for a socket's recv_into: then
        `filled(n)` with the count it wrote. Saves the copy `feed` makes. Release the view
        before the parser's next call."""
        n = min(size, self._receive_cap)
        self._make_room(n)
        return memoryview(self._buf)[self._hi : self._hi + n]

    def filled(self, n: int) -> None:
        """`n` bytes were written at the start of the last `receive_buffer` (or fed)."""
        if self._state == "done" and n:
            raise ProtocolError(f"{self.what}: {n} unexpected bytes after the final packet")
        self._hi += n

    def _make_room(self, n: int) -> None:
        """At least `n` bytes of room after the unparsed ones: moved to the buffer's start when
        that makes it (one partial packet, at most), else a larger buffer."""
        buf, lo, hi = self._buf, self._lo, self._hi
        if len(buf) - hi >= n:
            return
        pending = hi - lo
        if pending + n <= len(buf):
            with memoryview(buf) as view:
                view[:pending] = view[lo:hi]  # memmove: the ranges may overlap
        else:
            new = read_buffer(max(pending + n, 2 * len(buf)))
            new[:pending] = memoryview(buf)[lo:hi]
            self._buf = new
        self._lo, self._hi = 0, pending

    def next_event(self) -> Event | _NeedDataType:
        if self._state == "response":
            return self._parse_response()
        if self._state == "packets":
            return self._parse_packet()
        if self._hi > self._lo:
            raise ProtocolError(f"{self.what}: {self._hi - self._lo} unexpected bytes after the final packet")
        return NEED_DATA

    def _parse_response(self) -> Event | _NeedDataType:
        with memoryview(self._buf)[: self._hi] as view:
            try:
                raw, end = read_delimited(view, self._lo, MAX_RESPONSE_LEN)
            except NeedData:
                return NEED_DATA
        self._lo = end
        fast = _fast_success(raw)
        if fast is not None:
            return self._start(*fast)
        resp = datatransfer_pb2.BlockOpResponseProto()
        try:
            resp.ParseFromString(raw)
        except DecodeError as e:
            raise ProtocolError(f"{self.what}: bad BlockOpResponseProto: {e}") from None
        if not resp.HasField("status"):
            raise ProtocolError(f"{self.what}: BlockOpResponseProto lacks a status")
        if resp.status != Status.SUCCESS:
            name = Status.Name(resp.status)
            message = resp.message.strip().splitlines()[0] if resp.message.strip() else ""
            if resp.status == Status.ERROR_ACCESS_TOKEN:
                raise InvalidBlockToken(f"{self.what}: block access token refused: {message}")
            raise ReplicaError(f"{self.what}: DataNode answered {name}: {message}")
        info = resp.readOpChecksumInfo
        if not resp.HasField("readOpChecksumInfo") or not info.HasField("checksum"):
            raise ProtocolError(f"{self.what}: success response without checksum info")
        return self._start(info.checksum.type, info.checksum.bytesPerChecksum, info.chunkOffset)

    def _place(self, lo: int, hi: int, data: memoryview) -> None:
        """Block bytes [lo, hi) to where the placement puts them, one cell at a time."""
        placement = self.placement
        assert placement is not None
        p = lo
        while p < hi:
            stop = min(hi, (p // placement.cell + 1) * placement.cell) if placement.cell else hi
            to = placement.at(p, self.offset)
            self.output[to : to + stop - p] = data[p - lo : stop - lo]
            p = stop

    def _start(self, kind: int, bytes_per_checksum: int, chunk_offset: int) -> ReadStarted:
        checksum = Checksum.of(kind, bytes_per_checksum)
        if not (self.offset - checksum.bytes_per_checksum < chunk_offset <= self.offset):
            raise ProtocolError(
                f"{self.what}: chunkOffset {chunk_offset} does not align read offset {self.offset} "
                f"to {checksum.bytes_per_checksum}-byte chunks"
            )
        self.checksum = checksum
        self._start_pos = self._pos = chunk_offset
        self._state = "packets"
        return ReadStarted(checksum, chunk_offset)

    def _parse_packet(self) -> Event | _NeedDataType:
        """Every complete packet in the buffer, in one pass (the hot loop of a read).

        Returns one PacketReceived for all the data packets it took, ReadFinished once the
        final (empty) packet is in, or NEED_DATA when not even one packet is complete.
        """
        buf = self._buf
        checksum = self.checksum
        assert checksum is not None
        verify = checksum.verify
        size, bpc = checksum.size, checksum.bytes_per_checksum
        start, end = self.offset, self.offset + self.length
        output, what, keep = self.output, self.what, self.keep
        n = self._hi
        at = self._lo  # where the next packet starts in `buf`
        taken = 0  # data bytes in the packets taken
        placement = self.placement
        view = memoryview(buf)[:n]  # the received bytes only: the room past them is not zeroed
        if _take_data_packets is not None and not keep:  # the common packets in one native call
            at, self._pos, self._seqno, taken = _take_data_packets(
                checksum.kind, bpc, size, view, at, self._pos, self._seqno, start, end, output, MAX_PACKET_SIZE,
                *(() if placement is None else (placement.base, placement.cell, placement.gap)))
        finished: ReadFinished | None = None
        data = view[0:0]
        try:
            while n - at >= 6:
                plen, hlen = _PKT_PREFIX.unpack_from(view, at)
                if plen < 4 or hlen > MAX_HEADER_LEN or plen + hlen > MAX_PACKET_SIZE:
                    raise ProtocolError(f"{what}: bad packet lengths PLEN={plen} HLEN={hlen}")
                total = 2 + hlen + plen
                if n - at < total:
                    break
                offset, seqno, last, data_len = _parse_packet_header(view[at + 6 : at + 6 + hlen])
                if seqno != self._seqno:
                    raise ProtocolError(f"{what}: packet seqno {seqno}, expected {self._seqno}")
                if data_len < 0 or data_len > plen - 4:
                    raise ProtocolError(f"{what}: bad dataLen {data_len} for PLEN {plen}")
                if offset != self._pos:
                    raise ProtocolError(f"{what}: packet at block offset {offset}, expected {self._pos}")
                sums_len = plen - 4 - data_len
                if sums_len != -(-data_len // bpc) * size:  # one checksum per chunk, the last may be short
                    raise ProtocolError(f"{what}: {sums_len} checksum bytes for {data_len} data bytes")
                self._seqno = seqno + 1
                if data_len == 0:
                    if not last:
                        raise ProtocolError(f"{what}: empty packet not marked last")
                    if offset < end:  # packets are contiguous from chunkOffset <= offset
                        raise ProtocolError(f"{what}: read ended at block offset {offset}, before {end}")
                    self._state = "done"
                    ok = checksum.kind != CHECKSUM_NULL
                    finished = ReadFinished(STATUS_CHECKSUM_OK if ok else STATUS_SUCCESS)
                    at += total
                    break
                if last:
                    raise ProtocolError(f"{what}: data packet marked last")
                if offset >= end:
                    raise ProtocolError(f"{what}: data past the requested range at block offset {offset}")
                sums_start = at + 6 + hlen
                data_start = sums_start + sums_len
                data = view[data_start : data_start + data_len]
                verify(data, view[sums_start:data_start], offset, what)
                if keep:
                    self.kept_data += data
                    self.kept_sums += view[sums_start:data_start]
                # Trim the chunk-alignment bytes before `start` and after `end`.
                lo = offset if offset > start else start
                hi = offset + data_len if offset + data_len < end else end
                if hi > lo and placement is None:
                    output[lo - start : hi - start] = data[lo - offset : hi - offset]
                elif hi > lo:
                    self._place(lo, hi, data[lo - offset : hi - offset])
                self._pos = offset + data_len
                taken += data_len
                at += total
        finally:
            data.release()
            view.release()
        self._lo = at  # only after a clean pass
        if finished is not None:
            return finished
        return PacketReceived(taken) if taken else NEED_DATA
