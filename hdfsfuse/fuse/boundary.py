"""The one error boundary of the mount: every request is bounded in time, and every failure
becomes exactly one errno and one log line.

Handlers wrap their work in `request(op, what)`; the read hot path, which cannot afford a
context manager per call, uses `error()` for the same translation.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pyfuse3
import trio

from hdfsfuse.errors import FileNotFound, HdfsError, to_errno

log = logging.getLogger(__name__)


class RequestBoundary:
    def __init__(self, request_timeout: float) -> None:
        self.request_timeout = request_timeout

    @contextmanager
    def request(self, op: str, what: str) -> Iterator[None]:
        """Bound a request by `request_timeout`; translate what escapes it (FUSEErrors pass)."""
        try:
            with trio.fail_after(self.request_timeout):
                yield
        except pyfuse3.FUSEError:
            raise
        except Exception as e:
            raise self.error(op, what, e) from None

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
