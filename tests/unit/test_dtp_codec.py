"""DataTransferProtocol READ_BLOCK, sans I/O: request bytes, checksums, the packet parser."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hdfsfuse import errors
from hdfsfuse.datanode import dtp, ops
from hdfsfuse.datanode.checksum import CHECKSUM_CRC32, CHECKSUM_CRC32C, CHECKSUM_NULL, Checksum, crc32, crc32c
from hdfsfuse.errors import InvalidBlockToken, ProtocolError
from hdfsfuse.proto import datatransfer_pb2, hdfs_pb2, rpc_pb2
from hdfsfuse.wire import NEED_DATA, read_delimited
from tests.dtp_fakes import block_op_response, packet, read_response

BLOCK = random.Random(7).randbytes(300_000)
NATIVE_PACKETS = dtp._take_data_packets


@pytest.fixture(autouse=True, scope="module", params=["native packet loop", "python packet loop"])
def packet_loop(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every parser test runs twice: with the C extension's packet loop, and with Python's alone."""
    if request.param == "native packet loop" and NATIVE_PACKETS is None:
        pytest.skip("the _chunked_crc extension is not built")
    dtp._take_data_packets = NATIVE_PACKETS if request.param == "native packet loop" else None
    yield request.param
    dtp._take_data_packets = NATIVE_PACKETS


def outcome(wire: bytes, offset: int, length: int, step: int, native: bool) -> tuple[object, ...]:
    """What a parser makes of `wire` fed in `step`-byte pieces: its events or its error, its bytes."""
    saved = dtp._take_data_packets
    dtp._take_data_packets = NATIVE_PACKETS if native else None
    parser = dtp.ReadBlockParser(offset, length, "blk_9")
    try:
        events = run(parser, wire, step)
    except (ProtocolError, errors.HdfsError) as e:
        return (type(e).__name__, str(e))
    finally:
        dtp._take_data_packets = saved
    return (repr(events), parser.done, bytes(parser.output) if parser.done else b"", parser.received)


def run(parser: dtp.ReadBlockParser, data: bytes, step: int | None = None) -> list[object]:
    events: list[object] = []
    chunks = [data] if step is None else [data[i : i + step] for i in range(0, len(data), step)]
    for chunk in chunks:
        parser.feed(chunk)
        while (ev := parser.next_event()) is not NEED_DATA:
            events.append(ev)
    return events


def test_crc_check_values() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32(b"123456789") == 0xCBF43926


def test_read_block_request_matches_protobuf_encoding() -> None:
    block = hdfs_pb2.ExtendedBlockProto(poolId="BP-1", blockId=1073741825, generationStamp=1001, numBytes=1 << 20)
    token = rpc_pb2.TokenProto(identifier=b"id", password=b"pw", kind="HDFS_BLOCK_TOKEN", service="")
    header = ops.encode_op_header(block, token, "hdfsfuse-test")
    for offset, length in [(0, 1), (4096, 4096), (1 << 19, (1 << 20) - 5), (2**40, 2**33)]:
        wire = ops.encode_read_block(ops.header_field(header), offset, length)
        assert wire[:3] == b"\x00\x1c\x51"
        body, end = read_delimited(wire, 3, 1 << 20)
        assert end == len(wire)
        expected = datatransfer_pb2.OpReadBlockProto(
            header=datatransfer_pb2.ClientOperationHeaderProto(
                baseHeader=datatransfer_pb2.BaseHeaderProto(block=block, token=token), clientName="hdfsfuse-test"
            ),
            offset=offset, len=length, sendChecksums=True, cachingStrategy=datatransfer_pb2.CachingStrategyProto(),
        )
        assert body == expected.SerializeToString()
        parsed = datatransfer_pb2.OpReadBlockProto.FromString(body)
        assert parsed.header.baseHeader.token.password == b"pw" and parsed.len == length


def test_status_bytes() -> None:
    for status, wire in [(datatransfer_pb2.CHECKSUM_OK, dtp.STATUS_CHECKSUM_OK),
                         (datatransfer_pb2.SUCCESS, dtp.STATUS_SUCCESS)]:
        body = datatransfer_pb2.ClientReadStatusProto(status=status).SerializeToString()
        assert wire == bytes([len(body)]) + body


