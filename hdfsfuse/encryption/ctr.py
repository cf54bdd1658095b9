"""AES/CTR decryption of an encrypted file at any offset. Pure code (OpenSSL through `cryptography`).

Hadoop's CryptoInputStream: the counter block for file offset `o` is the file's IV plus o // 16,
as 128-bit big-endian integers with the carry running through all 16 bytes; the keystream
starts there and its first o % 16 bytes are skipped. Ciphertext and plaintext have the same
length and offsets (no header, no padding), so an exact read stays exact.
"""

from __future__ import annotations

from hdfsfuse.encryption.keys import DataKey
from hdfsfuse.errors import NotSupported

try:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
except ImportError:  # pragma: no cover - a clear error where an encrypted file is opened
    Cipher = None  # type: ignore[assignment,misc]

BLOCK = 16
_ZEROS = bytes(BLOCK)


def counter_block(iv: bytes, offset: int) -> bytes:
    """The AES/CTR counter block that encrypts the 16 bytes holding file offset `offset`."""
    return ((int.from_bytes(iv, "big") + offset // BLOCK) % (1 << 128)).to_bytes(BLOCK, "big")


class CtrDecryptor:
    """Decrypts any range of one file: its data key (16 or 32 bytes) and IV. Holding it keeps
    the key in the cache (`keys.KeyCache`): an open file holds its decryptor."""

    __slots__ = ("_algorithm", "_iv", "_key")

    def __init__(self, key: DataKey, iv: bytes) -> None:
        if Cipher is None:
            raise NotSupported("reading encrypted files needs the 'cryptography' package: "
                               "pip install 'hdfsfuse[encryption]'")
        self._key = key
        self._algorithm = algorithms.AES(key.material)
        self._iv = iv

    def __repr__(self) -> str:
        return "CtrDecryptor(<key withheld>)"

    def decrypt(self, data: bytes | bytearray | memoryview, offset: int) -> bytes:
        """The plaintext of `data`, the ciphertext at file offset `offset`."""
        decryptor = Cipher(self._algorithm, modes.CTR(counter_block(self._iv, offset))).decryptor()
        skip = offset % BLOCK
        if skip:
            decryptor.update(_ZEROS[:skip])
        return decryptor.update(data)
