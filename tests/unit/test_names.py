"""The mount's kept names and located windows (`fuse.names`), and kept locations (`client.located`)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from hdfsfuse.client.located import SETTLED_MS, Interned, LocatedFiles, complete, pack, settled, unpack
from hdfsfuse.fuse.names import (
    NameCache,
    Order,
    replicas,
    signed_key,
    start_before,
    window_starts,
)
from hdfsfuse.proto import hdfs_pb2, rpc_pb2

IS_FILE = hdfs_pb2.HdfsFileStatusProto.IS_FILE
IS_DIR = hdfs_pb2.HdfsFileStatusProto.IS_DIR


def status(name: bytes, file_id: int, length: int = 100, *, blocksize: int = 1000, replication: int = 3,
           mtime: int = 1, kind: int = IS_FILE) -> hdfs_pb2.HdfsFileStatusProto:
    return hdfs_pb2.HdfsFileStatusProto(
        fileType=kind, path=name, length=length, permission=hdfs_pb2.FsPermissionProto(perm=0o644),
        owner="u", group="g", modification_time=mtime, access_time=mtime, fileId=file_id, blocksize=blocksize,
        block_replication=replication)


def located(length: int, blocks: list[int], *, under_construction: bool = False) -> hdfs_pb2.LocatedBlocksProto:
    out = hdfs_pb2.LocatedBlocksProto(fileLength=length, underConstruction=under_construction,
                                      isLastBlockComplete=not under_construction)
    offset = 0
    for i, n in enumerate(blocks):
        out.blocks.add(offset=offset, corrupt=False,
                       b=hdfs_pb2.ExtendedBlockProto(poolId="bp", blockId=1000 + i, generationStamp=1, numBytes=n),
                       blockToken=rpc_pb2.TokenProto(identifier=b"", password=b"", kind="", service=""))
        offset += n
    return out


# ----- ordering and windows --------------------------------------------------------------------------


def _java_compare(a: bytes, b: bytes) -> int:
    """Java's SignedBytes.lexicographicalComparator, the NameNode's order of names."""
    for x, y in zip(a, b, strict=False):
        sx, sy = x - 256 if x > 127 else x, y - 256 if y > 127 else y
        if sx != sy:
            return -1 if sx < sy else 1
    return (len(a) > len(b)) - (len(a) < len(b))


@given(st.binary(max_size=6), st.binary(max_size=6))
def test_signed_key_orders_names_as_the_namenode_does(a: bytes, b: bytes) -> None:
    assert ((signed_key(a) > signed_key(b)) - (signed_key(a) < signed_key(b))) == _java_compare(a, b)


@given(st.binary(min_size=1, max_size=6), st.binary(max_size=6))
def test_a_page_after_start_before_begins_at_or_before_the_name(name: bytes, other: bytes) -> None:
    before = start_before(name)
    assert _java_compare(before, name) < 0  # the name itself is listed after it
    if _java_compare(other, before) > 0 and _java_compare(other, name) < 0:
        # only names that extend `before` lie in between (they share its bytes)
        assert other.startswith(before)


def test_replicas_count_blocks_times_replication() -> None:
    assert replicas(status(b"a", 1, length=0)) == 0
    assert replicas(status(b"a", 1, length=1000)) == 3
    assert replicas(status(b"a", 1, length=1001)) == 6
    assert replicas(status(b"a", 1, length=5, replication=1)) == 1
    assert replicas(status(b"d", 1, length=0, kind=IS_DIR)) == 0


def test_windows_end_where_the_namenode_ends_located_pages() -> None:
    # FSDirStatAndListingOp.getListing: entries while the budget of LS_LIMIT replicas is not
    # spent, and at most LS_LIMIT entries.
    assert window_starts([3] * 1000) == [0, 334, 668]
    assert window_starts([0] * 2500) == [0, 1000, 2000]
    assert window_starts([999, 1, 5]) == [0, 2]
    assert window_starts([1000, 1]) == [0, 1]
    assert window_starts([]) == [0]


@given(st.lists(st.integers(0, 1500), max_size=300), st.integers(1, 50))
def test_windows_follow_the_budget_rule(costs: list[int], limit: int) -> None:
    starts = window_starts(costs, limit)
    assert starts[0] == 0 and starts == sorted(set(starts))
    for start, end in zip(starts, [*starts[1:], len(costs)], strict=True):
        window = costs[start:end]
        assert 0 < len(window) <= limit or not costs
        # every entry but the first was taken while budget remained
        assert all(limit - sum(window[:i]) > 0 for i in range(1, len(window)))
        if end < len(costs):  # and the next one was not
            assert len(window) == limit or limit - sum(window) <= 0


def test_an_order_finds_the_window_of_a_name() -> None:
    order = Order()
    order.extend([status(b"f%04d" % i, 100 + i, length=10) for i in range(1000)])  # 3 replicas each
    assert order.window_after(b"f0000") == b""
    assert order.window_after(b"f0333") == b""
    assert order.window_after(b"f0334") == b"f0333"
    assert order.window_after(b"f0999") == b"f0667"
    # Names only: pages of 1000 names from the listing's start, whatever the replicas.
    order.extend([status(b"f%04d" % i, 100 + i, length=10) for i in range(1000, 2500)])
    assert order.window_after(b"f0999", located=False) == b""
    assert order.window_after(b"f1000", located=False) == b"f0999"
    assert order.window_after(b"f2499", located=False) == b"f1999"
    assert order.window_after(b"f1500", located=True) != b"f0999"
    assert order.window_after(b"f0334x") is None  # not listed
    assert order.window_after(b"zzz") is None


# ----- the name cache ------------------------------------------------------------------------------


def test_entries_answer_until_their_ttl() -> None:
    names = NameCache(ttl=5.0, capacity=10)
    names.store(7, "/d", [(b"a", status(b"a", 11))], now=100.0)
    assert names.get(7, b"a", 104.9)[1].fileId == 11  # type: ignore[index]
    assert names.get(7, b"a", 104.9)[0] == 105.0  # type: ignore[index]
    assert names.get(7, b"b", 101.0) is None
    assert names.get(7, b"a", 105.0) is None
    # Expired, it answers nothing, but still hints what the file was (until replaced or dropped).
    assert names.expired(7, b"a").fileId == 11 and names.expired(7, b"b") is None  # type: ignore[union-attr]


def test_until_changed_entries_never_expire() -> None:
    names = NameCache(ttl=5.0, capacity=10)
    names.until_changed()
    names.store(7, "/d", [(b"a", status(b"a", 11))], now=100.0)
    assert names.get(7, b"a", 1e9) is not None


def test_capacity_drops_the_oldest() -> None:
    names = NameCache(ttl=5.0, capacity=3)
    for i in range(5):
        names.store(7, "/d", [(b"%d" % i, status(b"%d" % i, i + 1))], now=100.0)
    assert len(names) == 3
    assert names.get(7, b"0", 100.0) is None and names.get(7, b"4", 100.0) is not None
    off = NameCache(ttl=5.0, capacity=0)
    off.store(7, "/d", [(b"a", status(b"a", 1))], now=100.0)
    assert len(off) == 0 and off.window_after(7, b"a", 100.0) is None


def test_windows_over_a_listed_order_or_after_two_found_lookups() -> None:
    names = NameCache(ttl=5.0, capacity=10_000)
    page = [status(b"f%04d" % i, 100 + i, length=10) for i in range(400)]
    names.listed(7, b"", page[:200])
    names.listed(7, b"f0199", page[200:])  # the next page of the same walk
    assert names.window_after(7, b"f0350", 100.0) == b"f0333"
    assert names.window_after(7, b"f0350x", 100.0) is None  # not listed: one cheap lookup instead
    names.listed(8, b"f0100", page[101:])  # not walked from the start: no order
    assert names.window_after(8, b"f0350", 100.0) is None
    # No listing: once two lookups in a row found files, from the next name on.
    assert names.window_after(9, b"f0350", 100.0) is None
    names.looked_up(9, 100.0, found=True)
    assert names.window_after(9, b"f0351", 100.0) is None
    names.looked_up(9, 101.0, found=True)
    assert names.window_after(9, b"f0360", 101.5) == b"f036/"
    names.looked_up(9, 101.6, found=False)  # a probe for a missing name ends the walk
    assert names.window_after(9, b"f0361", 101.7) is None
    names.looked_up(9, 102.0, found=True)
    names.looked_up(9, 103.0, found=True)
    assert names.window_after(9, b"f0370", 200.0) is None  # too long since: not a walk
    names.looked_up(9, 300.0, found=True)  # far apart: a walk starts over
    assert names.window_after(9, b"f0371", 300.0) is None


def test_forget_path_forgets_a_name_and_everything_listed_under_a_directory() -> None:
    names = NameCache(ttl=math.inf, capacity=100)
    names.store(1, "/data", [(b"d", status(b"d", 7, kind=IS_DIR)), (b"x", status(b"x", 8))], now=0.0)
    names.store(7, "/data/d", [(b"a", status(b"a", 11)), (b"b", status(b"b", 12))], now=0.0)
    names.listed(7, b"", [status(b"a", 11), status(b"b", 12)])
    names.forget_path("/data/d/a")
    assert names.get(7, b"a", 1.0) is None and names.get(7, b"b", 1.0) is not None
    names.forget_path("/data/d")  # renamed or deleted: its entry, and all listed under it
    assert names.get(1, b"d", 1.0) is None and names.get(7, b"b", 1.0) is None
    assert names.window_after(7, b"b", 1.0) is None
    assert names.get(1, b"x", 1.0) is not None
    names.clear()
    assert len(names) == 0


# ----- kept locations ------------------------------------------------------------------------------


def test_locations_are_kept_for_the_unchanged_finalized_file_only() -> None:
    files = LocatedFiles(capacity=2)
    st1 = status(b"a", 11, length=150)
    files.remember(st1, located(150, [100, 50]))
    assert files.has(st1)
    found = files.find(st1)
    assert found is not None and [b.b.blockId for b in found.blocks] == [1000, 1001]
    appended = status(b"a", 11, length=200, mtime=2)
    assert not files.has(appended) and files.find(appended) is None
    assert len(files) == 0  # a changed file's locations are dropped
    files.remember(st1, located(150, [100, 50], under_construction=True))
    assert len(files) == 0  # being written: never kept
    files.remember(st1, located(150, [100]))  # not every block: never kept
    assert len(files) == 0
    files.remember(status(b"e", 12, length=0), located(0, []))
    assert files.has(status(b"e", 12, length=0))


def test_kept_locations_are_bounded_and_forgotten() -> None:
    files = LocatedFiles(capacity=2)
    statuses = [status(b"%d" % i, i, length=10) for i in (1, 2, 3)]
    for s in statuses:
        files.remember(s, located(10, [10]))
    assert len(files) == 2 and not files.has(statuses[0])
    files.forget(2)
    assert not files.has(statuses[1]) and files.has(statuses[2])
    files.clear()
    assert len(files) == 0
    assert LocatedFiles(capacity=0).find(statuses[0]) is None


def test_complete_locations() -> None:
    assert complete(located(150, [100, 50]))
    assert not complete(located(150, [100]))
    assert complete(located(0, []))
    assert not complete(located(10, []))
    assert not complete(located(150, [100, 50], under_construction=True))


def test_only_a_file_unchanged_for_a_minute_is_opened_on_trust() -> None:
    st_ = status(b"f", 7, mtime=1_000_000)
    assert not settled(st_, 1_000_000)  # just written
    assert not settled(st_, 1_000_000 + SETTLED_MS - 1)
    assert settled(st_, 1_000_000 + SETTLED_MS)
    assert not settled(st_, 999_000)  # a NameNode clock ahead of ours: not settled either


# ----- packed locations ------------------------------------------------------------------------------

def _datanode(k: int, *, usage: int | None = None) -> hdfs_pb2.DatanodeInfoProto:
    node = hdfs_pb2.DatanodeInfoProto(
        id=hdfs_pb2.DatanodeIDProto(ipAddr="127.0.0.1", hostName=f"dn{k}", datanodeUuid=f"uuid-{k}",
                                    xferPort=9000 + k, infoPort=9100 + k, ipcPort=9200 + k),
        location="/rack")
    if usage is not None:  # a field this client does not know (DatanodeInfoProto.remaining = 4)
        node.MergeFromString(bytes([4 << 3]) + _varint(usage))
    return node


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


@st.composite
def located_files(draw: st.DrawFn) -> hdfs_pb2.LocatedBlocksProto:
    sizes = draw(st.lists(st.integers(1, 1000), max_size=4))
    out = located(sum(sizes), sizes)
    for block in out.blocks:
        nodes = draw(st.lists(st.integers(0, 5), min_size=0, max_size=3, unique=True))
        for k in nodes:
            block.locs.append(_datanode(k, usage=draw(st.integers(0, 2**40))))
            block.storageIDs.append(f"DS-{k}")
            block.isCached.append(False)
        if draw(st.booleans()):
            block.blockIndices = bytes(range(len(nodes)))
        if draw(st.booleans()):
            block.b.ClearField("poolId")
    if out.blocks and draw(st.booleans()):
        out.lastBlock.CopyFrom(out.blocks[-1])
    return out


@given(st.lists(located_files(), min_size=1, max_size=3))
def test_packed_locations_unpack_to_what_the_namenode_said(files: list[hdfs_pb2.LocatedBlocksProto]) -> None:
    interned = Interned()
    for original in files:
        sent = original.SerializeToString()
        rest, refs = pack(original, interned)
        assert original.SerializeToString() == sent  # the caller's message is left alone
        known = hdfs_pb2.LocatedBlocksProto.FromString(sent)
        known.DiscardUnknownFields()  # a DataNode's usage figures are not kept
        assert unpack(rest, refs) == known


def test_packed_locations_share_what_files_repeat() -> None:
    interned = Interned()
    packed = []
    for i in range(3):
        lbs = located(10, [10])
        lbs.blocks[0].b.blockId = 5000 + i
        for k in (0, 1, 2):
            lbs.blocks[0].locs.append(_datanode(k, usage=1000 * i + k))  # usage differs at every answer
            lbs.blocks[0].storageIDs.append(f"DS-{k}")
        packed.append(pack(lbs, interned))
    assert packed[0][1] is packed[1][1] is packed[2][1]  # one replica set, one shared tuple
    assert len({rest for rest, _ in packed}) == 3  # each file's own block id
    small = Interned(capacity=2)
    values = [small(b"a"), small(b"b"), small(b"c")]  # full: starts over, keeps handing values out
    assert values == [b"a", b"b", b"c"] and small(b"c") is values[2]
