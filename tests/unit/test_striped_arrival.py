"""Which bytes of a striped read in flight have landed (hdfsfuse.erasure.arrival): the complete prefix
against a byte-by-byte reckoning, for any plan and any order of delivery; waiting for it."""

from __future__ import annotations

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from hdfsfuse.erasure.arrival import Arrival
from hdfsfuse.erasure.codec import EcPolicy
from hdfsfuse.erasure.striping import UnitRead, plan_group_read

K = 1024


def prefix_by_bytes(reads: list[UnitRead], length: int, delivered: dict[int, int]) -> int:
    """The first buffer byte whose unit has not delivered it (length: none)."""
    owner = [(-1, 0)] * length
    for r in reads:
        for at, out, n in r.spans:
            for i in range(n):
                owner[out + i] = (r.unit, at + i)
    for b, (unit, pos) in enumerate(owner):
        if delivered.get(unit, 0) <= pos:
            return b
    return length


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[list[UnitRead], int, list[tuple[int, int]]]:
    k, cell = draw(st.integers(1, 6)), draw(st.sampled_from([1, 7, 64, 512]))
    policy = EcPolicy("t", "rs", k, 2, cell, 64)
    offset = draw(st.integers(0, 3 * k * cell))
    length = draw(st.integers(1, 4 * k * cell))
    reads = plan_group_read(policy, offset, length)
    steps = []  # each unit's positions rise to its end, interleaved in any order
    for r in reads:
        cuts = [*sorted(draw(st.lists(st.integers(r.start, r.end), max_size=4))), r.end]
        steps.extend((r.unit, c) for c in cuts)
    order = draw(st.permutations(range(len(steps))))
    by_unit: dict[int, list[int]] = {}
    for i in order:  # keep each unit's own steps in rising order
        by_unit.setdefault(steps[i][0], []).append(i)
    ranked = {u: iter(sorted(ix)) for u, ix in by_unit.items()}
    return reads, length, [steps[next(ranked[steps[i][0]])] for i in order]


@settings(max_examples=300, deadline=None)
@given(deliveries())
def test_the_ready_prefix_is_every_byte_before_the_first_one_not_delivered(
        case: tuple[list[UnitRead], int, list[tuple[int, int]]]) -> None:
    reads, length, steps = case
    arrival = Arrival()
    buffer = bytearray(length)
    arrival.start(buffer, reads)
    assert arrival.ready == 0 and arrival.buffer is buffer
    delivered: dict[int, int] = {}
    for unit, upto in steps:
        arrival.delivered(unit, upto)
        delivered[unit] = max(delivered.get(unit, 0), upto)
        assert arrival.ready == prefix_by_bytes(reads, length, delivered)
    assert arrival.ready == length  # every unit delivered its end: all of it


def test_a_unit_that_never_reports_holds_the_prefix_at_its_first_cell() -> None:
    policy = EcPolicy("t", "rs", 3, 2, 4 * K, 64)
    reads = plan_group_read(policy, 0, 24 * K)  # two rows of units 0, 1, 2
    arrival = Arrival()
    arrival.start(bytearray(24 * K), reads)
    arrival.delivered(0, 8 * K)
    arrival.delivered(2, 8 * K)
    assert arrival.ready == 4 * K  # unit 1's first cell is missing
    arrival.delivered(1, 4 * K)
    assert arrival.ready == 16 * K  # row 0, then unit 0's cell of row 1
    arrival.delivered(1, 2 * K)  # an older position changes nothing
    assert arrival.ready == 16 * K
    arrival.start(bytearray(24 * K), reads)  # a retry: a new buffer, nothing landed yet
    assert arrival.ready == 0


async def test_waiters_go_on_when_their_bytes_land_or_the_read_ends() -> None:
    policy = EcPolicy("t", "rs", 2, 1, 4 * K, 64)
    reads = plan_group_read(policy, 0, 16 * K)
    arrival = Arrival()
    arrival.start(bytearray(16 * K), reads)
    woke: dict[int, bool] = {}

    async def wait(end: int) -> None:
        woke[end] = await arrival.wait_for(end)

    async with trio.open_nursery() as nursery:
        for end in (4 * K, 8 * K, 16 * K):
            nursery.start_soon(wait, end)
        await trio.testing.wait_all_tasks_blocked()
        arrival.delivered(0, 4 * K)
        await trio.testing.wait_all_tasks_blocked()
        assert woke == {4 * K: True}
        arrival.delivered(1, 4 * K)
        await trio.testing.wait_all_tasks_blocked()
        assert woke == {4 * K: True, 8 * K: True}
        arrival.finish()  # the read is over (failed, say) short of the last waiter's bytes
    assert woke == {4 * K: True, 8 * K: True, 16 * K: False}
    assert await arrival.wait_for(8 * K) is True  # no wait once there
