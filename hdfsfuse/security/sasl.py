"""SASL DIGEST-MD5 (RFC 2831) as the JDK speaks it, for Hadoop token authentication. Pure code.

Token credentials (Hadoop's SaslRpcServer): username = base64(token identifier), password =
base64(token password). On Hadoop IPC the protocol is "" and the server "default", so the
realm is `default` and the digest-uri `/default`.

    server challenge   realm="default",nonce="N",qop="auth",charset=utf-8,algorithm=md5-sess
    client response    charset=utf-8,username="U",realm="default",nonce="N",nc=00000001,
                       cnonce="C",digest-uri="/default",maxbuf=65536,response=H,qop=auth
    server success     rspauth=H'          (checked: proves the server knew the password)

    H  = HEX(MD5( HEX(MD5(A1)) ":" nonce ":00000001:" cnonce ":" qop ":" HEX(MD5(A2)) ))
    A1 = MD5(user ":" realm ":" password) ":" nonce ":" cnonce        (MD5 raw, 16 bytes)
    A2 = "AUTHENTICATE:" digest-uri   (for H; the server's H' uses ":" digest-uri)

DIGEST-MD5 speaks auth, auth-int (`DigestLayer`: HMAC-MD5) and auth-conf (3des, rc4, des,
rc4-56, rc4-40, with `cryptography`). Kerberos (GSSAPI, RFC 4752)
negotiates its layer after the context is set up; `gss_layer_reply` is that choice:

    server offer   [bits: 1 none | 2 integrity | 4 privacy][3-byte BE max receive buffer]
    client reply   [one chosen bit][3-byte BE max receive buffer]   (both sent gss_wrap'ed)

Hadoop's `hadoop.rpc.protection` names map to SASL QOPs: authentication -> auth, integrity ->
auth-int, privacy -> auth-conf.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

from hdfsfuse.errors import AuthenticationRequired


class SaslError(AuthenticationRequired):
    """The SASL exchange failed or the peer could not prove itself."""


PROTECTION_QOPS = {"authentication": "auth", "integrity": "auth-int", "privacy": "auth-conf"}
QOP_NAMES = {qop: name for name, qop in PROTECTION_QOPS.items()}
QOP_BITS = {"auth": 0x01, "auth-int": 0x02, "auth-conf": 0x04}
RECEIVE_MAX = 65536  # what this client advertises it can receive in one wrapped token


def parse_protection(value: str, key: str = "hadoop.rpc.protection") -> tuple[str, ...]:
    """`privacy,integrity` -> ("auth-conf", "auth-int"), in the configured order."""
    levels = [v.strip().lower() for v in value.split(",") if v.strip()]
    if not levels or any(v not in PROTECTION_QOPS for v in levels):
        raise SaslError(f"{key}={value!r}: must be a list of authentication, integrity and privacy")
    return tuple(PROTECTION_QOPS[v] for v in levels)


def choose_qop(offered: list[str], wanted: tuple[str, ...] | None, peer: str,
               setting: str = "hadoop.rpc.protection") -> str:
    """The client's first wanted QOP the server offers; with nothing configured, the strongest."""
    if wanted is None:
        for qop in ("auth-conf", "auth-int", "auth"):
            if qop in offered:
                return qop
    else:
        for qop in wanted:
            if qop in offered:
                return qop
    have = ",".join(QOP_NAMES.get(q, q) for q in offered) or "nothing"
    want = ",".join(QOP_NAMES[q] for q in wanted) if wanted else "any"
    what = "RPC protection" if setting == "hadoop.rpc.protection" else "protection"
    raise SaslError(f"{peer} requires {what} {have}, but {setting} here is {want}")


def gss_layer_reply(offer: bytes, wanted: tuple[str, ...] | None, peer: str) -> tuple[str, bytes]:
    """(chosen QOP, the 4-byte reply) for a GSSAPI server's 4-byte security-layer offer."""
    if len(offer) != 4:
        raise SaslError(f"{peer} sent a {len(offer)}-byte GSSAPI security-layer offer (expected 4)")
    offered = [qop for qop, bit in QOP_BITS.items() if offer[0] & bit]
    qop = choose_qop(offered, wanted, peer)
    size = b"\x00\x00\x00" if qop == "auth" else RECEIVE_MAX.to_bytes(3, "big")
    return qop, bytes([QOP_BITS[qop]]) + size


def token_credentials(identifier: bytes, password: bytes) -> tuple[str, str]:
    """(username, password) for DIGEST-MD5 from a Hadoop token."""
    return base64.b64encode(identifier).decode(), base64.b64encode(password).decode()


