"""The fsspec filesystem's pure parts: the cat_ranges plan, storage options, paths and info
dicts, range arguments, the error translation, the readahead window, and what is kept of
recent descriptions and of blocks read before."""

from __future__ import annotations

import errno
import itertools

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from hdfsfuse.datanode.pieces import clamp
from hdfsfuse.errors import AccessDenied, ChecksumMismatch, FileNotFound, IsADirectory, RpcTimeout
from hdfsfuse.fsspec.core import python_error, resolve
from hdfsfuse.fsspec.files import FIRST_WINDOW, AdaptiveReadahead
from hdfsfuse.fsspec.info import hdfs_path, info, split_url
from hdfsfuse.fsspec.options import MOUNT_ONLY, parse_storage_options
from hdfsfuse.fsspec.ranges import plan
from hdfsfuse.fsspec.recent import RecentStatuses
from hdfsfuse.fsspec.seen import SeenBlocks, same_range
from hdfsfuse.proto import hdfs_pb2

requests = st.lists(st.tuples(st.sampled_from(["/a", "/b"]), st.integers(0, 10_000), st.integers(0, 3_000)),
                    min_size=1, max_size=30)


@given(requests, st.integers(0, 5000))
def test_every_range_is_served_by_one_span_and_spans_never_bridge_a_wide_gap(reqs, gap: int) -> None:  # type: ignore[no-untyped-def]
    paths = [p for p, _, _ in reqs]
    starts = [s for _, s, _ in reqs]
    ends = [s + n for _, s, n in reqs]
    spans = plan(paths, starts, ends, gap)
    served = sorted(m for span in spans for m in span.members)
    assert served == list(range(len(reqs)))
    for span in spans:
        assert all(paths[m] == span.path and span.start <= starts[m] and ends[m] <= span.end for m in span.members)
        assert span.start == min(starts[m] for m in span.members) and span.end == max(ends[m] for m in span.members)
        # no byte of a span lies more than `gap` away from a requested byte
        covered = sorted((starts[m], ends[m]) for m in span.members)
        reach = covered[0][1]
        for lo, hi in covered[1:]:
            assert lo <= reach + gap
            reach = max(reach, hi)
    for path in ("/a", "/b"):
        mine = sorted((s.start, s.end) for s in spans if s.path == path)
        for (_, end), (start, _) in itertools.pairwise(mine):
            assert start > end + gap  # separate spans of a file: only across a gap wider than `gap`


def test_storage_options_are_mount_options() -> None:
    opts = parse_storage_options({"readahead_max": "4M", "hedge_after": 50, "short_circuit": False,
                                  "read_timeout": 2.5, "user": "alice", "cache_dir": None})
    assert (opts.readahead_max, opts.hedge_after, opts.short_circuit) == (4 << 20, 0.05, False)
    assert (opts.read_timeout, opts.user, opts.cache_dir) == (2.5, "alice", None)
    assert {"allow_other", "uid", "entry_timeout", "inotify", "identity"} <= MOUNT_ONLY
    for bad, message in [({"direct_io": True}, "applies to mounts only"), ({"nope": 1}, "unknown storage option"),
                         ({"principal": "a b"}, "is not a Kerberos principal"),
                         ({"connect_timeout": 0}, "must be more than 0 seconds"),
                         ({"cache_size": True}, "is not a valid value"),
                         ({"metadata_entries": 10}, "applies to mounts only")]:
        with pytest.raises(Exception, match=message):
            parse_storage_options(bad)


def test_paths_and_urls() -> None:
    assert split_url("hdfsfuse://nn:8020/a/b") == ("hdfsfuse", "nn:8020", "/a/b")
    assert split_url("/a") == ("", "", "/a")
    assert hdfs_path("hdfs://ns1/a//b/") == "/a/b"
    assert hdfs_path("viewfs://lake") == "/"
    assert hdfs_path("a/./b") == "/a/b"
    with pytest.raises(ValueError, match=r"'\.\.' is not supported"):
        hdfs_path("/a/../b")


def test_info_dicts() -> None:
    status = hdfs_pb2.HdfsFileStatusProto(
        fileType=hdfs_pb2.HdfsFileStatusProto.IS_FILE, path=b"f", length=10, owner="u", group="g",
        permission=hdfs_pb2.FsPermissionProto(perm=0o640), modification_time=1500, access_time=1000, fileId=9,
        blocksize=4096, block_replication=2)
    got = info("/d/f", status)
    assert got["size"] == 10 and got["type"] == "file" and got["mtime"] == 1.5 and got["permissions"] == 0o640
    assert (got["block_size"], got["replication"], got["ec_policy"], got["file_id"]) == (4096, 2, None, 9)