@pytest.mark.parametrize("step", [None, 1, 7, 4096])
@pytest.mark.parametrize(("offset", "length"), [(0, 4096), (1000, 1), (511, 2), (5000, 70_000), (299_999, 1)])
def test_parse_whole_and_byte_by_byte(offset: int, length: int, step: int | None) -> None:
    wire = read_response(BLOCK, offset, length)
    parser = dtp.ReadBlockParser(offset, length, "blk_1")
    events = run(parser, wire, step)
    assert isinstance(events[0], dtp.ReadStarted)
    assert isinstance(events[-1], dtp.ReadFinished) and events[-1].status_reply == dtp.STATUS_CHECKSUM_OK
    assert parser.done and bytes(parser.output) == BLOCK[offset : offset + length]
    aligned_start = offset - offset % 512
    aligned_end = min(len(BLOCK), -(-(offset + length) // 512) * 512)
    assert parser.received == aligned_end - aligned_start


def test_proto_encoded_packet_headers_parse_too() -> None:
    wire = read_response(BLOCK, 100, 20_000, proto_header=True)
    parser = dtp.ReadBlockParser(100, 20_000)
    run(parser, wire, 13)
    assert bytes(parser.output) == BLOCK[100:20_100]


@pytest.mark.parametrize(("kind", "bpc"), [(CHECKSUM_CRC32, 512), (CHECKSUM_CRC32C, 1024), (CHECKSUM_NULL, 512),
                                           (CHECKSUM_CRC32C, 1), (CHECKSUM_CRC32, 777)])
def test_checksum_kinds_and_chunk_sizes(kind: int, bpc: int) -> None:
    offset, length = 1234, 5000
    parser = dtp.ReadBlockParser(offset, length)
    events = run(parser, read_response(BLOCK, offset, length, kind=kind, bpc=bpc, packet_size=2048))
    assert bytes(parser.output) == BLOCK[offset : offset + length]
    expected = dtp.STATUS_SUCCESS if kind == CHECKSUM_NULL else dtp.STATUS_CHECKSUM_OK
    assert events[-1] == dtp.ReadFinished(expected)


def test_short_last_chunk() -> None:
    block = BLOCK[:1000]  # the block's last chunk is 488 bytes
    parser = dtp.ReadBlockParser(900, 100)
    run(parser, read_response(block, 900, 100))
    assert bytes(parser.output) == block[900:1000]


def test_trailing_bytes_after_final_packet_are_an_error() -> None:
    wire = read_response(BLOCK, 0, 100) + b"\x00"
    with pytest.raises(ProtocolError, match="unexpected bytes"):
        run(dtp.ReadBlockParser(0, 100), wire)


def test_checksum_mismatch_names_block_and_offset() -> None:
    wire = bytearray(read_response(BLOCK, 0, 4096))
    wire[-100] ^= 0xFF  # a byte of the last data chunk (block offset 3584..4095)
    with pytest.raises(errors.ChecksumMismatch, match=r"blk_9 on DataNode 1\.2\.3\.4:5 at block offset 3584"):
        run(dtp.ReadBlockParser(0, 4096, "blk_9 on DataNode 1.2.3.4:5"), bytes(wire))


def test_bad_seqno() -> None:
    c = Checksum(CHECKSUM_CRC32C, 512)
    wire = block_op_response() + packet(0, 1, BLOCK[:512], c)
    with pytest.raises(ProtocolError, match="seqno"):
        run(dtp.ReadBlockParser(0, 512), wire)


def test_wrong_packet_offset() -> None:
    c = Checksum(CHECKSUM_CRC32C, 512)
    wire = block_op_response() + packet(512, 0, BLOCK[512:1024], c)
    with pytest.raises(ProtocolError, match="expected 0"):
        run(dtp.ReadBlockParser(0, 512), wire)


def test_oversized_plen_refused_before_buffering() -> None:
    parser = dtp.ReadBlockParser(0, 512)
    parser.feed(block_op_response() + b"\x01\x00\x00\x00\x00\x19")  # PLEN = 16 MiB
    parser.next_event()
    with pytest.raises(ProtocolError, match="bad packet lengths"):
        parser.next_event()


def test_a_complete_packet_over_the_maximum_size_is_refused() -> None:
    data = bytes(dtp.MAX_PACKET_SIZE)  # with its 4-byte PLEN field and header, over the maximum
    wire = block_op_response(kind=CHECKSUM_NULL) + packet(0, 0, data, Checksum(CHECKSUM_NULL, 512))
    with pytest.raises(ProtocolError, match="bad packet lengths"):
        run(dtp.ReadBlockParser(0, len(data)), wire)


def test_truncated_header_needs_data() -> None:
    c = Checksum(CHECKSUM_CRC32C, 512)
    wire = block_op_response() + packet(0, 0, BLOCK[:512], c)[:20]
    parser = dtp.ReadBlockParser(0, 512)
    assert isinstance(run(parser, wire)[0], dtp.ReadStarted)
    assert parser.next_event() is NEED_DATA and not parser.done


def test_missing_final_packet_is_not_done_and_early_end_is_an_error() -> None:
    c = Checksum(CHECKSUM_CRC32C, 512)
    parser = dtp.ReadBlockParser(0, 1024)
    run(parser, block_op_response() + packet(0, 0, BLOCK[:512], c))
    assert not parser.done
    with pytest.raises(ProtocolError, match="before 1024"):
        run(parser, packet(512, 1, b"", c, last=True))


def test_data_packet_marked_last_and_empty_packet_not_last() -> None:
    c = Checksum(CHECKSUM_CRC32C, 512)
    with pytest.raises(ProtocolError, match="marked last"):
        run(dtp.ReadBlockParser(0, 512), block_op_response() + packet(0, 0, BLOCK[:512], c, last=True))
    with pytest.raises(ProtocolError, match="not marked last"):
        run(dtp.ReadBlockParser(0, 512), block_op_response() + packet(0, 0, b"", c))


@pytest.mark.parametrize("kind", [CHECKSUM_CRC32C, CHECKSUM_NULL])
def test_checksum_length_must_match_data(kind: int) -> None:
    c = Checksum(kind, 512)
    extra = c.compute(BLOCK[:512]) + b"\x00" * 4  # one checksum too many (NULL: four bytes where none belong)
    with pytest.raises(ProtocolError, match="checksum bytes"):
        run(dtp.ReadBlockParser(0, 512), block_op_response(kind=kind) + packet(0, 0, BLOCK[:512], c, sums=extra))


@pytest.mark.parametrize(("offset", "chunk_offset"), [(0, 1), (0, 512), (1124, 512), (1124, 1536)])
def test_chunk_offset_validation(offset: int, chunk_offset: int) -> None:
    with pytest.raises(ProtocolError, match="chunkOffset"):
        run(dtp.ReadBlockParser(offset, 10), block_op_response(chunk_offset=chunk_offset))


def test_error_statuses() -> None:
    with pytest.raises(InvalidBlockToken, match="token"):
        run(dtp.ReadBlockParser(0, 1), block_op_response(datatransfer_pb2.ERROR_ACCESS_TOKEN, message="expired"))
    with pytest.raises(dtp.ReplicaError, match=r"ERROR: opReadBlock .* received exception"):
        run(dtp.ReadBlockParser(0, 1), block_op_response(
            datatransfer_pb2.ERROR, message="opReadBlock BP-1:blk_1 received exception ReplicaNotFound\n\tat"))


def test_response_without_checksum_info() -> None:
    raw = datatransfer_pb2.BlockOpResponseProto(status=0).SerializeToString()
    with pytest.raises(ProtocolError, match="checksum info"):
        run(dtp.ReadBlockParser(0, 1), bytes([len(raw)]) + raw)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 299_999), st.integers(1, 40_000), st.sampled_from([1, 64, 512, 1000]),
       st.sampled_from([CHECKSUM_CRC32C, CHECKSUM_CRC32, CHECKSUM_NULL]), st.integers(1, 70_000),
       st.integers(1, 5000))
