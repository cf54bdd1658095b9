"""SASL on DataNode connections: when to negotiate, the handshake, the layer after it. Pure code.

When (Hadoop's SaslDataTransferClient, first match wins; decided from configuration and the
NameNode's server defaults, never guessed from a closed connection):

    1. the cluster encrypts data transfer (encryptDataTransfer) -> "encrypted": DIGEST-MD5 with
       the NameNode's data-encryption key, QOP auth-conf
    2. SIMPLE authentication                                     -> none
    3. the DataNode listens on a privileged port (< 1024)          -> none (the port is the proof)
    4. dfs.data.transfer.protection is set                         -> "general": DIGEST-MD5 with
       the block token, QOP from the protection
    5. otherwise                                                   -> none

The exchange, once per connection before its first op (messages are varint-delimited
DataTransferEncryptorMessageProto):

    C: de ad be ef  {SUCCESS, payload=""}
    S:              {SUCCESS, payload=DIGEST challenge}
    C:              {SUCCESS, payload=DIGEST response, cipherOption=[AES/CTR]?}
    S:              {SUCCESS, payload=rspauth, cipherOption=[AES/CTR, inKey, inIv, outKey, outIv]?}

What the stream becomes (`layer`):

    auth                      the plain stream
    auth-int / auth-conf      [u32 BE length][DIGEST token] frames, each way; frames do not follow
                              message boundaries, and sequence numbers and ciphers run on for
                              the connection's life
    auth-conf + AES/CTR       one AES-CTR stream per direction (keys unwrapped with DIGEST, inKey
                              first): the client encrypts with in*, decrypts with out*
"""

from __future__ import annotations

import base64
import struct

from google.protobuf.message import DecodeError

from hdfsfuse.errors import AuthenticationRequired, InvalidBlockToken, ProtocolError
from hdfsfuse.proto import datatransfer_pb2, hdfs_pb2, rpc_pb2
from hdfsfuse.security.sasl import DigestLayer, DigestMd5Client, SaslError, parse_protection
from hdfsfuse.wire import NeedData, delimited, read_delimited

MAGIC = b"\xde\xad\xbe\xef"
AES_SUITE = "AES/CTR/NoPadding"
MAX_MESSAGE = 1024 * 1024
MAX_FRAME = 16 * 1024 * 1024  # a DIGEST frame: a packet of up to io.file.buffer.size, and more

Message = datatransfer_pb2.DataTransferEncryptorMessageProto
SUCCESS = Message.SUCCESS
ERROR_UNKNOWN_KEY = Message.ERROR_UNKNOWN_KEY


class DataTransferSaslError(AuthenticationRequired):
    """The DataNode refused the handshake (or we refused the DataNode)."""


class UnknownEncryptionKey(DataTransferSaslError):
    """ERROR_UNKNOWN_KEY: the data-encryption key expired or rolled; fetch a new one and retry."""


class BlockTokenRefused(InvalidBlockToken):
    """The handshake refused the block token (expired, or its key rolled): refetch locations."""


def handshake_kind(*, kerberos: bool, encrypt: bool, protection: str, xfer_port: int) -> str:
    """ "encrypted", "general" or "" (no handshake), as the Java client decides."""
    if encrypt:
        return "encrypted"
    if not kerberos or xfer_port < 1024:
        return ""
    return "general" if protection.strip() else ""


def encryption_username(key: hdfs_pb2.DataEncryptionKeyProto) -> str:
    """`<keyId> <blockPoolId> <base64 nonce>`, keyId as Java's signed int."""
    key_id = key.keyId - (1 << 32) if key.keyId >= (1 << 31) else key.keyId
    return f"{key_id} {key.blockPoolId} {base64.b64encode(key.nonce).decode()}"


