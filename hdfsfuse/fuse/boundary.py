"""The one error boundary of the mount: every request is bounded in time, and every failure
becomes exactly one errno and one log line.

Handlers wrap their work in `request(op, what)`; the read hot path, which cannot afford a
context manager per call, uses `error()` for the same translation.
"""

from __future__ import annotations

import errno
import logging
from types import TracebackType
from typing import Protocol

import pyfuse3
import trio

from hdfsfuse.errors import FileNotFound, HdfsError, to_errno

log = logging.getLogger(__name__)


class Named(Protocol):
    """What a request is about, named only when a log line needs it (an inode's `Entry`)."""

    @property
    def shown(self) -> str: ...


class RequestBoundary:
    def __init__(self, request_timeout: float) -> None:
        self.request_timeout = request_timeout

    def request(self, op: str, subject: str | Named, name: str = "") -> _Request:
        """Bound a request by `request_timeout`; translate what escapes it (FUSEErrors pass).

        `subject` (and `name` inside it) is what log lines call the request's file: a path, or
        an entry whose path is only built when a line is logged."""
        return _Request(self, op, subject, name)

    def error(self, op: str, what: str, exc: Exception) -> pyfuse3.FUSEError:
        """The one translation of a failure into an errno, with its one log line."""
        if isinstance(exc, trio.TooSlowError):
            log.error("%s %s: no answer within request_timeout=%gs", op, what, self.request_timeout)
            return pyfuse3.FUSEError(errno.EIO)
        if isinstance(exc, FileNotFound):
            return pyfuse3.FUSEError(errno.ENOENT)
        if not isinstance(exc, HdfsError | OSError):
            log.error("%s %s: unexpected error %s: %s", op, what, type(exc).__name__, exc)
            log.debug("traceback of the unexpected error", exc_info=exc)
            return pyfuse3.FUSEError(errno.EIO)
        code = to_errno(exc)
        log.error("%s %s: %s (%s)", op, what, exc, errno.errorcode.get(code, code))
        return pyfuse3.FUSEError(code)


class _Request:
    """`RequestBoundary.request`: trio.fail_after and the translation, without a generator."""

    __slots__ = ("boundary", "name", "op", "scope", "subject")

    def __init__(self, boundary: RequestBoundary, op: str, subject: str | Named, name: str) -> None:
        self.boundary, self.op, self.subject, self.name = boundary, op, subject, name

    @property
    def what(self) -> str:
        shown = self.subject if isinstance(self.subject, str) else self.subject.shown
        return f"{shown}/{self.name}" if self.name else shown

    def __enter__(self) -> None:
        self.scope = trio.CancelScope(deadline=trio.current_time() + self.boundary.request_timeout)
        self.scope.__enter__()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> bool:
        try:
            self.scope.__exit__(kind, exc, tb)
        except pyfuse3.FUSEError:
            raise
        except Exception as e:
            raise self.boundary.error(self.op, self.what, e) from None
        if self.scope.cancelled_caught:  # the request's own deadline cancelled it
            raise self.boundary.error(self.op, self.what, trio.TooSlowError())
        if exc is None or isinstance(exc, pyfuse3.FUSEError) or not isinstance(exc, Exception):
            return False
        raise self.boundary.error(self.op, self.what, exc) from None