def test_property_any_range_any_layout(offset: int, length: int, bpc: int, kind: int, psize: int, step: int) -> None:
    length = min(length, len(BLOCK) - offset)
    wire = read_response(BLOCK, offset, length, kind=kind, bpc=bpc, packet_size=psize)
    parser = dtp.ReadBlockParser(offset, length)
    run(parser, wire, step)
    assert parser.done and bytes(parser.output) == BLOCK[offset : offset + length]


def receive_in_place(parser: dtp.ReadBlockParser, wire: bytes, sizes: list[int]) -> list[object]:
    """Drive the parser as a socket's recv_into does: each receive is offered up to the next
    size, writes fewer bytes than its room, and leaves the rest of the room full of 0xFF (a
    packet length of 4 GiB, a varint that never ends), which the parser must never parse."""
    events: list[object] = []
    pos, i = 0, 0
    while pos < len(wire):
        room = parser.receive_buffer(sizes[i % len(sizes)])
        n = min(len(room), len(wire) - pos, max(1, len(room) // 2 + i % 3))
        room[:n] = wire[pos : pos + n]
        room[n:] = b"\xff" * (len(room) - n)
        room.release()
        parser.filled(n)
        pos, i = pos + n, i + 1
        while (ev := parser.next_event()) is not NEED_DATA:
            events.append(ev)
    return events


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 299_999), st.integers(1, 40_000), st.sampled_from([1, 64, 512]), st.integers(1, 70_000),
       st.lists(st.integers(1, 300_000), min_size=1, max_size=6))
