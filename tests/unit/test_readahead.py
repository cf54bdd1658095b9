"""The per-file readahead planner and the global budget, table driven."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hdfsfuse.fuse.readahead import PIECE, Decision, ReadaheadBudget, ReadaheadPlanner, max_window, prefetch_pieces

K = 1024
M = 1024 * K
FILE = 64 * M


def planner() -> ReadaheadPlanner:
    return ReadaheadPlanner(initial_window=128 * K, max_window=4 * M, trigger=4 * M, slack=1 * M)


def run(reads: list[tuple[int, int]], file_length: int = FILE) -> list[Decision]:
    p = planner()
    return [p.plan(off, size, file_length) for off, size in reads]


@pytest.mark.parametrize(
    ("name", "reads", "prefetches"),
    [
        ("random 4 KiB reads never prefetch",
         [(40 * M, 4 * K), (3 * M, 4 * K), (50 * M, 4 * K), (7 * M, 4 * K)], [None] * 4),
        ("a 1 MiB range in 128 KiB pieces stays exact",
         [(20 * M + i * 128 * K, 128 * K) for i in range(8)], [None] * 8),
        ("two adjacent 1 MiB ranges stay exact",
         [(20 * M + i * 128 * K, 128 * K) for i in range(16)], [None] * 16),
        ("a long run starts prefetching at the trigger, window = run length",
         [(i * M, M) for i in range(7)],
         [None, None, None, (4 * M, 4 * M), None, None, (8 * M, 3 * M)]),
        ("prefetch is clamped at EOF",
         [(i * M, M) for i in range(5)], [None, None, None, (4 * M, 1 * M), None]),
    ],
)
def test_prefetch_decisions(name: str, reads: list[tuple[int, int]], prefetches: list[object]) -> None:
    file_length = 5 * M if "EOF" in name else FILE
    assert [d.prefetch for d in run(reads, file_length)] == prefetches, name


def test_window_grows_to_the_cap() -> None:
    p = planner()
    windows = []
    for i in range(40):
        p.plan(i * 512 * K, 512 * K, FILE)
        windows.append(p.window)
    assert windows[7] == 4 * M and max(windows) == 4 * M
    assert windows == sorted(windows)


def test_a_seek_starts_a_new_run() -> None:
    p = planner()
    for i in range(8):
        p.plan(i * M, M, FILE)
    assert p.window > 0
    d = p.plan(40 * M, 4 * K, FILE)
    assert not d.sequential and d.prefetch is None and p.window == 0
    assert p.plan(40 * M + 4 * K, 4 * K, FILE).prefetch is None  # the new run is short


def test_out_of_order_kernel_readahead_stays_in_the_run() -> None:
    p = planner()
    for i in range(6):
        p.plan(i * M, M, FILE)
    d = p.plan(7 * M, 128 * K, FILE)  # ahead of the reader, within the slack
    assert d.sequential
    assert p.plan(6 * M, M, FILE).sequential  # the delayed one


def test_reads_are_clamped_at_eof() -> None:
    p = planner()
    assert p.plan(FILE - 10, 4096, FILE).length == 10
    assert p.plan(FILE, 4096, FILE).length == 0
    assert p.plan(FILE + 5, 4096, FILE).length == 0


def test_readahead_off() -> None:
    p = ReadaheadPlanner(max_window=0)
    assert all(p.plan(i * M, M, FILE).prefetch is None for i in range(20))


def test_budget() -> None:
    b = ReadaheadBudget(10 * M)
    assert b.try_take(6 * M) and not b.try_take(5 * M) and b.try_take(4 * M)
    b.give_back(6 * M)
    assert b.used == 4 * M and b.try_take(6 * M)
    with pytest.raises(AssertionError):
        b.give_back(11 * M)


def test_an_erasure_coded_file_reads_ahead_once_per_data_unit() -> None:
    assert max_window(4 * M, 1, 64 * M) == 4 * M  # replicated: the option as given
    assert max_window(4 * M, 3, 64 * M) == 12 * M  # RS-3-2: each DataNode as long a read
    assert max_window(4 * M, 6, 16 * M) == 16 * M  # never past the whole budget
    assert max_window(0, 6, 64 * M) == 0  # readahead off stays off
    planner = ReadaheadPlanner(max_window=max_window(4 * M, 3, 64 * M))
    offset, prefetched = 0, []
    while offset < 64 * M:  # a long sequential run: its prefetches grow to the striped cap
        d = planner.plan(offset, M, 1 << 40)
        if d.prefetch:
            prefetched.append(d.prefetch[1])
        offset += M
    assert max(prefetched) > 4 * M and planner.window == 12 * M


def _operations(fetch_range: object, nursery: object) -> object:
    """The mount's HdfsOperations over a fake client whose reads (direct and readahead) are `fetch_range`."""
    from types import SimpleNamespace

    from hdfsfuse.client.located import LocatedFiles
    from hdfsfuse.conf.mount_options import MountOptions
    from hdfsfuse.fuse.operations import HdfsOperations
    from hdfsfuse.stats import Stats

    client = SimpleNamespace(namenode=None, stats=Stats(), credentials=None, fetch_range=fetch_range,
                             fetch_stored=fetch_range, read_now=lambda file, offset, length: None,
                             located=LocatedFiles(0))
    return HdfsOperations(client, "/", MountOptions(), "/mnt", nursery)  # type: ignore[arg-type]


