"""Which DataNode connections negotiate SASL, and with what credentials.

Owns the decision for each new DataNode connection (`transfer_sasl.handshake_kind`, from the client
configuration and the NameNode's server defaults) and the data-encryption key for
dfs.encrypt.data.transfer: fetched from the NameNode (getDataEncryptionKey) once, kept until
shortly before it expires (`renewal_time`), and dropped when a DataNode no longer knows it.
Does I/O (NameNode calls); the handshake itself is pure (`hdfsfuse.security.transfer_sasl`), driven by
`hdfsfuse.datanode.reader`.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

import trio

from hdfsfuse.conf.hadoop import ClusterSettings
from hdfsfuse.proto import hdfs_pb2, rpc_pb2
from hdfsfuse.security.transfer_sasl import DataTransferSaslClient, handshake_kind
from hdfsfuse.stats import Stats

log = logging.getLogger(__name__)

KEY_MARGIN_SECONDS = 60.0  # renew the data-encryption key this long before the NameNode's expiry...
KEY_MARGIN_SHARE = 0.1  # ...or, for a short-lived key, this share of the lifetime it came with


def renewal_time(fetched_at: float, expiry_ms: int) -> float:
    """When a data-encryption key fetched at `fetched_at` (epoch seconds), valid until
    `expiry_ms` (the NameNode's epoch milliseconds), is fetched again: a minute before it
    expires, but never sooner than 90% into its life, so a cluster with short-lived keys
    (dfs.block.access.token.lifetime of a minute or two) does not fetch one for every
    connection."""
    expiry = expiry_ms / 1000
    return expiry - min(KEY_MARGIN_SECONDS, KEY_MARGIN_SHARE * max(0.0, expiry - fetched_at))


class KeySource(Protocol):
    """What the decision asks a namespace's NameNode (`hdfsfuse.namenode.client.NameNodeClient`)."""

    async def get_server_defaults(self) -> hdfs_pb2.FsServerDefaultsProto: ...

    async def get_data_encryption_key(self) -> hdfs_pb2.DataEncryptionKeyProto | None: ...


class DataTransferSecurity:
    def __init__(self, namenode: KeySource, settings: ClusterSettings, stats: Stats, *, kerberos: bool) -> None:
        self.namenode = namenode
        self.settings = settings
        self.stats = stats
        self.kerberos = kerberos
        self._key: hdfs_pb2.DataEncryptionKeyProto | None = None
        self._renew_at = 0.0  # epoch seconds: when `_key` is fetched again
        self._key_lock = trio.Lock()

    async def client_for(self, address: str, token: rpc_pb2.TokenProto) -> DataTransferSaslClient | None:
        """The handshake a new connection to `address` must make first, or None."""
        port = int(address.rpartition(":")[2])
        encrypt = (await self.namenode.get_server_defaults()).encryptDataTransfer
        key = await self._encryption_key() if encrypt else None
        kind = handshake_kind(kerberos=self.kerberos, encrypt=key is not None,
                              protection=self.settings.data_transfer_protection, xfer_port=port)
        suites = self.settings.cipher_suites
        if kind == "encrypted":
            assert key is not None
            return DataTransferSaslClient.encrypted(key, suites, address)
        if kind == "general":
            return DataTransferSaslClient.general(token, self.settings.data_transfer_protection, suites, address)
        return None

    def forget_key(self) -> None:
        """A DataNode did not know the key (expired or rolled): the next handshake fetches a new one."""
        self._key = None

    def for_block(self, token: rpc_pb2.TokenProto) -> BlockSecurity:
        return BlockSecurity(self, token)

    async def _encryption_key(self) -> hdfs_pb2.DataEncryptionKeyProto | None:
        async with self._key_lock:
            key = self._key
            if key is not None and time.time() < self._renew_at:
                return key
            fetched_at = time.time()
            self._key = await self.namenode.get_data_encryption_key()
            self.stats.encryption_key_fetches += 1
            if self._key is not None:
                self._renew_at = renewal_time(fetched_at, self._key.expiryDate)
                log.debug("data-encryption key %d, valid until %s", self._key.keyId,
                          time.strftime("%H:%M:%S", time.localtime(self._key.expiryDate / 1000)))
            return self._key


class BlockSecurity:
    """`DataTransferSecurity` bound to one block's token: what `datanode.read_replica` asks."""

    __slots__ = ("_security", "_token")

    def __init__(self, security: DataTransferSecurity, token: rpc_pb2.TokenProto) -> None:
        self._security = security
        self._token = token

    async def handshake(self, address: str) -> DataTransferSaslClient | None:
        return await self._security.client_for(address, self._token)

    def forget_key(self) -> None:
        self._security.forget_key()
