"""The soak script's 60-second version: 32 readers, every read verified."""

from __future__ import annotations

from tests.soak import soak


def test_soak_60_seconds() -> None:
    r = soak(60, 32)
    assert r["mismatches"] == 0 and r["errors"] == 0
    assert r["reads"] > 100
    # Nothing leaks: the daemon holds no more sockets at rest than when it started.
    assert r["sockets_end"] <= r["sockets_start"], r