@pytest.mark.parametrize(("start", "end", "want"), [
    (None, None, (0, 100)), (10, 20, (10, 20)), (-10, None, (90, 100)), (0, -1, (0, 99)),
    (150, 200, (100, 100)), (50, 10, (50, 50)), (-500, 5, (0, 5)),
])
def test_range_arguments(start: int | None, end: int | None, want: tuple[int, int]) -> None:
    assert resolve(start, end, 100) == want


def test_errors_become_pythons_exceptions_with_the_mounts_message() -> None:
    cases = [(FileNotFound("/x: no such file"), FileNotFoundError, errno.ENOENT),
             (AccessDenied("Permission denied"), PermissionError, errno.EACCES),
             (IsADirectory("/d: is a directory"), IsADirectoryError, errno.EISDIR),
             (RpcTimeout("getFileInfo timed out"), TimeoutError, errno.ETIMEDOUT),
             (ChecksumMismatch("bad chunk"), OSError, errno.EIO)]
    for exc, cls, code in cases:
        got = python_error("read", "/x [0, +5)", exc, 60)
        assert type(got) is cls and got.errno == code
        assert got.strerror == f"read /x [0, +5): {exc} ({errno.errorcode[code]})"
    slow = python_error("read", "/x", trio.TooSlowError(), 60)
    assert isinstance(slow, TimeoutError) and "no answer within request_timeout=60s" in str(slow)


def test_readahead_grows_on_sequential_reads_and_stays_exact_on_seeks() -> None:
    data = bytes(range(256)) * 40_000
    fetched: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        fetched.append((start, end))
        return data[start:end]

    cache = AdaptiveReadahead(0, fetch, len(data), max_window=1 << 20)
    assert cache._fetch(5000, 6000) == data[5000:6000] and fetched == [(5000, 6000)]  # a first read: exact
    assert cache._fetch(6000, 7000) == data[6000:7000] and fetched[-1] == (6000, 6000 + FIRST_WINDOW)
    assert cache._fetch(7000, 9000) == data[7000:9000] and len(fetched) == 2  # served from the window
    pos = 6000 + FIRST_WINDOW - 100
    assert cache._fetch(9000, pos) == data[9000:pos] and len(fetched) == 2
    assert cache._fetch(pos, pos + 500) == data[pos : pos + 500]  # the rest past the window, and a wider one
    assert fetched[-1] == (6000 + FIRST_WINDOW, 6000 + FIRST_WINDOW + 2 * FIRST_WINDOW)
    assert cache._fetch(1_000_000, 1_000_100) == data[1_000_000:1_000_100]  # a seek: exact again
    assert fetched[-1] == (1_000_000, 1_000_100)
    assert cache._fetch(len(data) - 10, len(data) + 50) == data[-10:]


def test_recent_statuses_keep_descriptions_for_a_moment_and_a_bounded_number() -> None:
    def status(file_id: int, kind: int = hdfs_pb2.HdfsFileStatusProto.IS_FILE) -> hdfs_pb2.HdfsFileStatusProto:
        return hdfs_pb2.HdfsFileStatusProto(fileType=kind, fileId=file_id, path=b"", length=1,
                                            permission=hdfs_pb2.FsPermissionProto(perm=0o644), owner="u",
                                            group="g", modification_time=0, access_time=0)

    recent = RecentStatuses(seconds=1.0, capacity=3)
    recent.note("/d", status(5, hdfs_pb2.HdfsFileStatusProto.IS_DIR), now=0.0)
    recent.note("/link", status(6, hdfs_pb2.HdfsFileStatusProto.IS_SYMLINK), now=0.0)
    assert recent.get("/d", now=0.5).fileId == 5 and recent.get("/link", now=0.5).fileId == 6  # type: ignore[union-attr]
    assert recent.file("/d", now=0.5) is None and recent.file("/link", now=0.5) is None  # only files are opened
    recent.forget()
    assert len(recent) == 0
    recent.note("/a", status(10), now=0.0)
    assert recent.file("/a", now=1.0) is not None and recent.file("/a", now=1.0).fileId == 10  # type: ignore[union-attr]
    assert recent.get("/a", now=1.01) is None and len(recent) == 0  # too old: gone
    for i, path in enumerate(("/a", "/b", "/c", "/d")):
        recent.note(path, status(20 + i), now=2.0)
    assert recent.get("/a", now=2.0) is None and len(recent) == 3  # over capacity: the oldest dropped
    recent.note("/b", status(30), now=2.5)  # described again: the newer status wins
    assert recent.get("/b", now=3.4).fileId == 30  # type: ignore[union-attr]
    recent.forget("/b")
    assert recent.get("/b", now=2.5) is None


