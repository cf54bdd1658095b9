"""`HdfsFileSystem`: fsspec's filesystem over the exact-read client, for pandas, pyarrow, dask and
polars without a mount; `AsyncHdfsFileSystem`: the same for asyncio callers.

Both run the trio client on one background loop per filesystem (`portal`), so connections,
logins and tokens live across calls; a filesystem used after `fork` starts its own. Pickling
carries the URL and storage options, never connections.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import errno
import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

from fsspec.asyn import AsyncFileSystem
from fsspec.spec import AbstractFileSystem
from fsspec.utils import stringify_path

from hdfsfuse.client.files import HdfsFile
from hdfsfuse.client.options import from_mount_options
from hdfsfuse.conf.hadoop import load_hadoop_conf, resolve_source
from hdfsfuse.errors import ConfigError, HdfsError
from hdfsfuse.fsspec import info as infos
from hdfsfuse.fsspec.core import Core, cat_ranges, python_error
from hdfsfuse.fsspec.files import AdaptiveReadahead, HdfsBufferedFile, Reads
from hdfsfuse.fsspec.options import parse_storage_options
from hdfsfuse.fsspec.portal import Portal
from hdfsfuse.fsspec.ranges import GAP

T = TypeVar("T")

PROTOCOLS = ("hdfsfuse", "hdfs", "viewfs")
# fsspec's own keyword arguments, which are not storage options
_FSSPEC_KWARGS = ("skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths")


def _target_uri(host: str | None, port: int | None, uri: str | None) -> str:
    if uri is not None:
        return uri
    if host:
        return f"hdfs://{host}:{port}" if port else f"hdfs://{host}"
    return "hdfs:///"  # fs.defaultFS


def _kwargs_from_url(path: str) -> dict[str, Any]:
    scheme, authority, _ = infos.split_url(stringify_path(path))
    if not authority:
        return {}
    if scheme == "viewfs":
        return {"uri": f"viewfs://{authority}"}
    host, colon, port = authority.rpartition(":")
    if colon and port.isdigit():
        return {"host": host, "port": int(port)}
    return {"host": authority}


def _returned(results: list[bytes | bytearray | OSError], on_error: str) -> list[bytes | Exception]:
    """`cat_ranges` results as fsspec wants them: failures in place, or the first raised."""
    if on_error == "raise":
        for r in results:
            if isinstance(r, OSError):
                raise r
    return [r if isinstance(r, OSError) else bytes(r) for r in results]


class Connection:
    """The options, the resolved target and (per process) the loop and client of one filesystem."""

    def __init__(self, host: str | None, port: int | None, uri: str | None, storage_options: dict[str, Any]) -> None:
        try:
            self.options = parse_storage_options(storage_options)
            self.uri = _target_uri(host, port, uri)
            self.target = resolve_source(self.uri, load_hadoop_conf(self.options.hadoop_conf))
        except ConfigError as e:
            raise ValueError(str(e)) from None
        scheme, authority, _ = infos.split_url(self.uri)
        self.url_prefix = f"viewfs://{authority}" if scheme == "viewfs" else f"hdfsfuse://{authority}"
        self._lock = threading.Lock()
        self._portal: Portal | None = None
        self._core: Core | None = None

    def _ready(self) -> tuple[Portal, Core]:
        """This process's loop and client, started on first use (and again after a fork)."""
        with self._lock:
            portal = self._portal
            if portal is None or portal.pid != os.getpid():
                try:
                    # No locations kept across opens: an open asks the NameNode for them again
                    # (`Core.open`), so keeping them would only cost memory.
                    client_options = dataclasses.replace(from_mount_options(self.options), located_files=0)
                    portal = Portal(self.target, client_options)
                except (HdfsError, OSError) as e:
                    raise python_error("connect", self.target.label, e, self.options.namenode_timeout) from None
                self._portal, self._core = portal, Core(portal.client, self.options.request_timeout)
            assert self._core is not None
            return portal, self._core

    def described(self, path: str, use_listings_cache: bool) -> dict[str, Any] | None:
        """`info` of a path `info` or a listing described within the last second, from that
        description (no NameNode call, no trip to the loop); None: ask."""
        core = self._live_core()
        if not use_listings_cache or core is None:
            return None
        status = core.recent.get(path, time.monotonic())
        return None if status is None else infos.info(path, status)

    def forget_described(self, path: str | None) -> None:
        core = self._live_core()
        if core is not None:
            core.recent.forget(path)

    def _live_core(self) -> Core | None:
        live = self._live()
        return None if live is None else live[1]

    def _live(self) -> tuple[Portal, Core] | None:
        """This process's loop and core if they are running (nothing is started here)."""
        portal, core = self._portal, self._core
        if portal is None or core is None or portal.pid != os.getpid() or core.client is not portal.client:
            return None
        return portal, core

    def call(self, op: str, what: str, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        portal, core = self._ready()
        return portal.call(core.bounded, op, what, fn, *args)

    def core(self) -> Core:
        return self._ready()[1]

    async def call_async(self, op: str, what: str, job: Callable[[Core], Awaitable[T]]) -> T:
        """`job(core)` on the loop, awaited from asyncio: the loop is started (on first use, or
        after a fork) in a worker thread, never in the asyncio loop's own."""
        live = self._live()
        portal, core = live if live is not None else await asyncio.to_thread(self._ready)
        return await asyncio.wrap_future(portal.submit(core.bounded, op, what, job, core))

    def open_file(self, fs: Reads, path: str, mode: str, block_size: int | None,
                  cache_options: dict[str, Any] | None, **kwargs: Any) -> HdfsBufferedFile:
        """`open(path, "rb")` of either face: the file pinned at open, read through `fs.read_open`."""
        if mode != "rb":
            self.read_only(f"open {path} with mode {mode!r}")
        file = self.call("open", path, self.core().open, path)
        return HdfsBufferedFile(fs, path, file, readahead_max=self.options.readahead_max,
                                cache_type=kwargs.pop("cache_type", AdaptiveReadahead.name),
                                cache_options=cache_options, block_size=block_size, **kwargs)

    def read_open(self, file: HdfsFile, path: str, start: int, end: int) -> bytes | bytearray:
        """[start, end) of a file `open_file` returned (the file it opened, whatever its path names now)."""
        return self.call("read", f"{path} [{start}, +{end - start})", self.core().read, file, start, end - start)

    def ranges(self, paths: list[str], starts: Any, ends: Any, max_gap: int | None
               ) -> tuple[list[str], list[int | None], list[int | None], int]:
        """`cat_ranges` arguments checked: one start and end per path, and the gap."""
        starts = starts if isinstance(starts, list) else [starts] * len(paths)
        ends = ends if isinstance(ends, list) else [ends] * len(paths)
        if len(starts) != len(paths) or len(ends) != len(paths):
            raise ValueError("cat_ranges: paths, starts and ends must have the same length")
        return paths, starts, ends, GAP if max_gap is None else max_gap

    def read_only(self, what: str) -> NoReturn:
        raise PermissionError(errno.EROFS, f"{self.url_prefix}: read-only filesystem: cannot {what}")

    def close(self) -> None:
        if self._portal is not None:
            self._portal.close()
            self._portal = self._core = None


class HdfsFileSystem(AbstractFileSystem):  # type: ignore[misc]
    """HDFS through hdfsfuse's client: exact range reads, EC, Kerberos and tokens, viewfs.

    `fsspec.filesystem("hdfsfuse", host=H, port=P, hadoop_conf=DIR, ...)`; storage options are
    the mount options of the same names (docs/fsspec.md).
    """

    protocol = PROTOCOLS
    root_marker = "/"

    def __init__(self, host: str | None = None, port: int | None = None, *, uri: str | None = None,
                 **storage_options: Any) -> None:
        fsspec_kwargs = {k: storage_options.pop(k) for k in _FSSPEC_KWARGS if k in storage_options}
        super().__init__(**fsspec_kwargs)
        self.connection = Connection(host, port, uri, storage_options)

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        return infos.hdfs_path(stringify_path(path))

    @staticmethod
    def _get_kwargs_from_urls(path: str) -> dict[str, Any]:
        return _kwargs_from_url(path)

    def unstrip_protocol(self, name: str) -> str:
        return self.connection.url_prefix + self._strip_protocol(name)

    def _call(self, op: str, what: str, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        return self.connection.call(op, what, fn, *args)

    # ----- metadata -------------------------------------------------------------------------------

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path = self._strip_protocol(path)
        described = self.connection.described(path, self.dircache.use_listings_cache)
        if described is not None:
            return described
        return self._call("stat", path, self.connection.core().info, path)

    def invalidate_cache(self, path: str | None = None) -> None:
        """Forget what `info` and listings described (of `path`, or of every path)."""
        self.connection.forget_described(None if path is None else self._strip_protocol(path))

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        path = self._strip_protocol(path)
        entries = self._call("ls", path, self.connection.core().ls, path)
        return entries if detail else [e["name"] for e in entries]

    def du(self, path: str, total: bool = True, maxdepth: int | None = None, withdirs: bool = False,
           **kwargs: Any) -> Any:
        """With `total` (and no `maxdepth`): the NameNode's content summary, no walk."""
        if not total or maxdepth is not None:
            return super().du(path, total=total, maxdepth=maxdepth, withdirs=withdirs, **kwargs)
        path = self._strip_protocol(path)
        return self._call("du", path, self.connection.core().content_length, path)

    def file_checksum(self, path: str) -> str:
        """The COMPOSITE_CRC file checksum (`COMPOSITE-CRC32C 0a1b2c3d`), from the DataNodes:
        no data is read. Equal for equal bytes, whatever the block size."""
        path = self._strip_protocol(path)
        return self._call("checksum", path, self.connection.core().file_checksum, path)

    def checksum(self, path: str) -> int:
        return int(self.file_checksum(path).rsplit(" ", 1)[1], 16)

    def ukey(self, path: str) -> str:
        return self.file_checksum(path)

    def modified(self, path: str) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self.info(path)["mtime"], tz=datetime.UTC)

    # ----- reading --------------------------------------------------------------------------------

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        path = self._strip_protocol(path)
        what = path if start is None and end is None else f"{path} [{start}, {end})"
        return bytes(self._call("read", what, self.connection.core().cat, path, start, end))

    def cat_ranges(self, paths: list[str], starts: Any, ends: Any, max_gap: int | None = None,
                   on_error: str = "return", **kwargs: Any) -> list[bytes | Exception]:
        """Exact reads of every range, concurrently; ranges of a file closer than `max_gap`
        (default 8 KiB) are read as one."""
        args = self.connection.ranges([self._strip_protocol(p) for p in paths], starts, ends, max_gap)
        results = self._call("read", f"{len(paths)} ranges", cat_ranges, self.connection.core(), *args)
        return _returned(results, on_error)

    def _open(self, path: str, mode: str = "rb", block_size: int | None = None, autocommit: bool = True,
              cache_options: dict[str, Any] | None = None, **kwargs: Any) -> HdfsBufferedFile:
        return self.connection.open_file(self, path, mode, block_size, cache_options, **kwargs)

    def read_open(self, file: HdfsFile, path: str, start: int, end: int) -> bytes | bytearray:
        return self.connection.read_open(file, path, start, end)

    # ----- read-only --------------------------------------------------------------------------------

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        self.connection.read_only(f"create {path}")

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        self.connection.read_only(f"create {path}")

    def rmdir(self, path: str) -> None:
        self.connection.read_only(f"remove {path}")

    def rm_file(self, path: str) -> None:
        self.connection.read_only(f"remove {path}")

    def _rm(self, path: str) -> None:
        self.connection.read_only(f"remove {path}")

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        self.connection.read_only(f"remove {path}")

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        self.connection.read_only(f"copy to {path2}")

    def mv(self, path1: Any, path2: Any, recursive: bool = False, maxdepth: int | None = None,
           **kwargs: Any) -> None:
        self.connection.read_only(f"move {path1}")

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        self.connection.read_only(f"write {path}")

    def put_file(self, lpath: str, rpath: str, callback: Any = None, mode: str = "overwrite",
                 **kwargs: Any) -> None:
        self.connection.read_only(f"write {rpath}")

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        self.connection.read_only(f"touch {path}")

    def close(self) -> None:
        """Stop the background loop and close its connections (a later call starts them again)."""
        self.connection.close()


class AsyncHdfsFileSystem(AsyncFileSystem):  # type: ignore[misc]
    """The asyncio face: `await fs._cat_file(...)`, `_cat_ranges`, `_info`, `_ls` (and fsspec's
    `_find`, `_glob`, `_exists` ... built on them), on the same client loop as the sync face."""

    protocol = PROTOCOLS
    root_marker = "/"

    def __init__(self, host: str | None = None, port: int | None = None, *, uri: str | None = None,
                 asynchronous: bool = False, loop: Any = None, **storage_options: Any) -> None:
        fsspec_kwargs = {k: storage_options.pop(k) for k in _FSSPEC_KWARGS if k in storage_options}
        super().__init__(asynchronous=asynchronous, loop=loop, **fsspec_kwargs)
        self.connection = Connection(host, port, uri, storage_options)

    _strip_protocol = HdfsFileSystem._strip_protocol
    _get_kwargs_from_urls = staticmethod(_kwargs_from_url)

    def unstrip_protocol(self, name: str) -> str:
        return self.connection.url_prefix + self._strip_protocol(name)

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path = self._strip_protocol(path)
        described = self.connection.described(path, self.dircache.use_listings_cache)
        if described is not None:
            return described
        return await self.connection.call_async("stat", path, lambda core: core.info(path))

    def invalidate_cache(self, path: str | None = None) -> None:
        self.connection.forget_described(None if path is None else self._strip_protocol(path))

    async def _ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        path = self._strip_protocol(path)
        entries = await self.connection.call_async("ls", path, lambda core: core.ls(path))
        return entries if detail else [e["name"] for e in entries]

    async def _cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        path = self._strip_protocol(path)
        return bytes(await self.connection.call_async("read", path, lambda core: core.cat(path, start, end)))

    async def _cat_ranges(self, paths: list[str], starts: Any, ends: Any, max_gap: int | None = None,
                          on_error: str = "return", **kwargs: Any) -> list[bytes | Exception]:
        args = self.connection.ranges([self._strip_protocol(p) for p in paths], starts, ends, max_gap)
        results = await self.connection.call_async("read", f"{len(paths)} ranges", lambda core: cat_ranges(core, *args))
        return _returned(results, on_error)

    def _open(self, path: str, mode: str = "rb", block_size: int | None = None,
              cache_options: dict[str, Any] | None = None, **kwargs: Any) -> HdfsBufferedFile:
        kwargs.pop("autocommit", None)
        return self.connection.open_file(self, self._strip_protocol(path), mode, block_size, cache_options, **kwargs)

    def read_open(self, file: HdfsFile, path: str, start: int, end: int) -> bytes | bytearray:
        return self.connection.read_open(file, path, start, end)

    async def _pipe_file(self, path: str, value: bytes, **kwargs: Any) -> None:
        self.connection.read_only(f"write {path}")

    async def _rm_file(self, path: str, **kwargs: Any) -> None:
        self.connection.read_only(f"remove {path}")

    async def _rm(self, path: Any, recursive: bool = False, **kwargs: Any) -> None:
        self.connection.read_only(f"remove {path}")

    async def _mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        self.connection.read_only(f"create {path}")

    async def _makedirs(self, path: str, exist_ok: bool = False) -> None:
        self.connection.read_only(f"create {path}")

    async def _cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        self.connection.read_only(f"copy to {path2}")

    async def _put_file(self, lpath: str, rpath: str, **kwargs: Any) -> None:
        self.connection.read_only(f"write {rpath}")
