"""The bench's profile folding (`tests.bench.profile.fold`): which bucket each py-spy sample lands in."""

from __future__ import annotations

import pytest

from tests.bench.profile import WAITING, fold

LOOP = "_run_module_as_main (<frozen runpy>:198);run (trio/_core/_run.py:2532);unrolled_run (trio/_core/_run.py:2866)"
READ = "HdfsOperations.read (hdfsfuse/fuse/operations.py:309);_exchange (hdfsfuse/datanode/reader.py:88)"

RAW = "\n".join([
    # a send: libc's frame is skipped, the socket module's names the bucket
    f"{LOOP};{READ};DnConnection.send_all (hdfsfuse/datanode/connection.py:106);sock_send (socketmodule.c:4207);"
    "0x7fd0f704524a (libc.so.6) 7",
    # trio's cancel scope entered by our code: the innermost named frame (trio) wins
    f"{LOOP};{READ};CancelScope.__enter__ (trio/_core/_run.py:625);helper (contextlib.py:301) 11",
    # our own parsing, with a line number that must not split the function
    f"{LOOP};{READ};ReadBlockParser._parse_packet (hdfsfuse/datanode/dtp.py:332) 5",
    f"{LOOP};{READ};ReadBlockParser._parse_packet (hdfsfuse/datanode/dtp.py:340) 2",
    # pyfuse3's C side, above trio's loop
    f"{LOOP};__pyx_gb_7pyfuse3_97generator31 (__init__.pyx:154);0x7fd0f5c3f458 (libfuse3.so.3.14.0) 4",
    # the loop waiting for events: not busy time
    f"{LOOP};EpollIOManager.get_events (trio/_core/_io_epoll.py:245);select_epoll_poll (selectmodule.c:1598) 30",
    # only the interpreter under the loop: trio's loop frame names it
    f"{LOOP};0x7f00 (libpython3.11.so.1.0) 1",
    # another thread, idle on a lock: not the loop's work
    "0x7fd0f71278ec (libc.so.6);thread_run (libpython3.11.so.1.0);PyThread_acquire_lock_timed "
    "(libpython3.11.so.1.0) 500",
    "not a sample line",
])


def test_each_sample_counts_for_its_innermost_named_frame() -> None:
    p = fold(RAW)
    assert p.samples == {"socket system calls": 7, "trio": 12, "hdfsfuse": 7, "pyfuse3 and libfuse": 4, WAITING: 30}
    assert p.busy == 30  # the epoll wait and the idle thread are left out
    shares = p.shares()
    assert list(shares) == ["trio", "socket system calls", "hdfsfuse", "pyfuse3 and libfuse"]
    assert shares["trio"] == pytest.approx(12 / 30)
    assert sum(shares.values()) == pytest.approx(1.0)
    # a function's lines are one entry; only samples in the hdfsfuse bucket count for it
    assert p.functions == {"ReadBlockParser._parse_packet (hdfsfuse/datanode/dtp.py)": 7}


def test_an_empty_profile_has_no_shares() -> None:
    p = fold("")
    assert p.busy == 0 and p.shares() == {} and p.functions == {}
