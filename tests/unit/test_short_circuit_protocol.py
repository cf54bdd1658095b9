"""The short-circuit ops, slot words, meta headers and socket-path rule, byte by byte (no I/O)."""

from __future__ import annotations

import os
import stat
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hdfsfuse.datanode.checksum import CHECKSUM_CRC32, CHECKSUM_CRC32C, CHECKSUM_NULL
from hdfsfuse.errors import InvalidBlockToken, ProtocolError
from hdfsfuse.local import short_circuit_protocol as scp
from hdfsfuse.proto import datatransfer_pb2, hdfs_pb2, rpc_pb2
from hdfsfuse.wire import NeedData

SLOT = scp.SlotId(scp.ShmId(hi=1, lo=2), 3)
BLOCK = hdfs_pb2.ExtendedBlockProto(poolId="BP-1", blockId=1073741825, generationStamp=1001, numBytes=4096)
TOKEN = rpc_pb2.TokenProto(identifier=b"id", password=b"pw", kind="HDFS_BLOCK_TOKEN", service="")


def test_a_shm_request_is_version_op_89_and_the_client_name() -> None:
    assert scp.encode_shm_request("c1") == b"\x00\x1c\x59" + b"\x04" + b"\x0a\x02c1"


def test_a_slot_is_its_segment_id_and_index() -> None:
    # ShortCircuitShmSlotProto {1: shmId {1: hi, 2: lo}, 2: slotIdx}
    assert SLOT.proto().SerializeToString() == b"\x0a\x04\x08\x01\x10\x02\x10\x03"


def test_a_fds_request_names_block_token_version_slot_and_receipts() -> None:
    raw = scp.encode_fds_request(BLOCK, TOKEN, SLOT)
    assert raw[:3] == b"\x00\x1c\x57"
    length = raw[3]
    assert len(raw) == 4 + length
    request = datatransfer_pb2.OpRequestShortCircuitAccessProto.FromString(raw[4:])
    assert request.header.block == BLOCK and request.header.token == TOKEN
    assert request.maxVersion == 1
    assert (request.slotId.shmId.hi, request.slotId.shmId.lo, request.slotId.slotIdx) == (1, 2, 3)
    assert request.supportsReceiptVerification is True


def test_a_release_is_op_88_and_the_slot() -> None:
    assert scp.encode_release(SLOT) == b"\x00\x1c\x58" + b"\x0a" + b"\x0a\x08" + b"\x0a\x04\x08\x01\x10\x02\x10\x03"


def test_negative_segment_ids_survive_the_trip() -> None:
    slot = scp.SlotId(scp.ShmId(hi=-5, lo=-(1 << 63)), 127)
    back = datatransfer_pb2.ReleaseShortCircuitAccessRequestProto.FromString(scp.encode_release(slot)[4:])
    assert (back.slotId.shmId.hi, back.slotId.shmId.lo, back.slotId.slotIdx) == (-5, -(1 << 63), 127)
    assert str(slot.shm) == "fffffffffffffffb8000000000000000"


def _delimited(message: bytes) -> bytes:
    from hdfsfuse.wire import encode_varint

    return encode_varint(len(message)) + message


REPLY = datatransfer_pb2.BlockOpResponseProto(status=datatransfer_pb2.SUCCESS, shortCircuitAccessVersion=1)


@given(st.sampled_from([0, 1, 5, 7]), st.text(max_size=300), st.binary(max_size=3))
def test_a_reply_needs_all_its_bytes_and_leaves_what_follows(status: int, message: str, after: bytes) -> None:
    sent = datatransfer_pb2.BlockOpResponseProto(status=status, message=message,  # type: ignore[arg-type]
                                                 shortCircuitAccessVersion=1)
    raw = _delimited(sent.SerializeToString())
    for n in range(len(raw)):  # every prefix is incomplete
        with pytest.raises(NeedData):
            scp.parse_reply(raw[:n], datatransfer_pb2.BlockOpResponseProto())
    reply = datatransfer_pb2.BlockOpResponseProto()
    buf = raw + after
    assert scp.parse_reply(buf, reply) == len(raw)
    assert reply == sent and buf[len(raw):] == after


def test_a_garbage_reply_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="undecodable"):
        scp.parse_reply(b"\x03\xff\xff\xff", datatransfer_pb2.BlockOpResponseProto())
    with pytest.raises(ProtocolError):  # a length beyond any reply
        scp.parse_reply(b"\xff\xff\xff\x7f", datatransfer_pb2.BlockOpResponseProto())


@pytest.mark.parametrize(("status", "error"), [
    (datatransfer_pb2.ERROR_ACCESS_TOKEN, InvalidBlockToken),
    (datatransfer_pb2.ERROR_UNSUPPORTED, scp.ShortCircuitUnsupported),
    (datatransfer_pb2.ERROR, scp.ShortCircuitRefused),
    (datatransfer_pb2.ERROR_INVALID, scp.ShortCircuitRefused),
])
def test_each_refusal_means_what_the_reader_must_do(status: int, error: type[Exception]) -> None:
    reply = datatransfer_pb2.BlockOpResponseProto(status=status, message="Replica not found")  # type: ignore[arg-type]
    with pytest.raises(error, match="Replica not found"):
        scp.check_fds_reply(reply, "block 7")
    scp.check_fds_reply(REPLY, "block 7")


