"""An encrypted file's facts as the NameNode gives them (FileEncryptionInfoProto). Pure code.

Field 15 of a file status and field 6 of located blocks carry them; the HAS_CRYPT flag alone does
not (it is set on directories in a zone too). Only what Hadoop itself can read is accepted:
AES/CTR/NoPadding under protocol version ENCRYPTION_ZONES.
"""

from __future__ import annotations

import dataclasses

from hdfsfuse.errors import NotSupported, ProtocolError
from hdfsfuse.proto import hdfs_pb2

IV_LENGTH = 16
KEY_LENGTHS = (16, 32)  # AES-128 and AES-256 data keys

SUITE_NAMES = {
    hdfs_pb2.UNKNOWN: "UNKNOWN",
    hdfs_pb2.AES_CTR_NOPADDING: "AES/CTR/NoPadding",
    hdfs_pb2.SM4_CTR_NOPADDING: "SM4/CTR/NoPadding",
}


@dataclasses.dataclass(frozen=True, slots=True)
class FileEncryption:
    """One file's encryption: its EDEK and IV, and the zone key version that encrypted the EDEK."""

    edek: bytes = dataclasses.field(repr=False)
    iv: bytes
    key_name: str
    key_version: str

    @classmethod
    def from_proto(cls, path: str, info: hdfs_pb2.FileEncryptionInfoProto) -> FileEncryption:
        suite = info.suite if info.HasField("suite") else hdfs_pb2.UNKNOWN
        if suite != hdfs_pb2.AES_CTR_NOPADDING:
            raise NotSupported(f"{path}: encrypted with cipher suite {SUITE_NAMES.get(suite, suite)}; "
                               "hdfsfuse (like Hadoop's own client) reads only AES/CTR/NoPadding")
        version = info.cryptoProtocolVersion if info.HasField("cryptoProtocolVersion") else 0
        if version != hdfs_pb2.ENCRYPTION_ZONES:
            raise NotSupported(f"{path}: encryption protocol version {version} is not supported "
                               "(only ENCRYPTION_ZONES, version 2)")
        if len(info.iv) != IV_LENGTH or not info.key or not info.keyName or not info.ezKeyVersionName:
            raise ProtocolError(f"{path}: the NameNode's encryption info is incomplete "
                                f"(iv {len(info.iv)} bytes, EDEK {len(info.key)} bytes, key {info.keyName!r}, "
                                f"version {info.ezKeyVersionName!r})")
        return cls(edek=bytes(info.key), iv=bytes(info.iv), key_name=info.keyName,
                   key_version=info.ezKeyVersionName)

    def describe(self) -> dict[str, str]:
        """What may be shown (the user.hdfs.encryption xattr): names, never key material."""
        return {"key": self.key_name, "key_version": self.key_version, "suite": "AES/CTR/NoPadding"}


def encryption_of(path: str, info: hdfs_pb2.FileEncryptionInfoProto | None) -> FileEncryption | None:
    """The file's encryption, or None for a file outside any zone."""
    return None if info is None else FileEncryption.from_proto(path, info)
