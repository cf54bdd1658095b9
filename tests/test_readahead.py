"""The per-file readahead planner and the global budget, table driven."""

from __future__ import annotations

import pytest

from hdfsfuse.readahead import Decision, ReadaheadBudget, ReadaheadPlanner

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