def test_bytes_received_in_place_read_as_fed_ones_and_the_room_past_them_is_never_parsed(
        offset: int, length: int, bpc: int, psize: int, sizes: list[int]) -> None:
    length = min(length, len(BLOCK) - offset)
    wire = read_response(BLOCK, offset, length, bpc=bpc, packet_size=psize)
    fed = dtp.ReadBlockParser(offset, length)
    expected = run(fed, wire, 4096)
    parser = dtp.ReadBlockParser(offset, length)
    events = receive_in_place(parser, wire, sizes)
    assert parser.done and bytes(parser.output) == BLOCK[offset : offset + length]
    assert [type(e) for e in events if not isinstance(e, dtp.PacketReceived)] == \
        [type(e) for e in expected if not isinstance(e, dtp.PacketReceived)]
    assert parser.received == fed.received and parser.buffered == 0


def test_a_receive_is_offered_about_the_whole_response_of_a_small_read_and_no_more() -> None:
    wire = read_response(BLOCK, 4096, 4096)
    parser = dtp.ReadBlockParser(4096, 4096)
    room = parser.receive_buffer(256 * 1024)
    assert len(wire) <= len(room) < 16 * 1024
    room[: len(wire)] = wire
    room.release()
    parser.filled(len(wire))
    assert [type(e) for e in iter(parser.next_event, NEED_DATA)] == [dtp.ReadStarted, dtp.ReadFinished]
    assert bytes(parser.output) == BLOCK[4096:8192]


def test_bytes_after_the_final_packet_are_refused_when_received_in_place_too() -> None:
    parser = dtp.ReadBlockParser(0, 512)
    receive_in_place(parser, read_response(BLOCK, 0, 512), [1 << 16])
    assert parser.done
    parser.receive_buffer(10).release()
    with pytest.raises(ProtocolError, match="3 unexpected bytes after the final packet"):
        parser.filled(3)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 299_999), st.integers(1, 40_000), st.sampled_from([0, 1, 512, 4096, 65536]),
       st.integers(0, 3), st.integers(0, 5000), st.integers(1, 70_000), st.integers(1, 5000))
def test_placed_reads_land_where_the_placement_says_and_nowhere_else(
        offset: int, length: int, cell: int, gap_cells: int, base: int, psize: int, step: int) -> None:
    """A read into a caller's buffer (a striped unit's cells into a group buffer) writes each
    byte exactly where `Placement.at` says, and leaves every other byte of the buffer alone."""
    length = min(length, len(BLOCK) - offset)
    placement = dtp.Placement(base, cell, gap_cells * cell)
    last = placement.at(offset + length - 1, offset)
    buffer = bytearray(b"\xee" * (last + 1 + 100))
    wire = read_response(BLOCK, offset, length, packet_size=psize)
    parser = dtp.ReadBlockParser(offset, length, into=(buffer, placement))
    run(parser, wire, step)
    expected = bytearray(b"\xee" * len(buffer))
    for p in range(offset, offset + length):
        expected[placement.at(p, offset)] = BLOCK[p]
    assert parser.done and parser.output is buffer and buffer == expected