def parse_directives(data: bytes) -> dict[str, str]:
    """`k=v,k="quoted, \\"escaped\\""` pairs; the first occurrence of a key wins."""
    text = data.decode("utf-8")
    out: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t,":
            i += 1
        if i >= n:
            break
        eq = text.find("=", i)
        if eq < 0:
            raise SaslError(f"malformed DIGEST-MD5 directive: {text[i:]!r}")
        key = text[i:eq].strip().lower()
        i = eq + 1
        if i < n and text[i] == '"':
            i += 1
            value = []
            while True:
                if i >= n:
                    raise SaslError("unterminated quoted string in a DIGEST-MD5 challenge")
                c = text[i]
                if c == "\\" and i + 1 < n:
                    value.append(text[i + 1])
                    i += 2
                    continue
                if c == '"':
                    i += 1
                    break
                value.append(c)
                i += 1
            val = "".join(value)
        else:
            end = text.find(",", i)
            end = n if end < 0 else end
            val = text[i:end].strip()
            i = end
        out.setdefault(key, val)
    return out


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _hex_md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


CIPHER_PREFERENCE = ("3des", "rc4", "des", "rc4-56", "rc4-40")  # the JDK client's order
_ZERO_HASH = ":" + "0" * 32


class DigestMd5Client:
    """One client-side DIGEST-MD5 authentication: `respond(challenge)`, then `verify(success)`.

    `wanted` QOPs (None: the strongest offered); after `verify`, `layer` is the integrity or
    privacy layer for auth-int / auth-conf, else None.
    """

    def __init__(self, username: str, password: str, *, protocol: str = "", server: str = "default",
                 cnonce: str | None = None, wanted: tuple[str, ...] | None = ("auth",), peer: str = "the server",
                 setting: str = "hadoop.rpc.protection") -> None:
        self.username = username
        self.password = password
        self.digest_uri = f"{protocol}/{server}"
        self.cnonce = cnonce or base64.b64encode(os.urandom(24)).decode()
        self.wanted = wanted
        self.peer = peer
        self.setting = setting  # the configuration key behind `wanted`, for messages
        self.qop = ""
        self.cipher = ""
        self.layer: DigestLayer | None = None
        self._expected_rspauth: str | None = None
        self._ha1 = b""

    def respond(self, challenge: bytes) -> bytes:
        d = parse_directives(challenge)
        nonce = d.get("nonce")
        if not nonce:
            raise SaslError("the DIGEST-MD5 challenge has no nonce")
        if d.get("algorithm", "").lower() != "md5-sess":
            raise SaslError(f"unsupported DIGEST-MD5 algorithm {d.get('algorithm')!r}")
        offered = [q.strip() for q in d.get("qop", "auth").split(",")]
        qop = self.qop = choose_qop(offered, self.wanted, self.peer, self.setting)
        if qop == "auth-conf":
            ciphers = [c.strip() for c in d.get("cipher", "").split(",")]
            self.cipher = next((c for c in CIPHER_PREFERENCE if c in ciphers), "")
            if not self.cipher:
                raise SaslError(f"{self.peer} offers DIGEST-MD5 ciphers {ciphers}; hdfsfuse knows {CIPHER_PREFERENCE}")
        realm = d.get("realm", "")
        a1 = hashlib.md5(f"{self.username}:{realm}:{self.password}".encode()).digest()
        a1 += f":{nonce}:{self.cnonce}".encode()
        self._ha1 = hashlib.md5(a1).digest()
        ha1 = self._ha1.hex()
        suffix = "" if qop == "auth" else _ZERO_HASH

        def kd(a2: str) -> str:
            return _hex_md5(f"{ha1}:{nonce}:00000001:{self.cnonce}:{qop}:{_hex_md5(a2.encode())}".encode())

        response = kd(f"AUTHENTICATE:{self.digest_uri}{suffix}")
        self._expected_rspauth = kd(f":{self.digest_uri}{suffix}")
        parts = [
            "charset=utf-8", f"username={_quote(self.username)}", f"realm={_quote(realm)}",
            f"nonce={_quote(nonce)}", "nc=00000001", f"cnonce={_quote(self.cnonce)}",
            f"digest-uri={_quote(self.digest_uri)}", f"maxbuf={RECEIVE_MAX}", f"response={response}", f"qop={qop}",
        ]
        if self.cipher:
            parts.append(f"cipher={_quote(self.cipher)}")
        return ",".join(parts).encode()

    def verify(self, success: bytes) -> None:
        """Check the server's rspauth (mutual authentication); set up the layer."""
        if self._expected_rspauth is None:
            raise SaslError("DIGEST-MD5 success before any challenge")
        got = parse_directives(success).get("rspauth", "")
        if not hmac.compare_digest(got, self._expected_rspauth):
            raise SaslError("the server's DIGEST-MD5 rspauth does not match: it does not know the token")
        if self.qop != "auth":
            self.layer = DigestLayer(self._ha1, self.cipher if self.qop == "auth-conf" else "")


def _des_key(seven: bytes) -> bytes:
    """56 key bits spread over 8 bytes, 7 per byte, low bit odd parity (the JDK's makeDesKeys)."""
    bits = int.from_bytes(seven, "big")
    out = bytearray()
    for i in range(8):
        b = ((bits >> (49 - 7 * i)) & 0x7F) << 1
        out.append(b | (bin(b).count("1") % 2 == 0))
    return bytes(out)


