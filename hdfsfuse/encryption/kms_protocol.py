"""The KMS's REST protocol, sans I/O: URIs, the decrypt call, HTTP/1.1 framing, answers and errors.

    POST <kms>/v1/keyversion/<ezKeyVersionName>/_eek?eek_op=decrypt     (Content-Type: application/json)
         {"name": <keyName>, "iv": b64(file IV), "material": b64(EDEK)}
    200  {"name": ..., "versionName": "EK", "material": <DEK, URL-safe base64 without padding>}

The file's own key version is always sent: the KMS answers an EDEK sent with another version of
the same key with status 200 and a wrong key. Errors come as {"RemoteException": {"message",
"exception", "javaClassName"}}: 403 for a key ACL, 401 for missing authentication, 400 for a bad
request, 500 otherwise (a denial can hide in a 500's text).

Authentication, one of: `user.name=U` (simple), `Authorization: Negotiate <token>` (SPNEGO, then
the `hadoop.auth` cookie it sets), or a delegation token in `X-Hadoop-Delegation-Token`; a proxy
acting for a user adds `doAs=U`.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import urllib.parse

from hdfsfuse.encryption.info import KEY_LENGTHS, FileEncryption
from hdfsfuse.errors import AccessDenied, AuthenticationRequired, ConfigError, HdfsError, KeyUnavailable
from hdfsfuse.proto import rpc_pb2
from hdfsfuse.security.tokens import write_vlong

KMS_TOKEN_KIND = "kms-dt"
MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class KmsEndpoints:
    """A KMS provider URI, `kms://http@h1;h2:9600/kms`: one base URL per host (they share the port)."""

    uri: str
    scheme: str  # http or https
    hosts: tuple[str, ...]
    port: int
    path: str

    @classmethod
    def parse(cls, uri: str) -> KmsEndpoints:
        m = re.fullmatch(r"kms://(https?)@([^/:]+)(?::(\d+))?(/[^?#]*)?", uri.strip())
        hosts = tuple(h for h in m.group(2).split(";") if h) if m else ()
        if m is None or not hosts:
            raise ConfigError(f"key provider {uri!r} is not a KMS URI (kms://http@HOST[;HOST2...]:PORT/kms)")
        scheme = m.group(1)
        port = int(m.group(3)) if m.group(3) else (443 if scheme == "https" else 80)
        if not 0 < port < 65536:
            raise ConfigError(f"key provider {uri!r}: port {port} is out of range")
        return cls(uri=uri.strip(), scheme=scheme, hosts=hosts, port=port, path=(m.group(4) or "/kms").rstrip("/"))

    def url(self, host: str) -> str:
        return f"{self.scheme}://{host}:{self.port}{self.path}"


def provider_uri(setting: str) -> str | None:
    """The KMS among hadoop.security.key.provider.path's comma list (None: no KMS is named)."""
    for item in setting.split(","):
        if item.strip().startswith("kms://"):
            return item.strip()
    return None


@dataclasses.dataclass(frozen=True)
class KmsRequest:
    method: str
    target: str  # path and query
    headers: tuple[tuple[str, str], ...]
    body: bytes


def decrypt_request(endpoints: KmsEndpoints, info: FileEncryption, *, user: str | None = None,
                    do_as: str | None = None, headers: tuple[tuple[str, str], ...] = ()) -> KmsRequest:
    """The call that turns `info`'s EDEK into its data key. `user`: simple auth as that user;
    `do_as`: a proxy (the mount's principal) asking for that user; `headers`: other authentication."""
    query = {"eek_op": "decrypt"}
    if user is not None:
        query["user.name"] = user
    if do_as is not None:
        query["doAs"] = do_as
    target = (f"{endpoints.path}/v1/keyversion/{urllib.parse.quote(info.key_version, safe='')}/_eek?"
              + urllib.parse.urlencode(query))
    body = json.dumps({"name": info.key_name, "iv": base64.b64encode(info.iv).decode(),
                       "material": base64.b64encode(info.edek).decode()}).encode()
    return KmsRequest("POST", target, (("Content-Type", "application/json"), *headers), body)


