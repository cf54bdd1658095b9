"""The pure COMPOSITE_CRC arithmetic: composing CRCs equals the CRC of the joined bytes."""

from __future__ import annotations

import zlib

import google_crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from hdfsfuse.client.filechecksum import POLYNOMIALS, compose, describe, encode_request, file_crc, monomial
from hdfsfuse.datanode.checksum import CHECKSUM_CRC32, CHECKSUM_CRC32C
from hdfsfuse.proto import datatransfer_pb2, hdfs_pb2, rpc_pb2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=2000), min_size=1, max_size=6))
def test_composed_block_crcs_are_the_crc_of_the_file(parts: list[bytes]) -> None:
    whole = b"".join(parts)
    assert file_crc([(google_crc32c.value(p), len(p)) for p in parts], CHECKSUM_CRC32C) == google_crc32c.value(whole)
    assert file_crc([(zlib.crc32(p), len(p)) for p in parts], CHECKSUM_CRC32) == zlib.crc32(whole)


def test_monomials_and_the_zero_quirk() -> None:
    poly = POLYNOMIALS[CHECKSUM_CRC32C]
    assert monomial(0, poly) == 0x80000000  # x^0
    assert monomial(1, poly) == 0x80000000 >> 8  # x^8
    assert compose(0x12345678, 0, 0, poly) == 0x12345678
    # Hadoop's CrcComposer treats a running 0 as "nothing yet": the next CRC replaces it.
    assert file_crc([(0, 10), (0xDEADBEEF, 5)], CHECKSUM_CRC32C) == 0xDEADBEEF
    assert describe(0xAB, CHECKSUM_CRC32C) == "COMPOSITE-CRC32C 000000ab"


def test_the_request_is_op_85_with_composite_crc_options() -> None:
    block = hdfs_pb2.ExtendedBlockProto(poolId="bp", blockId=7, generationStamp=1, numBytes=10)
    raw = encode_request(block, rpc_pb2.TokenProto(identifier=b"", password=b"", kind="", service=""))
    assert raw[:3] == b"\x00\x1c\x55"
    op = datatransfer_pb2.OpBlockChecksumProto.FromString(raw[4:])
    assert len(raw) == 4 + raw[3]
    assert op.header.block.blockId == 7
    assert op.blockChecksumOptions.blockChecksumType == datatransfer_pb2.COMPOSITE_CRC