async def test_a_buffer_an_earlier_read_waits_for_is_not_dropped_by_a_later_one() -> None:
    """The kernel's readahead reads run concurrently and finish out of order. A later read that
    finishes first must not cancel the buffer an earlier read is still waiting for: that sent the
    earlier read, and its bytes, to HDFS a second time (about 5% more bytes for `cat`)."""
    from types import SimpleNamespace

    import trio

    from hdfsfuse.fuse.handles import Chunk, OpenFile

    arrive = trio.Event()
    fetched: list[tuple[int, int]] = []

    async def fetch_range(file: object, offset: int, length: int, inline_tried: bool = False,
                          arrival: object = None) -> bytes:
        fetched.append((offset, length))
        if (offset, length) == (0, M):  # the first buffer: still arriving
            await arrive.wait()
        return bytes([offset // M]) * length

    async with trio.open_nursery() as nursery:
        ops: Any = _operations(fetch_range, nursery)
        file = SimpleNamespace(under_construction=False, length=FILE, path="/f", decryptor=None)
        handle = OpenFile(2, file, planner())  # type: ignore[arg-type]
        ops.handles.add(7, handle)
        handle.planner.plan(0, 1, FILE)  # a sequential run from offset 0...
        handle.planner.frontier = 2 * M  # ...with two buffers ahead of it
        for offset in (0, M):
            assert ops.readahead.budget.try_take(M)
            chunk = Chunk(offset, M)
            handle.chunks.append(chunk)
            nursery.start_soon(ops.readahead._prefetch, file, chunk)
        await trio.testing.wait_all_tasks_blocked()
        got: dict[int, bytes] = {}

        async def read(offset: int) -> None:
            got[offset] = await ops.read(7, offset, M // 2)

        nursery.start_soon(read, 0)  # waits for the first buffer
        await trio.testing.wait_all_tasks_blocked()
        await read(M)  # served by the second buffer, which has arrived; finishes first
        arrive.set()
    assert got == {0: bytes(M // 2), M: bytes([1]) * (M // 2)}
    assert sorted(fetched) == [(0, M), (M, M)]  # the two buffers, and nothing fetched a second time


def test_a_prefetch_is_cut_at_piece_boundaries() -> None:
    assert prefetch_pieces(5 * M, 16 * M) == [(5 * M, 3 * M), (8 * M, 8 * M), (16 * M, 5 * M)]
    assert prefetch_pieces(8 * M, 8 * M) == [(8 * M, 8 * M)]  # one piece: one read
    assert prefetch_pieces(3 * M + 7, 100) == [(3 * M + 7, 100)]
    assert prefetch_pieces(5 * M, 8 * M, piece=4 * M) == [(5 * M, 3 * M), (8 * M, 4 * M), (12 * M, M)]
    assert PIECE == 8 * M


@given(st.integers(0, 1 << 40), st.integers(1, 16 * M), st.integers(64 * K, 8 * M))
def test_pieces_cover_the_prefetch_exactly(offset: int, length: int, piece: int) -> None:
    parts = prefetch_pieces(offset, length, piece)
    assert parts[0][0] == offset and sum(n for _, n in parts) == length
    for (a, n), (b, _) in itertools.pairwise(parts):
        assert a + n == b and b % piece == 0  # contiguous, cut only at multiples of the piece
    assert all(0 < n <= piece for _, n in parts)


async def test_a_replicated_files_prefetch_runs_as_concurrent_pieces() -> None:
    """The mount fetches a replicated file's window as 8 MiB reads, all in flight at once
    (a striped file's as one read: its planner fans it out over the data units)."""
    from types import SimpleNamespace

    import trio

    from hdfsfuse.fuse.handles import OpenFile

    release = trio.Event()
    in_flight: list[tuple[int, int]] = []

    async def fetch_range(file: object, offset: int, length: int, inline_tried: bool = False,
                          arrival: object = None) -> bytes:
        in_flight.append((offset, length))
        await release.wait()
        return bytes([offset // M % 251]) * length

    pieces = [(5 * M, 3 * M), (8 * M, 5 * M)]
    for ec_policy, expected, across in ((None, pieces, bytes([5]) * (2 * M - 5) + bytes([8]) * 5),
                                        (SimpleNamespace(data_units=3), [(5 * M, 8 * M)], bytes([5]) * (2 * M))):
        in_flight.clear()
        release = trio.Event()
        async with trio.open_nursery() as nursery:
            ops: Any = _operations(fetch_range, nursery)
            file = SimpleNamespace(under_construction=False, length=FILE, path="/f", ec_policy=ec_policy,
                                   decryptor=None)
            handle = OpenFile(2, file, planner())  # type: ignore[arg-type]
            ops.handles.add(7, handle)
            ops.readahead.start(handle, 5 * M, 8 * M)
            await trio.testing.wait_all_tasks_blocked()
            assert sorted(in_flight) == expected  # every piece asked for before any arrived
            assert ops.readahead.budget.used == 8 * M
            release.set()
            await trio.testing.wait_all_tasks_blocked()
            got = await ops.readahead.take(handle, 6 * M + 5, 8 * M + 5)  # across two pieces, if cut
            assert got is not None and bytes(got) == across
            ops.readahead.drop(handle, before=None)
            assert ops.readahead.budget.used == 0


async def test_a_striped_window_serves_its_first_cells_before_its_last_arrive() -> None:
    """A sequential reader of an erasure-coded file reads a readahead window's first cells as
    soon as they land, not when the whole window (one striped read) has."""
    from types import SimpleNamespace

    import trio

    from hdfsfuse.erasure.arrival import Arrival
    from hdfsfuse.erasure.codec import EcPolicy
    from hdfsfuse.erasure.striping import plan_group_read
    from hdfsfuse.fuse.handles import Chunk, OpenFile

    policy = EcPolicy("t", "rs", 3, 2, M, 64)
    rest = trio.Event()
    window = bytes(i % 251 for i in range(3 * M))

    async def fetch_range(file: object, offset: int, length: int, inline_tried: bool = False,
                          arrival: Arrival | None = None) -> bytearray:
        assert arrival is not None and (offset, length) == (0, 3 * M)
        buffer = bytearray(length)
        arrival.start(buffer, plan_group_read(policy, 0, length))
        buffer[:M] = window[:M]  # unit 0's cell lands; units 1 and 2 are still on their way
        arrival.delivered(0, M)
        await rest.wait()
        buffer[M:] = window[M:]
        return buffer

    async with trio.open_nursery() as nursery:
        ops: Any = _operations(fetch_range, nursery)
        file = SimpleNamespace(under_construction=False, length=FILE, path="/f", ec_policy=policy, decryptor=None)
        handle = OpenFile(2, file, planner())  # type: ignore[arg-type]
        ops.handles.add(7, handle)
        assert ops.readahead.budget.try_take(3 * M)
        chunk = Chunk(0, 3 * M, arrival=Arrival())
        handle.chunks.append(chunk)
        nursery.start_soon(ops.readahead._prefetch, file, chunk)
        await trio.testing.wait_all_tasks_blocked()
        got: list[bytes] = []

        async def first() -> None:
            data = await ops.readahead.take(handle, 4096, M)  # inside unit 0's cell: no wait
            got.append(bytes(data))

        nursery.start_soon(first)
        await trio.testing.wait_all_tasks_blocked()
        assert got == [window[4096:M]] and not chunk.done.is_set()  # answered while the window arrives
        got.clear()

        async def second() -> None:
            data = await ops.readahead.take(handle, M - 10, M + 10)  # needs unit 1's cell
            got.append(bytes(data))

        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []  # waits for it
        rest.set()
    assert got == [window[M - 10 : M + 10]]


def test_a_smaller_budget_lowers_the_default_cap_and_refuses_a_larger_one() -> None:
    from hdfsfuse.conf.mount_options import parse_options
    from hdfsfuse.errors import ConfigError

    assert parse_options([]).readahead_max == 16 * M
    assert parse_options(["readahead_total=8M"]).readahead_max == 8 * M  # was valid with the old 8M default
    assert parse_options(["readahead_max=4M", "readahead_total=8M"]).readahead_max == 4 * M
    with pytest.raises(ConfigError, match="readahead_max must not exceed readahead_total"):
        parse_options(["readahead_max=32M", "readahead_total=16M"])
