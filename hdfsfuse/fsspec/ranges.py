"""Which byte ranges `cat_ranges` reads: each file's requested ranges, merged only where they
overlap or lie closer than a small gap, so every read stays exact. Pure code."""

from __future__ import annotations

import dataclasses

GAP = 8 * 1024  # ranges closer than this are read as one (pyarrow's own hole limit)


@dataclasses.dataclass(frozen=True, slots=True)
class Span:
    """One read: [start, end) of `path`, serving the requests at `members`."""

    path: str
    start: int
    end: int
    members: tuple[int, ...]


def plan(paths: list[str], starts: list[int], ends: list[int], gap: int = GAP) -> list[Span]:
    """The reads that serve every request (path, start, end); ranges must be resolved already
    (non-negative, end >= start). Requests of one file closer than `gap` share a read."""
    by_path: dict[str, list[int]] = {}
    for i, path in enumerate(paths):
        by_path.setdefault(path, []).append(i)
    spans = []
    for path, indexes in by_path.items():
        indexes.sort(key=lambda i: (starts[i], ends[i]))
        members = [indexes[0]]
        lo, hi = starts[indexes[0]], ends[indexes[0]]
        for i in indexes[1:]:
            if starts[i] <= hi + gap:
                members.append(i)
                hi = max(hi, ends[i])
                continue
            spans.append(Span(path, lo, hi, tuple(members)))
            members, lo, hi = [i], starts[i], ends[i]
        spans.append(Span(path, lo, hi, tuple(members)))
    return spans
