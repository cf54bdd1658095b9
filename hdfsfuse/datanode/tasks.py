"""Small trio helpers shared by the readers. Does no I/O of its own."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import trio

T = TypeVar("T")


async def run_each(fn: Callable[[T], Awaitable[None]], items: Sequence[T]) -> None:
    """Run fn(item) for every item concurrently (inline when there is one item).

    The first failure cancels the others and is raised as itself, not as an exception group:
    callers translate errors once, by type.
    """
    if len(items) == 1:
        await fn(items[0])
        return
    try:
        async with trio.open_nursery() as nursery:
            for item in items:
                nursery.start_soon(fn, item)
    except BaseExceptionGroup as group:
        raise group.exceptions[0] from None
