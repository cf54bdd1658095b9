"""fsspec's info dicts from HDFS file statuses, and HDFS paths from fsspec's. Pure code."""

from __future__ import annotations

import re
from typing import Any

from hdfsfuse.proto import hdfs_pb2

FileStatus = hdfs_pb2.HdfsFileStatusProto
IS_DIR = hdfs_pb2.HdfsFileStatusProto.IS_DIR
IS_SYMLINK = hdfs_pb2.HdfsFileStatusProto.IS_SYMLINK
HAS_CRYPT = hdfs_pb2.HdfsFileStatusProto.HAS_CRYPT

_URL = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/]*)(?P<path>.*)$")


def split_url(url: str) -> tuple[str, str, str]:
    """(scheme, authority, path) of `hdfsfuse://host:port/p`, `hdfs://ns/p` or `viewfs://name/p`;
    a bare path gives ("", "", path)."""
    m = _URL.match(url)
    if m is None:
        return "", "", url
    return m["scheme"].lower(), m["authority"], m["path"]


def hdfs_path(path: str) -> str:
    """The absolute, normalized HDFS path a URL or path names (no trailing slash but the root's)."""
    _, _, path = split_url(path)
    path = path.split("?", 1)[0]
    parts = [p for p in path.split("/") if p and p != "."]
    if ".." in parts:
        raise ValueError(f"{path!r}: '..' is not supported in HDFS paths")
    return "/" + "/".join(parts)


def join(parent: str, name: str) -> str:
    return f"{parent.rstrip('/')}/{name}"


def kind(status: FileStatus) -> str:
    if status.fileType == IS_DIR:
        return "directory"
    if status.fileType == IS_SYMLINK:
        return "link"
    return "file"


def info(path: str, status: FileStatus) -> dict[str, Any]:
    """The info dict of `path` (sizes, times, owners, permissions and HDFS's own fields)."""
    entry: dict[str, Any] = {
        "name": path,
        "size": status.length if status.fileType != IS_DIR else 0,
        "type": kind(status),
        "mtime": status.modification_time / 1000,
        "atime": status.access_time / 1000,
        "owner": status.owner,
        "group": status.group,
        "permissions": status.permission.perm & 0o7777,
        "file_id": status.fileId,
    }
    if status.fileType != IS_DIR:
        entry["block_size"] = status.blocksize
        entry["replication"] = status.block_replication
        entry["ec_policy"] = status.ecPolicy.name if status.HasField("ecPolicy") else None
        entry["encrypted"] = bool(status.flags & HAS_CRYPT)
    if status.fileType == IS_SYMLINK:
        entry["destination"] = status.symlink.decode("utf-8", "surrogateescape")
    return entry