class DigestLayer:
    """The DIGEST-MD5 integrity (auth-int) or confidentiality (auth-conf) layer (client side,
    or with `server=True` the server's mirror image).

    integrity token:  msg | MAC(10) | 00 01 | seq(4 BE)       MAC = HMAC-MD5(Ki, seq | msg)[:10]
    privacy token:    E(msg | pad | MAC) | 00 01 | seq        pad: k bytes of k (block ciphers)

    Each direction has its own key, sequence number (from 0) and cipher state, which runs on
    across messages for the connection's life.
    """

    def __init__(self, ha1: bytes, cipher: str, *, server: bool = False) -> None:
        kic = hashlib.md5(ha1 + b"Digest session key to client-to-server signing key magic constant").digest()
        kis = hashlib.md5(ha1 + b"Digest session key to server-to-client signing key magic constant").digest()
        self._sign, self._check = (kis, kic) if server else (kic, kis)
        self._send_seq = 0
        self._recv_seq = 0
        self._block = cipher in ("3des", "des")
        self._encryptor = self._decryptor = None
        if cipher:
            n = {"rc4-40": 5, "rc4-56": 7}.get(cipher, 16)
            kcc = hashlib.md5(ha1[:n] + b"Digest H(A1) to client-to-server sealing key magic constant").digest()
            kcs = hashlib.md5(ha1[:n] + b"Digest H(A1) to server-to-client sealing key magic constant").digest()
            if server:
                kcc, kcs = kcs, kcc
            self._encryptor = _cipher(cipher, kcc).encryptor()
            self._decryptor = _cipher(cipher, kcs).decryptor()

    def wrap(self, msg: bytes) -> bytes:
        seq = self._send_seq.to_bytes(4, "big")
        self._send_seq += 1
        mac = hmac.new(self._sign, seq + msg, "md5").digest()[:10]
        if self._encryptor is None:
            return msg + mac + b"\x00\x01" + seq
        pad = b""
        if self._block:
            k = 8 - (len(msg) + 10) % 8
            pad = bytes([k]) * k
        return self._encryptor.update(msg + pad + mac) + b"\x00\x01" + seq

    def unwrap(self, token: bytes) -> bytes:
        if len(token) < 16:
            raise SaslError(f"a {len(token)}-byte DIGEST-MD5 token is too short")
        body, kind, seq = token[:-6], token[-6:-4], token[-4:]
        if kind != b"\x00\x01":
            raise SaslError("a DIGEST-MD5 token of an unknown type")
        if int.from_bytes(seq, "big") != self._recv_seq:
            raise SaslError(f"DIGEST-MD5 token out of sequence (got {int.from_bytes(seq, 'big')}, "
                            f"expected {self._recv_seq})")
        self._recv_seq += 1
        if self._decryptor is None:
            msg, mac = body[:-10], body[-10:]
        else:
            plain = self._decryptor.update(body)
            msg, mac = plain[:-10], plain[-10:]
            if self._block:
                k = msg[-1] if msg else 0
                if not 1 <= k <= 8 or msg[-k:] != bytes([k]) * k:
                    raise SaslError("a DIGEST-MD5 token with bad padding")
                msg = msg[:-k]
        if not hmac.compare_digest(mac, hmac.new(self._check, seq + msg, "md5").digest()[:10]):
            raise SaslError("a DIGEST-MD5 token failed its integrity check")
        return msg


def _cipher(name: str, key: bytes):  # type: ignore[no-untyped-def]
    """The JDK's DIGEST-MD5 ciphers, from the `cryptography` package (the kerberos extra)."""
    try:
        from cryptography.hazmat.decrepit.ciphers.algorithms import ARC4, TripleDES
        from cryptography.hazmat.primitives.ciphers import Cipher, modes
    except ImportError:
        raise SaslError("RPC privacy with a token needs the 'cryptography' package (hdfsfuse[kerberos])") from None
    if name.startswith("rc4"):
        return Cipher(ARC4(key), mode=None)
    k1, k2 = _des_key(key[0:7]), _des_key(key[7:14])
    des_key = k1 + k2 + k1 if name == "3des" else k1 * 3
    return Cipher(TripleDES(des_key), modes.CBC(key[8:16]))


class DigestMechanism:
    """SASL TOKEN: DIGEST-MD5 with a Hadoop token, in the shape `hdfsfuse.namenode.rpc` drives."""

    method = "TOKEN"
    mechanism = "DIGEST-MD5"

    def __init__(self, identifier: bytes, password: bytes, *, protocol: str, server: str,
                 challenge: bytes, peer: str, wanted: tuple[str, ...] | None = None) -> None:
        self._client = DigestMd5Client(*token_credentials(identifier, password), protocol=protocol, server=server,
                                       wanted=wanted, peer=peer)
        self._challenge = challenge
        self.peer = peer

    @property
    def qop(self) -> str:
        return self._client.qop

    @property
    def layer(self) -> DigestLayer | None:  # type: ignore[override]
        return self._client.layer

    def start(self) -> bytes:
        return self._client.respond(self._challenge)

    def evaluate(self, challenge: bytes) -> bytes:
        raise SaslError(f"{self.peer} sent a second DIGEST-MD5 challenge")

    def finish(self, token: bytes) -> None:
        self._client.verify(token)