class DataTransferSaslClient:
    """One handshake: `start()`, then `receive(bytes)` until `done`; then `layer` (or None)."""

    def __init__(self, username: str, password: str, *, wanted: tuple[str, ...], offer_aes: bool,
                 peer: str, setting: str) -> None:
        key = setting.partition("=")[0]
        self._digest = DigestMd5Client(username, password, protocol="hdfs", server="0", wanted=wanted,
                                       peer=f"DataNode {peer}", setting=key)
        self._offer_aes = offer_aes and "auth-conf" in wanted
        self._buf = bytearray()
        self._step = 0
        self.peer = peer
        self.setting = setting  # the configuration that made us negotiate, for messages
        self.done = False
        self.qop = ""
        self.cipher = ""  # "AES/CTR" or the DIGEST cipher under auth-conf
        self.layer: StreamLayer | None = None

    @classmethod
    def general(cls, token: rpc_pb2.TokenProto, protection: str, cipher_suites: str, peer: str
                ) -> DataTransferSaslClient:
        username = base64.b64encode(token.identifier).decode()
        password = base64.b64encode(token.password).decode()
        return cls(username, password, wanted=parse_protection(protection, "dfs.data.transfer.protection"),
                   offer_aes=AES_SUITE in cipher_suites, peer=peer,
                   setting=f"dfs.data.transfer.protection={protection}")

    @classmethod
    def encrypted(cls, key: hdfs_pb2.DataEncryptionKeyProto, cipher_suites: str, peer: str) -> DataTransferSaslClient:
        return cls(encryption_username(key), base64.b64encode(key.encryptionKey).decode(), wanted=("auth-conf",),
                   offer_aes=AES_SUITE in cipher_suites, peer=peer, setting="dfs.encrypt.data.transfer=true")

    @property
    def layer_name(self) -> str:
        """What the handshake set up: auth, auth-int, auth-conf/<DIGEST cipher> or AES/CTR."""
        if self.cipher == "AES/CTR":
            return self.cipher
        return f"{self.qop}/{self.cipher}" if self.cipher else self.qop

    def start(self) -> bytes:
        return MAGIC + delimited(Message(status=SUCCESS, payload=b"").SerializeToString())

    def receive(self, data: bytes) -> bytes | None:
        """Feed DataNode bytes; returns what to send next, or None (need more, or done)."""
        self._buf += data
        try:
            raw, end = read_delimited(self._buf, 0, MAX_MESSAGE)
        except NeedData:
            return None
        del self._buf[:end]
        try:
            message = Message.FromString(raw)
        except DecodeError as e:
            raise ProtocolError(f"DataNode {self.peer} sent a bad SASL message: {e}") from None
        self._check_status(message)
        if self._step == 0:
            self._step = 1
            try:
                response = self._digest.respond(message.payload)
            except SaslError as e:
                raise DataTransferSaslError(str(e)) from None
            reply = Message(status=SUCCESS, payload=response)
            if self._offer_aes:
                reply.cipherOption.add(suite=hdfs_pb2.AES_CTR_NOPADDING)
            return delimited(reply.SerializeToString())
        if self._step == 1:
            self._step = 2
            self._digest.verify(message.payload)
            if self._buf:
                raise ProtocolError(f"DataNode {self.peer} sent data after its SASL success")
            self._finish(message)
            self.done = True
            return None
        raise ProtocolError(f"DataNode {self.peer} sent a SASL message after the handshake")

    def _check_status(self, message: Message) -> None:
        if message.status == SUCCESS:
            return
        text = message.message or "no reason given"
        if message.status == ERROR_UNKNOWN_KEY:
            raise UnknownEncryptionKey(f"DataNode {self.peer} does not know the data-encryption key: {text}")
        if message.accessTokenError:
            raise BlockTokenRefused(f"DataNode {self.peer} refused the block token: {text}")
        raise DataTransferSaslError(f"DataNode {self.peer} refused the SASL handshake ({self.setting}): {text}")

    def _finish(self, message: Message) -> None:
        self.qop = self._digest.qop
        digest = self._digest.layer
        options = [o for o in message.cipherOption if o.suite == hdfs_pb2.AES_CTR_NOPADDING]
        if options:
            if digest is None or self.qop != "auth-conf":
                raise ProtocolError(f"DataNode {self.peer} chose AES/CTR without auth-conf")
            option = options[0]
            in_key, out_key = digest.unwrap(option.inKey), digest.unwrap(option.outKey)  # inKey first
            if len(in_key) not in (16, 24, 32) or len(option.inIv) != 16 or len(option.outIv) != 16:
                raise ProtocolError(f"DataNode {self.peer} sent an AES/CTR option with bad key or IV sizes")
            self.cipher = "AES/CTR"
            self.layer = AesCtrLayer(in_key, option.inIv, out_key, option.outIv)
        elif message.cipherOption:
            raise ProtocolError(f"DataNode {self.peer} chose a cipher suite hdfsfuse did not offer")
        elif digest is not None:
            self.cipher = self._digest.cipher
            self.layer = DigestFramedLayer(digest)