BLOCK = 1000


def _answer(length: int, first_id: int, offsets: list[int], *, stamp: int = 7, writing: bool = False,
            policy: str = "") -> hdfs_pb2.LocatedBlocksProto:
    """An answer naming the blocks at `offsets` (BLOCK bytes each, the last cut at `length`)."""
    lbs = hdfs_pb2.LocatedBlocksProto(fileLength=length, underConstruction=writing, isLastBlockComplete=not writing)
    for off in offsets:
        block = lbs.blocks.add(offset=off, corrupt=False)
        block.b.poolId, block.b.blockId = "bp", first_id + off // BLOCK
        block.b.generationStamp, block.b.numBytes = stamp, min(BLOCK, length - off)
    if policy:
        lbs.ecPolicy.name = policy
    return lbs


@given(st.integers(1, 8 * BLOCK), st.data())
def test_a_guess_covers_a_range_only_with_kept_blocks_and_matches_only_the_same_blocks(length: int, data) -> None:  # type: ignore[no-untyped-def]
    blocks = list(range(0, length, BLOCK))
    told = data.draw(st.lists(st.sampled_from(blocks), unique=True))
    seen = SeenBlocks()
    seen.note("/f", _answer(length, 100, told))
    offset = data.draw(st.integers(0, length + 10))
    n = data.draw(st.integers(0, 3 * BLOCK))
    guess = seen.guess("/f", offset, n)
    want = clamp(offset, n, length)
    needed = {b for b in blocks if b < offset + want and offset < b + BLOCK} if want else set()
    assert (guess is not None) == needed.issubset(told)
    if guess is None:
        return
    assert {b.offset for b in guess.blocks} == needed and guess.fileLength == length
    full = _answer(length, 100, blocks)
    assert same_range(guess, full, offset, n)
    if needed:
        assert not same_range(guess, _answer(length, 500, blocks), offset, n)  # replaced: other block ids
        assert not same_range(guess, _answer(length, 100, blocks, stamp=8), offset, n)  # appended to, recovered
    assert not same_range(guess, _answer(length + 1, 100, list(range(0, length + 1, BLOCK))), offset, n)
    assert not same_range(guess, _answer(length, 100, blocks, writing=True), offset, n)
    assert not same_range(guess, _answer(length, 100, blocks, policy="RS-6-3-1024k"), offset, n)


def test_seen_blocks_keep_finalized_files_only_and_a_bounded_number() -> None:
    seen = SeenBlocks(files=2, blocks=3)
    seen.note("/w", _answer(5 * BLOCK, 1, [0], writing=True))
    assert seen.guess("/w", 0, 10) is None and len(seen) == 0
    seen.note("/f", _answer(5 * BLOCK, 1, [0, BLOCK, 2 * BLOCK]))
    seen.note("/f", _answer(5 * BLOCK, 1, [3 * BLOCK]))
    assert seen.guess("/f", 3 * BLOCK, 10) is not None
    assert seen.guess("/f", 0, 10) is None  # the oldest block dropped: three per file
    seen.note("/f", _answer(6 * BLOCK, 50, [0]))  # a new length: what was kept of the old file goes
    assert seen.guess("/f", 3 * BLOCK, 10) is None and seen.guess("/f", 0, 10) is not None
    seen.note("/g", _answer(BLOCK, 9, [0]))
    seen.note("/h", _answer(BLOCK, 8, [0]))
    assert len(seen) == 2 and seen.guess("/f", 0, 10) is None  # the least recently noted file dropped
    seen.forget("/g")
    assert seen.guess("/g", 0, 10) is None and seen.guess("/h", 0, 10) is not None


def test_an_answer_naming_another_block_where_one_was_kept_starts_the_file_over() -> None:
    seen = SeenBlocks()
    seen.note("/f", _answer(3 * BLOCK, 1, [0, 2 * BLOCK]))
    seen.note("/f", _answer(3 * BLOCK, 40, [0]))  # replaced by a file of the same length
    assert seen.guess("/f", 0, 10) is not None and seen.guess("/f", 2 * BLOCK, 10) is None