def test_a_placement_outside_its_buffer_is_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        dtp.ReadBlockParser(100, 50, into=(bytearray(49), dtp.Placement(0)))
    with pytest.raises(ValueError, match="outside"):  # the second cell lands past the end
        dtp.ReadBlockParser(0, 20, into=(bytearray(25), dtp.Placement(0, 10, 10)))
    with pytest.raises(ValueError, match="outside"):
        dtp.ReadBlockParser(0, 20, into=(bytearray(100), dtp.Placement(-1)))
    parser = dtp.ReadBlockParser(0, 20, into=(bytearray(30), dtp.Placement(0, 10, 10)))  # exactly fits
    assert len(parser.output) == 30


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    parser = dtp.ReadBlockParser(0, 100)
    try:
        run(parser, data)
    except (ProtocolError, errors.HdfsError):
        pass


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 3000), st.binary(min_size=1, max_size=8), st.integers(0, 2))
def test_fuzz_mutated_valid_stream(position: int, garbage: bytes, mode: int) -> None:
    wire = bytearray(read_response(BLOCK, 100, 2000, packet_size=1024))
    position %= len(wire)
    if mode == 0:
        wire[position : position + len(garbage)] = garbage
    elif mode == 1:
        del wire[position:]
    else:
        wire[position:position] = garbage
    parser = dtp.ReadBlockParser(100, 2000)
    try:
        run(parser, bytes(wire))
    except (ProtocolError, errors.HdfsError):
        return
    if parser.done:  # a mutation that survived every check must not change the bytes
        assert bytes(parser.output) == BLOCK[100:2100]


def packet_starts(wire: bytes | bytearray) -> list[int]:
    """Where each packet of a well-formed READ_BLOCK response starts."""
    _, at = read_delimited(wire, 0, 1 << 20)
    starts = []
    while at < len(wire):
        starts.append(at)
        plen, hlen = struct.unpack_from(">IH", wire, at)
        at += 2 + hlen + plen
    return starts


@pytest.mark.skipif(NATIVE_PACKETS is None, reason="the _chunked_crc extension is not built")
@settings(max_examples=600, deadline=None)
@given(st.integers(0, 299_000), st.integers(1, 9000), st.sampled_from([CHECKSUM_CRC32C, CHECKSUM_CRC32, CHECKSUM_NULL]),
       st.sampled_from([64, 512]), st.sampled_from([512, 1024, 4096]), st.booleans(), st.integers(1, 20_000),
       st.sampled_from([0, 0, 1, 700, 5000]),
       st.lists(st.tuples(st.integers(-1, 3), st.integers(0, 1 << 20), st.integers(0, 255)), max_size=3),
       st.integers(0, 2))
def test_the_native_packet_loop_agrees_with_python_on_every_stream(
        offset: int, length: int, kind: int, bpc: int, psize: int, proto: bool, step: int, extra: int,
        flips: list[tuple[int, int, int]], cut: int) -> None:
    """Valid streams, streams running past the range asked for (`extra`), corrupted ones (a byte
    changed in a packet's lengths and header, or anywhere) and truncated ones: the native loop
    gives the same events, bytes and errors as Python's alone."""
    length = min(length, len(BLOCK) - offset)
    sent = min(length + extra, len(BLOCK) - offset)
    wire = bytearray(read_response(BLOCK, offset, sent, kind=kind, bpc=bpc, packet_size=psize, proto_header=proto))
    starts = packet_starts(wire)
    for which, position, value in flips:
        at = position if which < 0 else starts[which % len(starts)] + position % 31
        wire[at % len(wire)] = value
    if cut:
        del wire[len(wire) - cut * 7 :]
    native = outcome(bytes(wire), offset, length, step, native=True)
    assert native == outcome(bytes(wire), offset, length, step, native=False)
    if not flips and not cut and sent == length:
        assert native[1:3] == (True, BLOCK[offset : offset + length])


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([0, 1, 2]), st.integers(1, 1 << 24), st.integers(0, 2**63 - 1))
def test_hand_parsed_response_agrees_with_protobuf(kind: int, bpc: int, chunk_offset: int) -> None:
    raw = block_op_response(kind=kind, bpc=bpc, chunk_offset=chunk_offset)
    body, _ = read_delimited(raw, 0, 1 << 20)
    assert dtp._fast_success(body) == (kind, bpc, chunk_offset)