def encode_request(request: KmsRequest, host: str, port: int) -> bytes:
    lines = [f"{request.method} {request.target} HTTP/1.1", f"Host: {host}:{port}", "Accept: application/json",
             f"Content-Length: {len(request.body)}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in request.headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + request.body


class HttpProtocolError(HdfsError):
    """The KMS's answer is not HTTP/1.1 as expected."""


@dataclasses.dataclass
class HttpResponse:
    status: int = 0
    reason: str = ""
    headers: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    body: bytes = b""

    def header(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]


class ResponseParser:
    """Bytes of one HTTP/1.1 answer in (`feed`), the answer out once `complete` (or at `eof`).

    Bodies by Content-Length, chunked, or to the end of the connection (we always ask it to close)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self.response: HttpResponse | None = None
        self.complete = False
        self._length: int | None = None
        self._chunked = False

    def feed(self, data: bytes) -> None:
        self._buf += data
        if self.response is None:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > MAX_HEADER_BYTES:
                    raise HttpProtocolError("the KMS's answer headers are over 64 KiB")
                return
            self.response = self._head(bytes(self._buf[:end]))
            del self._buf[: end + 4]
        if len(self._buf) > MAX_BODY_BYTES + 64 * 1024:
            raise HttpProtocolError("the KMS's answer is over 1 MiB")
        self._try_body()

    def eof(self) -> HttpResponse:
        """The connection ended: the answer, if it is whole."""
        if self.response is None:
            raise HttpProtocolError("the KMS closed the connection before answering")
        if not self.complete:
            if self._length is not None or self._chunked:
                raise HttpProtocolError("the KMS closed the connection in the middle of its answer")
            self.response.body = bytes(self._buf)
            self.complete = True
        return self.response

    def _head(self, head: bytes) -> HttpResponse:
        lines = head.decode("latin-1").split("\r\n")
        m = re.fullmatch(r"HTTP/1\.[01] (\d{3})(?: (.*))?", lines[0])
        if m is None:
            raise HttpProtocolError(f"the KMS answered with no HTTP status line: {lines[0][:80]!r}")
        response = HttpResponse(status=int(m.group(1)), reason=m.group(2) or "")
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise HttpProtocolError(f"the KMS answered with a bad header line: {line[:80]!r}")
            response.headers.append((name.strip(), value.strip()))
        encoding = ",".join(response.header("Transfer-Encoding")).lower()
        self._chunked = "chunked" in encoding
        lengths = response.header("Content-Length")
        if lengths and not self._chunked:
            if not lengths[0].isdigit() or int(lengths[0]) > MAX_BODY_BYTES:
                raise HttpProtocolError(f"the KMS's answer has Content-Length {lengths[0][:20]!r}")
            self._length = int(lengths[0])
        if response.status in (204, 304) or 100 <= response.status < 200:
            self._length = 0
        return response

    def _try_body(self) -> None:
        assert self.response is not None
        if self._length is not None and not self._chunked:
            if len(self._buf) >= self._length:
                self.response.body = bytes(self._buf[: self._length])
                self.complete = True
            return
        if not self._chunked:
            return
        body, pos = bytearray(), 0
        while True:
            end = self._buf.find(b"\r\n", pos)
            if end < 0:
                return
            size_text = bytes(self._buf[pos:end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise HttpProtocolError(f"the KMS sent a bad chunk size {size_text[:20]!r}") from None
            if size == 0:
                if self._buf.find(b"\r\n", end + 2) < 0:
                    return  # the line that ends the body is not in yet
                self.response.body = bytes(body)
                self.complete = True
                return
            if len(self._buf) < end + 2 + size + 2:
                return
            body += self._buf[end + 2 : end + 2 + size]
            pos = end + 2 + size + 2


def data_key(response: HttpResponse, info: FileEncryption) -> bytes:
    """The data key from a 200 answer to `decrypt_request`."""
    try:
        answer = json.loads(response.body)
        material = answer["material"]
        key = base64.urlsafe_b64decode(material + "=" * (-len(material) % 4))
    except (ValueError, KeyError, TypeError) as e:
        raise HttpProtocolError(f"the KMS's answer for key {info.key_version} is not a key ({e})") from None
    if len(key) not in KEY_LENGTHS:
        raise HttpProtocolError(f"the KMS gave a {len(key)}-byte key for {info.key_version} "
                                "(AES needs 16 or 32)")
    return key


def remote_exception(response: HttpResponse) -> tuple[str, str]:
    """(Java exception class, message) of an error answer, as far as it says."""
    try:
        remote = json.loads(response.body)["RemoteException"]
        return str(remote.get("javaClassName") or remote.get("exception") or ""), str(remote.get("message", ""))
    except (ValueError, KeyError, TypeError, AttributeError):
        text = re.sub(r"<[^>]+>", " ", response.body.decode("utf-8", "replace"))
        return "", " ".join(text.split())[:200] or response.reason


def error_for(response: HttpResponse, what: str) -> HdfsError:
    """The error an unsuccessful answer means. `what` names the key, the KMS and the user."""
    java_class, message = remote_exception(response)
    detail = f"{what}: HTTP {response.status}" + (f", {message}" if message else "")
    if response.status == 403 or "AuthorizationException" in java_class + message:
        return AccessDenied(f"{what}: refused by the KMS ({message or response.status})")
    if response.status == 401:
        return AuthenticationRequired(f"{what}: the KMS asks for authentication ({message or 'HTTP 401'})")
    return KeyUnavailable(detail)


def auth_cookie(response: HttpResponse) -> str | None:
    """The `hadoop.auth` cookie a successful authentication sets (sent back instead of SPNEGO)."""
    for value in response.header("Set-Cookie"):
        name, _, rest = value.partition("=")
        if name.strip() == "hadoop.auth":
            cookie = rest.split(";", 1)[0]
            return cookie if cookie not in ("", '""') else None
    return None


def negotiate_token(response: HttpResponse) -> bytes | None:
    """The server's SPNEGO answer token (mutual authentication), if it sent one."""
    for value in response.header("WWW-Authenticate"):
        scheme, _, token = value.partition(" ")
        if scheme.lower() == "negotiate" and token.strip():
            return base64.b64decode(token.strip())
    return None


def token_url_string(token: rpc_pb2.TokenProto) -> str:
    """A delegation token as Hadoop's Token.encodeToUrlString: its Writable bytes in URL-safe base64."""
    def text(value: str) -> bytes:
        raw = value.encode()
        return write_vlong(len(raw)) + raw

    raw = (write_vlong(len(token.identifier)) + token.identifier + write_vlong(len(token.password))
           + token.password + text(token.kind) + text(token.service))
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def select_kms_token(tokens: list[rpc_pb2.TokenProto], endpoints: KmsEndpoints,
                     addresses: set[str]) -> rpc_pb2.TokenProto | None:
    """The kms-dt token for this KMS: service = its URI (how Java stores it), else an ip:port of it."""
    kms_tokens = [t for t in tokens if t.kind == KMS_TOKEN_KIND]
    for t in kms_tokens:
        if t.service == endpoints.uri:
            return t
    for t in kms_tokens:
        if t.service in addresses:
            return t
    return kms_tokens[0] if len(kms_tokens) == 1 and not kms_tokens[0].service else None
