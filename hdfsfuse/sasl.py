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

Only the `auth` quality of protection is spoken here (no integrity or privacy layer).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

from hdfsfuse.errors import AuthenticationRequired


class SaslError(AuthenticationRequired):
    """The SASL exchange failed or the peer could not prove itself."""


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
