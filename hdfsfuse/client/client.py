"""The hdfsfuse client library: open HDFS files and read exact byte ranges. Does I/O.

    HdfsClient.read_range(path_or_file, offset, length)
        -> BlockMap.pieces(): one piece per block the range touches (locations are fetched in
           windows, on demand, and pinned to the file's block ids: `locator`)
        -> ReplicatedReader.read(): the block cache, failover, hedging, token refresh and
           bad-block reports (`replicated`)
        -> datanode.reader.read_replica(): one exact-length OP_READ_BLOCK on a pooled connection
        (an erasure-coded file's pieces go to erasure.reader.StripedReader instead: one exact
        read per data unit, decoding around units that fail)

Each block read is bounded by `Timeouts.total`. The client is a facade: it opens files and
dispatches reads; the parts it is built from (`bootstrap.open_parts`) do the work.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from hdfsfuse.client import checksums
from hdfsfuse.client.bootstrap import ClientParts, open_parts
from hdfsfuse.client.encrypted import FileKeys
from hdfsfuse.client.files import HdfsFile, locate_path
from hdfsfuse.client.located import LocatedFiles
from hdfsfuse.client.locator import Locator
from hdfsfuse.client.options import ClientOptions
from hdfsfuse.client.replicated import ReplicatedReader
from hdfsfuse.conf.hadoop import NameNodeTarget, ViewTarget, load_hadoop_conf, resolve_source
from hdfsfuse.datanode.buffers import read_buffer
from hdfsfuse.datanode.dtp import Placement
from hdfsfuse.datanode.pieces import Piece, clamp
from hdfsfuse.datanode.reader import run_each
from hdfsfuse.encryption.ctr import CtrDecryptor
from hdfsfuse.encryption.info import FileEncryption, encryption_of
from hdfsfuse.erasure.arrival import Arrival
from hdfsfuse.erasure.codec import EcPolicy, resolve_policy
from hdfsfuse.erasure.reader import StripedReader
from hdfsfuse.errors import BlockUnavailable, FileNotFound, IsADirectory, NotSupported
from hdfsfuse.namenode.client import FileStatus, LocatedBlocks, NameNodeClient
from hdfsfuse.namenode.viewfs import ViewNameNode
from hdfsfuse.proto import hdfs_pb2
from hdfsfuse.security.transfer import DataTransferSecurity
from hdfsfuse.stats import Stats

log = logging.getLogger(__name__)

HAS_EC = hdfs_pb2.HdfsFileStatusProto.HAS_EC


class HdfsClient:
    def __init__(self, parts: ClientParts, options: ClientOptions) -> None:
        self.namenode = parts.namenode
        self.credentials = parts.credentials
        self.settings = parts.settings
        self.options = options
        self.context = parts.context
        self.stats = parts.context.stats
        self.short_circuit = parts.short_circuit
        self.located = LocatedFiles(options.located_files)
        self.locator = Locator(user=parts.namenode.user, options=options, located=self.located, stats=self.stats,
                               nursery=parts.nursery)
        self.replicated = ReplicatedReader(parts.context, locator=self.locator, reports=parts.reports,
                                           short_circuit=parts.short_circuit, options=options, nursery=parts.nursery)
        self.keys = FileKeys(parts.settings, options, self.stats,
                             parts.credentials.tokens if parts.credentials is not None else [])
        self.striped = StripedReader(parts.context, relocate=self.locator.locate,
                                     report_corrupt=parts.reports.internal_block)
        # SASL on DataNode connections, decided per namespace (a data-encryption key belongs to
        # one block pool); None keeps the read path free of it.
        self._transfer: dict[NameNodeClient, DataTransferSecurity | None] = {}

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, uri: str, *, conf_dir: str | None = None, options: ClientOptions | None = None,
        stats: Stats | None = None,
    ) -> AsyncIterator[HdfsClient]:
        """Resolve `uri` against the Hadoop configuration and open a client for it."""
        target = resolve_source(uri, load_hadoop_conf(conf_dir))
        async with cls.open_target(target, options=options, stats=stats) as client:
            yield client

    @classmethod
    @asynccontextmanager
    async def open_target(
        cls, target: NameNodeTarget | ViewTarget, *, options: ClientOptions | None = None,
        stats: Stats | None = None,
    ) -> AsyncIterator[HdfsClient]:
        """Log in, connect to the NameNode(s) and start the client's background tasks."""
        opts = options or ClientOptions()
        async with open_parts(target, opts, stats or Stats()) as parts:
            yield cls(parts, opts)

    @property
    def client_name(self) -> str:
        return self.context.client_name

    # ----- opening files --------------------------------------------------------------------------

    async def open(self, path: str, *, file_id: int = 0, namenode: NameNodeClient | ViewNameNode | None = None,
                   known: FileStatus | None = None) -> HdfsFile:
        """Open a file by path, or (with `file_id`) exactly the file with that inode id.

        `namenode`: the connection of the identity opening it (per-caller identity); the file
        keeps using it, so its locations and block tokens are always fetched as the opener. A
        viewfs mount hands the file to the namespace that holds it.

        `known`: the file's status as a listing or lookup gave it moments ago (its fileId is
        `file_id`). The open then trusts it: it asks the NameNode once, for the locations by
        inode path (which also proves the file still exists), or not at all when locations of
        the unchanged file are kept (`located`).
        """
        nn, path = (namenode or self.namenode).route(path)
        kept = None
        if known is not None and file_id and known.fileId == file_id and not nn.router:
            status = known
            kept = self.located.find(known)
            self.stats.cache_hits["locations" if kept is not None else "status"] += 1
        else:
            await nn.sync_for_open()
            found = await nn.get_file_info(path if nn.router else locate_path(path, file_id))
            if found is None or (file_id and found.fileId != file_id):
                raise FileNotFound(f"{path}: no such file" if found is None else f"{path}: replaced by another file")
            status = found
        if status.fileType == hdfs_pb2.HdfsFileStatusProto.IS_DIR:
            raise IsADirectory(f"{path}: is a directory")
        policy = self.check_supported(path, status)
        encryption = encryption_of(path, status.fileEncryptionInfo if status.HasField("fileEncryptionInfo") else None)
        decryptor = await self._decryptor(path, encryption, nn)
        security = await self.check_data_transfer(nn)
        blocksize = status.blocksize or 128 * 1024 * 1024
        group_bytes = blocksize * (policy.data_units if policy is not None else 1)  # file bytes per block
        file = HdfsFile(path, status, window=self.options.location_window_blocks * group_bytes, namenode=nn,
                        dn_security=security, ec_policy=policy, encryption=encryption, decryptor=decryptor,
                        by_inode=not nn.router)  # (known by now: a Router says so in every answer)
        if kept is not None:
            await self.locator.apply(file, kept)
        else:
            self.located.remember(status, await self.locator.locate(file, 0, file.window))
        file.opened = True
        return file

    async def open_range(self, path: str, offset: int, length: int) -> HdfsFile:
        """A file for one read of [offset, offset+length): a single getBlockLocations of exactly
        that range answers for every block it touches, and nothing else is asked (no
        getFileInfo). Pinned to those block ids: a block fetched again (a replica refused) that
        is not the same block fails the read with FileChanged. For more reads, `open`."""
        return await self.range_file(path, await self.locate_range(path, offset, length))

    async def locate_range(self, path: str, offset: int, length: int) -> LocatedBlocks:
        """The NameNode's answer for the blocks of [offset, offset+length) of the file at `path`."""
        nn, path = self.namenode.route(path)
        await nn.sync_for_open()
        return await nn.get_block_locations(path, offset, max(1, length))

    async def range_file(self, path: str, lbs: LocatedBlocks) -> HdfsFile:
        """A file for reads inside the blocks `lbs` names (see `open_range`)."""
        nn, path = self.namenode.route(path)
        status = hdfs_pb2.HdfsFileStatusProto(fileType=hdfs_pb2.HdfsFileStatusProto.IS_FILE, length=lbs.fileLength)
        if lbs.HasField("ecPolicy"):
            status.ecPolicy.CopyFrom(lbs.ecPolicy)
        policy = self.check_supported(path, status)
        encryption = encryption_of(path, lbs.fileEncryptionInfo if lbs.HasField("fileEncryptionInfo") else None)
        decryptor = await self._decryptor(path, encryption, nn)
        security = await self.check_data_transfer(nn)
        group_bytes = 128 * 1024 * 1024 * (policy.data_units if policy is not None else 1)
        file = HdfsFile(path, status, window=self.options.location_window_blocks * group_bytes, namenode=nn,
                        dn_security=security, ec_policy=policy, by_inode=False, encryption=encryption,
                        decryptor=decryptor)
        await self.locator.apply(file, lbs)
        return file

    @staticmethod
    def check_supported(path: str, status: FileStatus) -> EcPolicy | None:
        """Refuse what cannot be read; return the erasure-coding policy (an unknown codec fails here)."""
        if status.flags & HAS_EC and not status.HasField("ecPolicy"):
            raise NotSupported(f"{path}: erasure-coded, but the NameNode did not name the policy")
        return resolve_policy(status.ecPolicy, path) if status.HasField("ecPolicy") else None

    async def _decryptor(self, path: str, encryption: FileEncryption | None,
                         namenode: NameNodeClient) -> CtrDecryptor | None:
        """An encrypted file's decryptor, its data key asked of the KMS as the opener (or held)."""
        return None if encryption is None else await self.keys.decryptor(path, encryption, namenode)

    async def check_data_transfer(self, namenode: NameNodeClient) -> DataTransferSecurity | None:
        """Decide, from the configuration and the namespace's server defaults, whether its
        DataNode connections may need SASL (None keeps the read path free of it)."""
        if namenode not in self._transfer:
            defaults = await namenode.get_server_defaults()
            kerberos = self.credentials is not None and self.credentials.kerberos
            needed = defaults.encryptDataTransfer or (kerberos and self.settings.data_transfer_protection)
            self._transfer[namenode] = (
                DataTransferSecurity(namenode, self.settings, self.stats, kerberos=kerberos) if needed else None
            )
        return self._transfer[namenode]

    async def refresh(self, file: HdfsFile) -> None:
        """Fetch fresh locations and tokens for the file's first window and its last block, and its length."""
        await self.locator.locate(file, 0, file.window)

    async def grow(self, file: HdfsFile, *, strict: bool = True) -> None:
        """For a file being written: learn how far it can be read now (`Locator.grow`)."""
        await self.locator.grow(file, strict=strict)

    async def file_checksum(self, file: HdfsFile) -> str:
        """The file's COMPOSITE_CRC checksum, from its DataNodes: no data is read."""
        return await checksums.file_checksum(file, self.context, self.locator)

    # ----- reading ------------------------------------------------------------------------------

    async def read_range(self, file: HdfsFile | str, offset: int, length: int) -> bytes | bytearray:
        """Read [offset, offset+length) of a file, clamped at EOF (library callers)."""
        data = await self.fetch_range(file, offset, length)
        self.stats.app_bytes += len(data)
        return data

    async def fetch_range(self, file: HdfsFile | str, offset: int, length: int, *,
                          inline_tried: bool = False, arrival: Arrival | None = None) -> bytes | bytearray:
        """Read a range without counting it as application bytes (the mount counts its own).

        `inline_tried`: the caller already asked `read_now` for exactly this range. `arrival`:
        a range inside one erasure-coded block group tells it which bytes have landed, while
        it is read (any other range only returns them all at the end: an encrypted file's are
        only ever returned decrypted, at the end)."""
        if isinstance(file, str):
            file = await self.open(file)
        data = await self.fetch_stored(file, offset, length, inline_tried=inline_tried, arrival=arrival)
        return data if file.decryptor is None or not data else file.decryptor.decrypt(data, offset)

    async def fetch_stored(self, file: HdfsFile, offset: int, length: int, *, inline_tried: bool = False,
                           arrival: Arrival | None = None) -> bytes | bytearray:
        """The range as the DataNodes store it: an encrypted file's ciphertext, which
        `file.decryptor.decrypt(data, offset)` turns into its bytes (a reader that holds a range
        before handing it out decrypts only what it hands out); any other file's bytes."""
        if file.decryptor is not None:
            arrival = None  # its landed bytes are ciphertext
        return await self._fetch_stored(file, offset, length, inline_tried, arrival)

    async def _fetch_stored(self, file: HdfsFile, offset: int, length: int, inline_tried: bool,
                            arrival: Arrival | None) -> bytes | bytearray:
        if file.under_construction and offset + length > file.length:
            await self.grow(file, strict=offset >= file.length)
        n = clamp(offset, length, file.length)
        if n == 0:
            return b""
        data = None if inline_tried else self._stored_now(file, offset, n, poll=False)
        if data is not None:
            return data
        if file.map.first_gap(offset, n) is not None:
            await self.locator.fill_gaps(file, offset, n)
            n = min(n, clamp(offset, length, file.length))  # the file may have shrunk, never read past the fill
            if n == 0:
                return b""
        pieces = file.map.pieces(offset, n)
        if len(pieces) == 1:
            return await self._read_piece(file, pieces[0], arrival)
        result = read_buffer(n)  # the pieces cover it: every byte is written before it is returned

        async def fill(piece: Piece) -> None:
            data = await self._read_piece(file, piece, into=(result, Placement(piece.out_offset)))
            if data is not result:  # from the block cache, a local replica, or a striped group
                result[piece.out_offset : piece.out_offset + piece.length] = data

        await run_each(fill, pieces)
        return result

    def read_now(self, file: HdfsFile, offset: int, n: int, *, poll: bool = False) -> bytes | bytearray | None:
        """A small read of a finalized block done inline with no wait, from bytes already in
        memory: the block cache's files first (as a read asks it first), then the files of a
        local replica that served this block before (short-circuit). None: read it the usual
        way. `poll`: the caller has nothing else to do, so the block cache may poll for bytes
        on its disk (`CachedReads.read_now`). An encrypted file's are decrypted here: the
        block cache and local replicas hold only ciphertext."""
        data = self._stored_now(file, offset, n, poll=poll)
        return data if data is None or file.decryptor is None else file.decryptor.decrypt(data, offset)

    def _stored_now(self, file: HdfsFile, offset: int, n: int, *, poll: bool) -> bytes | bytearray | None:
        cached = self.context.cached
        if file.ec_policy is not None or (cached is None and self.short_circuit is None):
            return None
        block = file.map.holding(offset, n)
        if block is None or not file.finalized(block.offset):
            return None
        at = offset - block.offset
        data = None
        if cached is not None and file.freshness.current(block.offset, trio.current_time(),
                                                         self.options.cache_max_age):
            data = cached.read_now(block.b, at, n, poll=poll)
        if data is None and self.short_circuit is not None:
            data = self.short_circuit.read_now(block.b, at, n)
        return data

    async def _read_piece(self, file: HdfsFile, piece: Piece, arrival: Arrival | None = None,
                          into: tuple[bytearray, Placement] | None = None) -> bytes | bytearray:
        """One block's piece; `into`: a replicated block's DataNode bytes land in that buffer."""
        total = self.options.timeouts.total
        failures: dict[str, str] = {}
        with trio.move_on_after(total):
            if file.ec_policy is not None:
                return await self.striped.read(file, piece, file.ec_policy, arrival)
            return await self.replicated.read(file, piece, failures, into)
        detail = "; ".join(f"{a}: {why}" for a, why in failures.items()) or "no replica answered"
        message = (
            f"{file.path}: the block at file offset {piece.block_start} (reading offset "
            f"{piece.block_start + piece.offset_in_block}) was not read within {total:g}s; {detail}"
        )
        raise BlockUnavailable(message)  # logged once, where it is answered (the FUSE boundary)