def test_a_shm_reply_without_an_id_is_no_segment() -> None:
    ok = datatransfer_pb2.ShortCircuitShmResponseProto(
        status=datatransfer_pb2.SUCCESS, id=datatransfer_pb2.ShortCircuitShmIdProto(hi=9, lo=10))
    assert scp.check_shm_reply(ok, "dn") == scp.ShmId(9, 10)
    for bad in (datatransfer_pb2.ShortCircuitShmResponseProto(status=datatransfer_pb2.SUCCESS),
                datatransfer_pb2.ShortCircuitShmResponseProto(status=datatransfer_pb2.ERROR_UNSUPPORTED,
                                                              error="not configured")):
        with pytest.raises(scp.ShortCircuitUnsupported, match="no shared-memory segment"):
            scp.check_shm_reply(bad, "dn")


@pytest.mark.parametrize(("kind", "bpc"), [(CHECKSUM_CRC32C, 512), (CHECKSUM_CRC32, 4096), (CHECKSUM_NULL, 512)])
def test_the_meta_header_names_the_checksum(kind: int, bpc: int) -> None:
    checksum = scp.checksum_of_meta(struct.pack(">HBI", 1, kind, bpc), "m")
    assert (checksum.kind, checksum.bytes_per_checksum) == (kind, bpc)
    assert scp.checksum_of_meta(b"\x00\x01\x02\x00\x00\x02\x00", "m").bytes_per_checksum == 512


@pytest.mark.parametrize(("header", "match"), [
    (b"\x00\x01\x02", "shorter than its header"),
    (struct.pack(">HBI", 2, 2, 512), "version 2"),
    (struct.pack(">HBI", 1, 9, 512), "unknown checksum type"),
    (struct.pack(">HBI", 1, 2, 0), "bytesPerChecksum"),
])
def test_a_bad_meta_header_is_a_protocol_error(header: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        scp.checksum_of_meta(header, "m")


def test_only_bit_63_of_the_first_word_of_a_slot_says_valid() -> None:
    segment = bytearray(4 * scp.SLOT_SIZE)
    scp.SLOT_WORD.pack_into(segment, 1 * scp.SLOT_SIZE, scp.VALID)
    scp.SLOT_WORD.pack_into(segment, 2 * scp.SLOT_SIZE, (1 << 62) | 5)  # anchorable, anchored, not valid
    segment[3 * scp.SLOT_SIZE + 8 : 4 * scp.SLOT_SIZE] = b"\xff" * 56  # the unused rest of a slot
    assert [scp.slot_is_valid(segment, i) for i in range(4)] == [False, True, False, False]
    assert segment[scp.SLOT_SIZE + (7 if struct.pack("=H", 1) == b"\x01\x00" else 0)] == 0x80  # native endian


def test_the_socket_path_takes_the_xfer_port() -> None:
    assert scp.socket_path("/var/run/hdfs/dn._PORT", 9866) == "/var/run/hdfs/dn.9866"
    assert scp.socket_path("/var/run/hdfs/dn.sock", 9866) == "/var/run/hdfs/dn.sock"


def _fake_stat(tree: dict[str, tuple[int, int, int]]):  # type: ignore[no-untyped-def]
    def stat_of(path: str) -> os.stat_result:
        mode, uid, gid = tree[path]
        return os.stat_result((mode, 0, 0, 0, uid, gid, 0, 0, 0, 0))
    return stat_of


D = stat.S_IFDIR


@pytest.mark.parametrize(("tree", "problem"), [
    ({"/": (D | 0o755, 0, 0), "/run": (D | 0o755, 0, 0), "/run/hdfs": (D | 0o750, 1000, 0)}, None),
    ({"/": (D | 0o755, 0, 0), "/run": (D | 0o755, 0, 0), "/run/hdfs": (D | 0o775, 1000, 0)}, None),  # root group
    ({"/": (D | 0o755, 0, 0), "/run": (D | 0o1777, 0, 0), "/run/hdfs": (D | 0o755, 1000, 0)}, "world-writable"),
    ({"/": (D | 0o755, 0, 0), "/run": (D | 0o755, 0, 0), "/run/hdfs": (D | 0o775, 1000, 50)}, "group-writable"),
    ({"/": (D | 0o755, 0, 0), "/run": (D | 0o755, 0, 0), "/run/hdfs": (D | 0o755, 2000, 0)}, "owned by uid 2000"),
    ({"/": (D | 0o755, 0, 0), "/run": (D | 0o555, 2000, 0), "/run/hdfs": (D | 0o755, 0, 0)}, None),  # not writable
    ({"/": (D | 0o755, 0, 0), "/run": (stat.S_IFREG | 0o755, 0, 0)}, "not a directory"),
])
def test_a_socket_is_trusted_only_if_no_one_else_can_write_above_it(tree, problem) -> None:  # type: ignore[no-untyped-def]
    why = scp.unsafe_socket_path("/run/hdfs/dn.9866", _fake_stat(tree), euid=1000)
    if problem is None:
        assert why is None
    else:
        assert why is not None and problem in why


def test_a_relative_or_directory_socket_path_is_refused() -> None:
    never = _fake_stat({})
    assert "not an absolute socket path" in (scp.unsafe_socket_path("run/dn.1", never, 0) or "")
    assert "not an absolute socket path" in (scp.unsafe_socket_path("/run/dn/", never, 0) or "")
    assert scp.unsafe_socket_path("//run//dn.1", _fake_stat({"/": (D | 0o755, 0, 0), "/run": (D | 0o755, 0, 0)}),
                                  0) is None