class StreamLayer:
    """What a negotiated connection does to bytes: `seal` what we send, `open` what arrives."""

    # A layer that can open into the caller's buffer (`open_into`) says how much room it needs
    # beyond the input's length; None: its plaintext only comes out as new bytes (`open`).
    open_into_slack: int | None = None

    def seal(self, data: bytes) -> bytes:
        raise NotImplementedError

    def open(self, data: bytes) -> bytes:
        raise NotImplementedError

    def open_into(self, data: memoryview, out: memoryview) -> int:
        """The plaintext of `data` into `out` (at least `open_into_slack` bytes longer); its length."""
        raise NotImplementedError


class DigestFramedLayer(StreamLayer):
    """DIGEST-MD5 auth-int/auth-conf: [u32 BE length][token] frames each way (SaslOutputStream)."""

    def __init__(self, digest: DigestLayer) -> None:
        self._digest = digest
        self._buf = bytearray()

    def seal(self, data: bytes) -> bytes:
        token = self._digest.wrap(bytes(data))
        return struct.pack(">I", len(token)) + token

    def open(self, data: bytes) -> bytes:
        """Every complete frame's plaintext (b"" until one is complete)."""
        self._buf += data
        out = bytearray()
        while len(self._buf) >= 4:
            (n,) = struct.unpack_from(">I", self._buf)
            if n > MAX_FRAME:
                raise ProtocolError(f"a {n}-byte SASL frame from a DataNode exceeds {MAX_FRAME} bytes")
            if len(self._buf) < 4 + n:
                break
            token = bytes(self._buf[4 : 4 + n])
            del self._buf[: 4 + n]
            try:
                out += self._digest.unwrap(token)
            except SaslError as e:
                raise ProtocolError(f"a SASL frame from a DataNode failed its check: {e}") from None
        return bytes(out)


class AesCtrLayer(StreamLayer):
    """AES/CTR, one continuous stream per direction (counter = IV as a 128-bit integer, +1 per block)."""

    def __init__(self, in_key: bytes, in_iv: bytes, out_key: bytes, out_iv: bytes) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        except ImportError:
            raise DataTransferSaslError(
                "AES/CTR on DataNode connections needs the 'cryptography' package: pip install 'hdfsfuse[kerberos]'"
            ) from None

        self._encrypt = Cipher(algorithms.AES(in_key), modes.CTR(in_iv)).encryptor()
        self._decrypt = Cipher(algorithms.AES(out_key), modes.CTR(out_iv)).decryptor()

    def seal(self, data: bytes) -> bytes:
        return self._encrypt.update(data)

    open_into_slack = 15  # cryptography's update_into wants an AES block less a byte beyond the input

    def open(self, data: bytes) -> bytes:
        return self._decrypt.update(data)

    def open_into(self, data: memoryview, out: memoryview) -> int:
        return self._decrypt.update_into(data, out)
