"""Encrypted files' data keys for the client: which KMS a namespace uses, and its keys, kept. Does I/O.

An encrypted file (one in an encryption zone) is opened with a decryptor built from its data
key. The key comes from the cache (`encryption.keys`: per identity, EDEK and key version, in
memory only) or from the KMS, asked as the identity opening the file. The KMS is, as in
Hadoop's client: the one the NameNode names in its server defaults (unless
dfs.client.ignore.namenode.default.kms.uri), else hadoop.security.key.provider.path.

Files already open hold their decryptor: they keep reading while the KMS is down.
"""

from __future__ import annotations

import trio

from hdfsfuse.client.options import ClientOptions
from hdfsfuse.conf.hadoop import ClusterSettings
from hdfsfuse.encryption.ctr import CtrDecryptor
from hdfsfuse.encryption.info import FileEncryption
from hdfsfuse.encryption.keys import DataKey, KeyCache, KeyId
from hdfsfuse.encryption.kms import KmsClient, KmsTimeouts
from hdfsfuse.encryption.kms_protocol import KmsEndpoints, provider_uri
from hdfsfuse.errors import HdfsError, KeyUnavailable
from hdfsfuse.namenode.client import NameNodeClient
from hdfsfuse.proto import rpc_pb2
from hdfsfuse.stats import Stats


class FileKeys:
    def __init__(self, settings: ClusterSettings, options: ClientOptions, stats: Stats,
                 tokens: list[rpc_pb2.TokenProto]) -> None:
        self.settings = settings
        self.stats = stats
        self.cache = KeyCache(options.key_keep_seconds)
        self._tokens = tokens
        self._timeouts = KmsTimeouts(connect=options.timeouts.connect, total=options.namenode_total_timeout)
        self._ca_file = options.kms_ca_file
        self._kms: dict[str, KmsClient] = {}
        self._asking: dict[KeyId, trio.Event] = {}

    async def decryptor(self, path: str, encryption: FileEncryption, namenode: NameNodeClient) -> CtrDecryptor:
        """The decryptor of an encrypted file opened through `namenode` (whose identity asks the KMS)."""
        key_id = (namenode.auth.description, encryption.edek, encryption.key_version)
        while (key := self.cache.get(key_id, trio.current_time())) is None and key_id in self._asking:
            await self._asking[key_id].wait()  # one call per key, however many open it at once
        if key is not None:
            self.stats.data_keys_reused += 1
            return CtrDecryptor(key, encryption.iv)
        self._asking[key_id] = done = trio.Event()
        try:
            kms = await self._kms_for(path, namenode)
            self.stats.kms_key_requests += 1
            key = DataKey(await kms.data_key(encryption, namenode.auth, path))
        except HdfsError:
            self.stats.kms_key_failures += 1
            raise
        finally:
            del self._asking[key_id]
            done.set()
        self.cache.put(key_id, key, trio.current_time())
        return CtrDecryptor(key, encryption.iv)

    async def _kms_for(self, path: str, namenode: NameNodeClient) -> KmsClient:
        uri = None
        if not self.settings.ignore_namenode_kms:
            uri = provider_uri((await namenode.get_server_defaults()).keyProviderUri)
        uri = uri or provider_uri(self.settings.key_provider_path)
        if uri is None:
            raise KeyUnavailable(f"{path} is encrypted, but no KMS is known: the NameNode names none and "
                                 "hadoop.security.key.provider.path has no kms:// URI")
        kms = self._kms.get(uri)
        if kms is None:
            kms = self._kms[uri] = KmsClient(KmsEndpoints.parse(uri), tokens=self._tokens,
                                              timeouts=self._timeouts, ca_file=self._ca_file)
        return kms
