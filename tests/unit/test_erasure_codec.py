"""The pure erasure-coding core: GF(2^8), Hadoop's codecs (rs, rs-legacy, xor), policies, the
striped layout and the read planner. Known vectors come from Hadoop's own coders (see
../shared/reference/hdfs-erasure-coding.md); the rest is checked with Hypothesis."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hdfsfuse.erasure import codec as erasure
from hdfsfuse.erasure.codec import EcPolicy, decode, decode_rows, encode, encode_matrix, gf_inv, gf_mul, invert
from hdfsfuse.erasure.striping import decode_sources, internal_length, plan_group_read
from hdfsfuse.errors import NotSupported
from hdfsfuse.proto import hdfs_pb2


def test_field_inverses_and_tables() -> None:
    for a in range(1, 256):
        assert gf_mul(a, gf_inv(a)) == 1
        assert erasure.MUL[a] == bytes(gf_mul(a, v) for v in range(256))
    assert gf_mul(0, 7) == 0 and erasure.MUL[0] == bytes(256)
    assert gf_mul(2, 0x80) == 0x1D  # x * x^7 reduced by 0x11d
    with pytest.raises(ZeroDivisionError):
        gf_inv(0)


def test_encode_matrices_match_hadoop() -> None:
    assert encode_matrix("rs", 3, 2)[3:] == ((244, 142, 1), (71, 167, 122))
    assert encode_matrix("rs", 6, 3)[6:] == (
        (122, 186, 71, 167, 142, 244), (186, 122, 167, 71, 244, 142), (173, 157, 221, 152, 61, 170))
    assert encode_matrix("rs", 10, 4)[10] == (221, 152, 173, 157, 93, 150, 61, 170, 142, 244)
    assert encode_matrix("rs-legacy", 6, 3)[6:] == (
        (8, 56, 216, 63, 4, 245), (14, 34, 186, 176, 56, 127), (7, 27, 99, 142, 61, 139))
    assert encode_matrix("rs-legacy", 3, 2)[3:] == ((2, 6, 14), (3, 7, 15))
    assert encode_matrix("xor", 2, 1) == ((1, 0), (0, 1), (1, 1))
    for codec, k, m in (("rs", 3, 2), ("rs-legacy", 6, 3)):
        assert encode_matrix(codec, k, m)[:k] == tuple(tuple(int(i == j) for j in range(k)) for i in range(k))


def test_parity_and_decode_match_hadoop_vectors() -> None:
    assert encode("rs", [b"\x01", b"\x02", b"\x03"], 2) == [b"\xf6", b"\x9a"]  # 246, 154
    assert encode("rs", [bytes([i]) for i in range(1, 7)], 3) == [bytes([242]), bytes([187]), bytes([184])]
    assert encode("rs-legacy", [b"\x01", b"\x02", b"\x03"], 2) == [bytes([28]), bytes([28])]
    assert encode("xor", [b"\x01", b"\x02"], 1) == [b"\x03"]
    # The worked example: lose d0 and d2, decode from d1, p0, p1.
    assert decode_rows("rs", 3, 2, (1, 3, 4), (0, 2)) == [[1, 187, 189], [122, 104, 107]]
    assert decode("rs", 3, 2, {1: b"\x02", 3: b"\xf6", 4: b"\x9a"}, [0, 2], 1) == {0: b"\x01", 2: b"\x03"}


def test_unknown_codecs_and_bad_decodes_are_refused() -> None:
    with pytest.raises(NotSupported, match="hhxor"):
        encode_matrix("hhxor", 6, 3)
    with pytest.raises(NotSupported, match="one parity unit"):
        encode_matrix("xor", 2, 2)
    with pytest.raises(ValueError, match="3 distinct"):
        decode_rows("rs", 3, 2, (0, 1), (2,))
    with pytest.raises(ValueError, match="not invertible"):
        invert([[1, 2], [1, 2]])


Case = tuple[str, int, int, list[bytes], list[int], list[int]]


@st.composite
def erasure_cases(draw: st.DrawFn) -> Case:
    codec = draw(st.sampled_from(["rs", "rs-legacy", "xor"]))
    k = draw(st.integers(1, 10))
    m = 1 if codec == "xor" else draw(st.integers(1, min(6, 16 - k)))
    n = draw(st.integers(1, 64))
    data = [draw(st.binary(min_size=n, max_size=n)) for _ in range(k)]
    erased = draw(st.lists(st.integers(0, k + m - 1), min_size=1, max_size=m, unique=True))
    survivors = [u for u in range(k + m) if u not in erased]
    chosen = sorted(draw(st.permutations(survivors))[:k])
    return codec, k, m, data, erased, chosen


@settings(max_examples=300, deadline=None)
@given(erasure_cases())
def test_any_k_survivors_rebuild_any_erased_units(case: Case) -> None:
    codec, k, m, data, erased, chosen = case
    units = data + encode(codec, data, m)
    got = decode(codec, k, m, {u: units[u] for u in chosen}, erased, len(data[0]))
    assert got == {u: units[u] for u in erased}


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12).flatmap(lambda n: st.lists(st.lists(st.integers(0, 255), min_size=n, max_size=n),
                                                       min_size=n, max_size=n)))
def test_invert_is_an_inverse_when_one_exists(matrix: list[list[int]]) -> None:
    try:
        inverse = invert(matrix)
    except ValueError:
        return  # singular: checked by the vectors above
    n = len(matrix)
    product = [[erasure._dot(matrix[i], [inverse[t][j] for t in range(n)]) for j in range(n)] for i in range(n)]
    assert product == [[int(i == j) for j in range(n)] for i in range(n)]


# ----- policies --------------------------------------------------------------------------------

def test_built_in_policies_resolve_from_the_id_alone() -> None:
    assert erasure.resolve_policy(hdfs_pb2.ErasureCodingPolicyProto(id=2), "f") == EcPolicy(
        "RS-3-2-1024k", "rs", 3, 2, 1 << 20, 2)
    assert erasure.resolve_policy(hdfs_pb2.ErasureCodingPolicyProto(id=3), "f").codec == "rs-legacy"
    assert erasure.resolve_policy(hdfs_pb2.ErasureCodingPolicyProto(id=4), "f").name == "XOR-2-1-1024k"
    # Only the low 8 bits count, and the table wins over any other fields.
    odd = hdfs_pb2.ErasureCodingPolicyProto(id=0x101, name="ignored", cellSize=5)
    assert erasure.resolve_policy(odd, "f").name == "RS-6-3-1024k"


def test_user_policies_need_their_full_description() -> None:
    full = hdfs_pb2.ErasureCodingPolicyProto(
        id=64, name="RS-3-2-64k", cellSize=65536,
        schema=hdfs_pb2.ECSchemaProto(codecName="rs", dataUnits=3, parityUnits=2))
    assert erasure.resolve_policy(full, "f") == EcPolicy("RS-3-2-64k", "rs", 3, 2, 65536, 64)
    with pytest.raises(NotSupported, match="did not describe it"):
        erasure.resolve_policy(hdfs_pb2.ErasureCodingPolicyProto(id=64, name="x"), "/f")
    hh = hdfs_pb2.ErasureCodingPolicyProto()
    hh.CopyFrom(full)
    hh.schema.codecName = "hhxor"
    with pytest.raises(NotSupported, match="codec 'hhxor'"):
        erasure.resolve_policy(hh, "/f")
    bad = hdfs_pb2.ErasureCodingPolicyProto()
    bad.CopyFrom(full)
    bad.schema.parityUnits = 15
    with pytest.raises(NotSupported, match="invalid schema"):
        erasure.resolve_policy(bad, "/f")
    assert erasure.policy_name(hh) == "RS-3-2-64k"
    assert erasure.policy_name(hdfs_pb2.ErasureCodingPolicyProto(id=99)) == "policy id 99"


# ----- layout and plan -------------------------------------------------------------------------

RS32 = erasure.SYSTEM_POLICIES[2]
RS63 = erasure.SYSTEM_POLICIES[1]


def test_internal_lengths_match_hadoop() -> None:
    assert [internal_length(2621563, RS32, i) for i in range(5)] == [1048576, 1048576, 524411, 1048576, 1048576]
    assert [internal_length(3146505, RS63, i) for i in range(9)] == [1048576] * 3 + [777, 0, 0] + [1048576] * 3
    assert [internal_length(6 << 20, RS32, i) for i in range(5)] == [2 << 20] * 5  # whole stripes
    assert [internal_length(100, RS63, i) for i in range(9)] == [100, 0, 0, 0, 0, 0, 100, 100, 100]


def _layout(policy: EcPolicy, group: bytes) -> list[bytes]:
    """Deal a group's bytes to its data units cell by cell (what a writer stores)."""
    units = [bytearray() for _ in range(policy.data_units)]
    for c in range(0, len(group), policy.cell_size):
        units[(c // policy.cell_size) % policy.data_units] += group[c : c + policy.cell_size]
    return [bytes(u) for u in units]


@st.composite
def group_reads(draw: st.DrawFn) -> tuple[EcPolicy, bytes, int, int]:
    k = draw(st.integers(1, 6))
    cell = draw(st.sampled_from([1, 2, 3, 8, 16]))
    policy = EcPolicy("t", "rs", k, 2, cell, 64)
    size = draw(st.integers(1, k * cell * 4 + cell))
    group = bytes(i % 251 for i in range(size))
    offset = draw(st.integers(0, size - 1))
    length = draw(st.integers(1, size - offset))
    return policy, group, offset, length


@settings(max_examples=400, deadline=None)
@given(group_reads())
def test_the_plan_reads_exact_unit_ranges_that_rebuild_the_range(case: tuple[EcPolicy, bytes, int, int]) -> None:
    policy, group, offset, length = case
    units = _layout(policy, group)
    for i, unit in enumerate(units):
        assert internal_length(len(group), policy, i) == len(unit)
    reads = plan_group_read(policy, offset, length)
    assert len({r.unit for r in reads}) == len(reads)  # one read per unit
    output = bytearray(length)
    for r in reads:
        assert 0 <= r.start < r.end <= len(units[r.unit])  # never past a unit's stored bytes
        r.scatter(units[r.unit][r.start : r.end], output)
    assert bytes(output) == group[offset : offset + length]
    assert sum(r.length for r in reads) == length  # exact: not one byte more
    for r in reads:  # the parser's placement puts every byte where scatter does; gather undoes it
        placement = r.placement(policy)
        places = [placement.at(p, r.start) for p in range(r.start, r.end)]
        assert places == [out + i for at, out, n in r.spans for i in range(n)]
        assert r.gather(output) == units[r.unit][r.start : r.end]


def test_a_read_inside_one_cell_is_one_unit_range() -> None:
    reads = plan_group_read(RS63, (1 << 20) + 8192, 4096)
    assert [(r.unit, r.start, r.end) for r in reads] == [(1, 8192, 12288)]
    straddle = plan_group_read(RS63, 1046528, 4096)  # cells 0 -> 1
    assert [(r.unit, r.start, r.end) for r in straddle] == [(0, 1046528, 1048576), (1, 0, 2048)]


def test_decode_sources_prefer_data_units_in_index_order() -> None:
    assert decode_sources(RS32, 1, set()) == [0, 2, 3]
    assert decode_sources(RS32, 1, {0}) == [2, 3, 4]
    assert decode_sources(RS32, 4, {0, 1}) is None  # three units lost: RS-3-2 rebuilds two


@pytest.mark.parametrize("lost", list(itertools.permutations(range(5), 2)))
def test_decode_sources_give_up_beyond_the_parity_count(lost: tuple[int, int]) -> None:
    erased, other = lost
    rest = [u for u in range(5) if u not in lost]
    assert decode_sources(RS32, erased, {other}) == rest  # two lost: the other three
    assert decode_sources(RS32, erased, {other, rest[0]}) is None  # three lost: RS-3-2 rebuilds two


# ----- a located group -------------------------------------------------------------------------

def _located_group(indices: bytes, numbytes: int = 3 * (1 << 20) + 5) -> hdfs_pb2.LocatedBlockProto:
    lb = hdfs_pb2.LocatedBlockProto(
        b=hdfs_pb2.ExtendedBlockProto(poolId="bp", blockId=(1 << 63) + 16 * 7, generationStamp=1001,
                                      numBytes=numbytes),
        offset=0, blockIndices=indices)
    for pos, _index in enumerate(indices):
        loc = lb.locs.add()
        loc.id.ipAddr, loc.id.xferPort = "127.0.0.1", 9000 + pos
        lb.blockTokens.add(identifier=bytes([pos]), password=b"p", kind="HDFS_BLOCK_TOKEN", service="")
    return lb


def test_group_plan_names_each_internal_block_with_its_own_token() -> None:
    from hdfsfuse.erasure.reader import group_plan

    plan = group_plan(_located_group(bytes([4, 0, 3, 1, 0])), RS32, "/f", "client",
                      lambda loc: f"{loc.id.ipAddr}:{loc.id.xferPort}")
    mib = 1 << 20
    assert plan.lengths == (mib + 5, mib, mib, mib + 5, mib + 5)  # a second row of 5 bytes
    assert sorted(plan.sources) == [0, 1, 3, 4]  # unit 2 has no location: decoded when read
    # A duplicated index is a second location of the same internal block, in the NameNode's order.
    assert [s.address for s in plan.sources[0]] == ["127.0.0.1:9001", "127.0.0.1:9004"]
    three = plan.sources[3][0]
    assert three.block.blockId == (1 << 63) + 16 * 7 + 3  # ids in uint64 space
    assert three.block.generationStamp == 1001 and three.block.numBytes == plan.lengths[3]
    assert three.token.identifier == bytes([2])  # blockTokens[pos], not the group's token
    assert "internal block 3" in three.what and "/f" in three.what


def test_group_plan_refuses_inconsistent_answers() -> None:
    from hdfsfuse.erasure.reader import group_plan
    from hdfsfuse.errors import ProtocolError

    bad = _located_group(bytes([0, 1, 2]))
    bad.blockIndices = bytes([0, 1])
    with pytest.raises(ProtocolError, match="3 locations but 2 block indices"):
        group_plan(bad, RS32, "/f", "c", lambda loc: "a")
    with pytest.raises(ProtocolError, match="internal block 7, beyond RS-3-2-1024k's 5 units"):
        group_plan(_located_group(bytes([0, 7])), RS32, "/f", "c", lambda loc: "a")