def test_unusual_response_layout_goes_through_protobuf() -> None:
    resp = datatransfer_pb2.BlockOpResponseProto(status=0, message="hello")
    resp.readOpChecksumInfo.checksum.type = 2
    resp.readOpChecksumInfo.checksum.bytesPerChecksum = 512
    resp.readOpChecksumInfo.chunkOffset = 1024
    body = resp.SerializeToString()
    assert dtp._fast_success(body) is None
    parser = dtp.ReadBlockParser(1100, 10)
    parser.feed(bytes([len(body)]) + body)
    started = parser.next_event()
    assert isinstance(started, dtp.ReadStarted) and started.chunk_offset == 1024


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_fuzz_hand_parser(data: bytes) -> None:
    result = dtp._fast_success(data)
    if result is not None:
        parsed = datatransfer_pb2.BlockOpResponseProto.FromString(data)
        info = parsed.readOpChecksumInfo
        assert parsed.status == 0
        assert result == (info.checksum.type, info.checksum.bytesPerChecksum, info.chunkOffset)


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("kind", [CHECKSUM_CRC32C, CHECKSUM_CRC32])
def test_every_crc_implementation_verifies_and_detects(native: bool, kind: int) -> None:
    from hdfsfuse.datanode.checksum import chunked_crc, native_crc32c

    if native:
        # The test command builds the C extension and installs the `fast` extra: both must be in use.
        assert chunked_crc is not None and Checksum.of(kind, 512)._bulk is chunked_crc
        assert kind != CHECKSUM_CRC32C or (native_crc32c is not None and Checksum.of(kind, 512)._func is native_crc32c)
    c = Checksum(kind, 512, native=native)
    data = bytearray(BLOCK[:5000])
    sums = Checksum(kind, 512, native=False).compute(bytes(data))
    c.verify(memoryview(data), memoryview(sums), 0, "blk")
    data[4999] ^= 1
    with pytest.raises(errors.ChecksumMismatch, match="block offset 4608"):
        c.verify(memoryview(data), memoryview(sums), 0, "blk")


@given(st.sampled_from([CHECKSUM_CRC32C, CHECKSUM_CRC32]), st.binary(min_size=1, max_size=5000),
       st.sampled_from([1, 7, 512, 4096]), st.data())
def test_the_one_call_verifier_agrees_with_python_chunk_by_chunk(kind: int, data: bytes, bpc: int,
                                                                 draw: st.DataObject) -> None:
    from hdfsfuse.datanode.checksum import chunked_crc

    assert chunked_crc is not None
    fast, slow = Checksum(kind, bpc), Checksum(kind, bpc, native=False)
    sums = slow.compute(data)
    assert fast.compute(data) == sums
    assert chunked_crc.crc(kind, data) == (crc32c(data) if kind == CHECKSUM_CRC32C else crc32(data))
    fast.verify(memoryview(bytearray(data)), sums, 0, "blk")
    flip = draw.draw(st.integers(min_value=0, max_value=len(data) * 8 - 1))
    broken = bytearray(data)
    broken[flip // 8] ^= 1 << (flip % 8)
    chunk_start = flip // 8 // bpc * bpc
    for checksum in (fast, slow):
        with pytest.raises(errors.ChecksumMismatch, match=f"block offset {100 + chunk_start}$"):
            checksum.verify(bytes(broken), sums, 100, "blk")
    with pytest.raises(ValueError, match="checksum bytes"):
        chunked_crc.first_mismatch(kind, data, sums + b"x", bpc)
