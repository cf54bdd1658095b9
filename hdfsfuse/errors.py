"""The one place errors are typed and mapped to errnos. Pure code, no I/O.

Java exception classes from the NameNode become typed `HdfsError`s (`from_remote`), and every
error becomes exactly one errno (`to_errno`) at the FUSE boundary.
"""

from __future__ import annotations

import errno


class HdfsError(Exception):
    """Base of every error hdfsfuse raises on purpose. `errno` is what FUSE returns."""

    errno: int = errno.EIO

    def __init__(self, message: str, *, java_class: str = "") -> None:
        super().__init__(message)
        self.java_class = java_class


class ProtocolError(HdfsError):
    """Bytes from the network that do not follow the protocol."""

    errno = errno.EIO


class InvalidBlockToken(HdfsError):
    """ERROR_ACCESS_TOKEN: refetch the block's locations for a fresh token, then retry once."""

    errno = errno.EIO


class FileNotFound(HdfsError):
    errno = errno.ENOENT


class AccessDenied(HdfsError):
    errno = errno.EACCES


class IsADirectory(HdfsError):
    errno = errno.EISDIR


class NotADirectory(HdfsError):
    errno = errno.ENOTDIR


class UnresolvedLink(HdfsError):
    errno = errno.ELOOP


class Retriable(HdfsError):
    """SafeModeException / RetriableException: try again after a backoff, within a bound."""

    errno = errno.EAGAIN


class StandbyNameNode(HdfsError):
    """The NameNode is a standby: fail over to the next one."""

    errno = errno.EIO


class NameNodeUnavailable(HdfsError):
    """No NameNode answered within the bound; the message names the ones tried."""

    errno = errno.EIO


class ConnectionLost(HdfsError):
    """The socket closed or reset while a call or read was in flight."""

    errno = errno.EIO


class RpcTimeout(HdfsError):
    errno = errno.ETIMEDOUT


class AuthenticationRequired(HdfsError):
    """The cluster refuses SIMPLE auth (Kerberos) or needs SASL on the data path."""

    errno = errno.EACCES


class NotSupported(HdfsError):
    """Erasure-coded or encrypted files, encrypted data transfer."""

    errno = errno.EOPNOTSUPP


class KeyUnavailable(HdfsError):
    """An encrypted file's data key could not be had: no KMS configured, unreachable, or failing."""

    errno = errno.EIO


class ChecksumMismatch(HdfsError):
    errno = errno.EIO


class BlockUnavailable(HdfsError):
    """Every replica of a block failed."""

    errno = errno.EIO


class FileChanged(HdfsError):
    """An open file's path now names other bytes: replaced, truncated, rewritten or deleted."""

    errno = errno.EIO


class ReadOnly(HdfsError):
    errno = errno.EROFS


class ConfigError(HdfsError):
    """Bad URI, option or Hadoop configuration file."""

    errno = errno.EINVAL


# Java exception class -> typed error. Unknown classes become a plain HdfsError (EIO).
JAVA_EXCEPTIONS: dict[str, type[HdfsError]] = {
    "java.io.FileNotFoundException": FileNotFound,
    "org.apache.hadoop.security.AccessControlException": AccessDenied,
    "org.apache.hadoop.hdfs.protocol.AclException": AccessDenied,
    "org.apache.hadoop.fs.ParentNotDirectoryException": NotADirectory,
    "org.apache.hadoop.fs.UnresolvedLinkException": UnresolvedLink,
    "org.apache.hadoop.hdfs.protocol.UnresolvedPathException": UnresolvedLink,
    "org.apache.hadoop.hdfs.server.namenode.SafeModeException": Retriable,
    "org.apache.hadoop.ipc.RetriableException": Retriable,
    "org.apache.hadoop.ipc.StandbyException": StandbyNameNode,
    "org.apache.hadoop.ipc.ObserverRetryOnActiveException": StandbyNameNode,
    "org.apache.hadoop.hdfs.server.datanode.ReplicaNotFoundException": BlockUnavailable,
    "org.apache.hadoop.security.authorize.AuthorizationException": AccessDenied,
    "org.apache.hadoop.security.token.SecretManager$InvalidToken": AuthenticationRequired,
    "javax.security.sasl.SaslException": AuthenticationRequired,
}


def from_remote(java_class: str, message: str) -> HdfsError:
    """Type a Java exception from an RPC ERROR/FATAL response."""
    first_line = message.strip().splitlines()[0] if message.strip() else java_class
    if "is not a file" in first_line:
        return IsADirectory(first_line, java_class=java_class)
    if "is not a directory" in first_line:
        return NotADirectory(first_line, java_class=java_class)
    if java_class == "org.apache.hadoop.security.AccessControlException" and (
        "SIMPLE authentication is not enabled" in first_line
    ):
        return AuthenticationRequired(
            "the cluster requires Kerberos (SIMPLE authentication is refused); set "
            "hadoop.security.authentication=kerberos in core-site.xml and give credentials (kinit, "
            f"-o keytab=FILE,principal=NAME, or -o token_file=FILE): {first_line}",
            java_class=java_class,
        )
    cls = JAVA_EXCEPTIONS.get(java_class, HdfsError)
    return cls(first_line if cls is not HdfsError else f"{java_class}: {first_line}", java_class=java_class)


def to_errno(exc: BaseException) -> int:
    """The errno a FUSE request answers with for this exception."""
    if isinstance(exc, HdfsError):
        return exc.errno
    if isinstance(exc, TimeoutError):
        return errno.ETIMEDOUT
    if isinstance(exc, OSError) and exc.errno:
        return exc.errno
    return errno.EIO
