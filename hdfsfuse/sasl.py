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

DIGEST-MD5 speaks only the `auth` quality of protection here. Kerberos (GSSAPI, RFC 4752)
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


def choose_qop(offered: list[str], wanted: tuple[str, ...] | None, peer: str) -> str:
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
    raise SaslError(f"{peer} requires RPC protection {have}, but hadoop.rpc.protection here is {want}")


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


class DigestMd5Client:
    """One client-side DIGEST-MD5 authentication: `respond(challenge)`, then `verify(success)`."""

    def __init__(self, username: str, password: str, *, protocol: str = "", server: str = "default",
                 cnonce: str | None = None) -> None:
        self.username = username
        self.password = password
        self.digest_uri = f"{protocol}/{server}"
        self.cnonce = cnonce or base64.b64encode(os.urandom(24)).decode()
        self._expected_rspauth: str | None = None

    def respond(self, challenge: bytes) -> bytes:
        d = parse_directives(challenge)
        nonce = d.get("nonce")
        if not nonce:
            raise SaslError("the DIGEST-MD5 challenge has no nonce")
        if d.get("algorithm", "").lower() != "md5-sess":
            raise SaslError(f"unsupported DIGEST-MD5 algorithm {d.get('algorithm')!r}")
        offered = [q.strip() for q in d.get("qop", "auth").split(",")]
        if "auth" not in offered:
            raise SaslError(f"the server requires SASL quality of protection {offered}; hdfsfuse speaks only auth here")
        realm = d.get("realm", "")
        a1 = hashlib.md5(f"{self.username}:{realm}:{self.password}".encode()).digest()
        a1 += f":{nonce}:{self.cnonce}".encode()
        ha1 = _hex_md5(a1)

        def kd(a2: str) -> str:
            return _hex_md5(f"{ha1}:{nonce}:00000001:{self.cnonce}:auth:{_hex_md5(a2.encode())}".encode())

        response = kd(f"AUTHENTICATE:{self.digest_uri}")
        self._expected_rspauth = kd(f":{self.digest_uri}")
        parts = [
            "charset=utf-8", f"username={_quote(self.username)}", f"realm={_quote(realm)}",
            f"nonce={_quote(nonce)}", "nc=00000001", f"cnonce={_quote(self.cnonce)}",
            f"digest-uri={_quote(self.digest_uri)}", "maxbuf=65536", f"response={response}", "qop=auth",
        ]
        return ",".join(parts).encode()

    def verify(self, success: bytes) -> None:
        """Check the server's rspauth (mutual authentication)."""
        if self._expected_rspauth is None:
            raise SaslError("DIGEST-MD5 success before any challenge")
        got = parse_directives(success).get("rspauth", "")
        if not hmac.compare_digest(got, self._expected_rspauth):
            raise SaslError("the server's DIGEST-MD5 rspauth does not match: it does not know the token")


class DigestMechanism:
    """SASL TOKEN: DIGEST-MD5 with a Hadoop token, in the shape `hdfsfuse.rpc` drives."""

    method = "TOKEN"
    mechanism = "DIGEST-MD5"
    layer = None

    def __init__(self, identifier: bytes, password: bytes, *, protocol: str, server: str,
                 challenge: bytes, peer: str) -> None:
        self._client = DigestMd5Client(*token_credentials(identifier, password), protocol=protocol, server=server)
        self._challenge = challenge
        self.peer = peer

    def start(self) -> bytes:
        return self._client.respond(self._challenge)

    def evaluate(self, challenge: bytes) -> bytes:
        raise SaslError(f"{self.peer} sent a second DIGEST-MD5 challenge")

    def finish(self, token: bytes) -> None:
        self._client.verify(token)
