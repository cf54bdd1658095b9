"""The mount's one error boundary (`fuse.boundary`): a bound per request, one errno, one log line."""

from __future__ import annotations

import errno
import logging

import pyfuse3
import pytest
import trio

from hdfsfuse.errors import AccessDenied, FileNotFound
from hdfsfuse.fuse.boundary import RequestBoundary


class _Entry:
    def __init__(self) -> None:
        self.asked = 0

    @property
    def shown(self) -> str:
        self.asked += 1
        return "/data/d"


async def test_a_request_past_its_bound_is_eio_with_one_line(caplog: pytest.LogCaptureFixture) -> None:
    entry = _Entry()
    with caplog.at_level(logging.ERROR), pytest.raises(pyfuse3.FUSEError) as raised:
        with RequestBoundary(0.01).request("lookup", entry, "f"):
            await trio.sleep(10)
    assert raised.value.errno == errno.EIO
    assert [r.getMessage() for r in caplog.records] == ["lookup /data/d/f: no answer within request_timeout=0.01s"]


async def test_failures_become_one_errno() -> None:
    boundary = RequestBoundary(5)
    for exc, code in ((FileNotFound("gone"), errno.ENOENT), (AccessDenied("no"), errno.EACCES),
                      (ValueError("bug"), errno.EIO)):
        with pytest.raises(pyfuse3.FUSEError) as raised:
            with boundary.request("open", "/data/f"):
                raise exc
        assert raised.value.errno == code, exc
    with pytest.raises(pyfuse3.FUSEError) as raised:  # a handler's own errno passes unchanged
        with boundary.request("open", "/data/f"):
            raise pyfuse3.FUSEError(errno.ESTALE)
    assert raised.value.errno == errno.ESTALE


async def test_the_subject_is_named_only_for_a_log_line() -> None:
    entry = _Entry()
    with RequestBoundary(5).request("getattr", entry):
        await trio.sleep(0)
    assert entry.asked == 0


async def test_an_outer_cancellation_is_not_translated() -> None:
    with trio.CancelScope() as outer:
        with RequestBoundary(5).request("read", "/data/f"):
            outer.cancel()
            await trio.sleep(1)
    assert outer.cancelled_caught
