"""The one exception table: Java classes to typed errors to errnos."""

from __future__ import annotations

import errno

import pytest

from hdfsfuse import errors
from hdfsfuse.errors import ProtocolError


@pytest.mark.parametrize(
    ("java_class", "message", "expected", "code"),
    [
        ("java.io.FileNotFoundException", "File does not exist: /x", errors.FileNotFound, errno.ENOENT),
        ("java.io.FileNotFoundException", "Path is not a file: /d\n\tat ...", errors.IsADirectory, errno.EISDIR),
        ("org.apache.hadoop.fs.ParentNotDirectoryException", "/f (is not a directory)", errors.NotADirectory,
         errno.ENOTDIR),
        ("org.apache.hadoop.security.AccessControlException", "Permission denied: user=a", errors.AccessDenied,
         errno.EACCES),
        ("org.apache.hadoop.hdfs.server.namenode.SafeModeException", "Name node is in safe mode",
         errors.Retriable, errno.EAGAIN),
        ("org.apache.hadoop.ipc.RetriableException", "try later", errors.Retriable, errno.EAGAIN),
        ("org.apache.hadoop.ipc.StandbyException", "Operation category READ is not supported in state standby",
         errors.StandbyNameNode, errno.EIO),
        ("org.apache.hadoop.security.AccessControlException",
         "SIMPLE authentication is not enabled.  Available:[TOKEN, KERBEROS]", errors.AuthenticationRequired,
         errno.EACCES),
        ("com.example.Weird", "something odd\nstack", errors.HdfsError, errno.EIO),
    ],
)
def test_java_exceptions_map_to_typed_errors(java_class: str, message: str, expected: type, code: int) -> None:
    e = errors.from_remote(java_class, message)
    assert type(e) is expected
    assert errors.to_errno(e) == code
    assert "\n" not in str(e)
    assert e.java_class == java_class


def test_unknown_class_keeps_class_and_first_line() -> None:
    e = errors.from_remote("com.example.Weird", "something odd\n\tat x.y")
    assert str(e) == "com.example.Weird: something odd"


def test_kerberos_message_says_so() -> None:
    e = errors.from_remote("org.apache.hadoop.security.AccessControlException",
                           "SIMPLE authentication is not enabled.  Available:[TOKEN, KERBEROS]")
    assert "Kerberos" in str(e)


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (ProtocolError("x"), errno.EIO),
        (TimeoutError(), errno.ETIMEDOUT),
        (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), errno.ECONNREFUSED),
        (RuntimeError("bug"), errno.EIO),
        (errors.NotSupported("ec"), errno.EOPNOTSUPP),
        (errors.ReadOnly("w"), errno.EROFS),
    ],
)
def test_to_errno(exc: BaseException, code: int) -> None:
    assert errors.to_errno(exc) == code


def test_one_exception_root() -> None:
    """Bad bytes from the network and refused tokens are HdfsErrors too: one `except` catches all."""
    assert issubclass(ProtocolError, errors.HdfsError)
    assert issubclass(errors.InvalidBlockToken, errors.HdfsError)
    from hdfsfuse import wire

    assert wire.ProtocolError is ProtocolError
