"""Asking a KMS for a file's data key: the trio adapter over `kms_protocol`. Does I/O.

One short HTTP/1.1 exchange per call (data keys are cached by the caller, so calls are rare).
Every call is bounded (`connect_timeout` to reach a host, `total_timeout` for the whole call).
A URI with several hosts fails over as Hadoop's LoadBalancingKMSClientProvider does: the first
host tried moves round, and a host that cannot be reached or fails (5xx) passes the call to the
next; a refusal (401, 403) is final.

Authentication follows the identity that opens the file (its `RpcAuth`):
    a Kerberos login   SPNEGO, then the hadoop.auth cookie the KMS sets (kept per host and
                       identity); a proxy login adds doAs=<user>
    a delegation token the kms-dt token of this KMS from the same token file, if there is one
    otherwise          simple: user.name=<user>
"""

from __future__ import annotations

import base64
import dataclasses
import ssl

import trio

from hdfsfuse.encryption.info import FileEncryption
from hdfsfuse.encryption.kms_protocol import (
    HttpProtocolError,
    HttpResponse,
    KmsEndpoints,
    KmsRequest,
    ResponseParser,
    auth_cookie,
    data_key,
    decrypt_request,
    encode_request,
    error_for,
    negotiate_token,
    select_kms_token,
    token_url_string,
)
from hdfsfuse.errors import AuthenticationRequired, HdfsError, KeyUnavailable
from hdfsfuse.proto import rpc_pb2
from hdfsfuse.security.credentials import RpcAuth, canonical_hostname
from hdfsfuse.security.kerberos import HttpNegotiation


@dataclasses.dataclass(frozen=True)
class KmsTimeouts:
    connect: float = 5.0
    total: float = 30.0


class KmsClient:
    """One KMS (its URI's hosts). `tokens`: the mount's delegation tokens (a kms-dt among them is used
    when the identity has no Kerberos login). `ca_file`: for https, instead of the system's CAs."""

    def __init__(self, endpoints: KmsEndpoints, *, tokens: list[rpc_pb2.TokenProto] | None = None,
                 timeouts: KmsTimeouts | None = None, ca_file: str | None = None) -> None:
        self.endpoints = endpoints
        self.timeouts = timeouts or KmsTimeouts()
        self._tokens = tokens or []
        self._ca_file = ca_file
        self._ssl: ssl.SSLContext | None = None
        self._first = 0
        self._cookies: dict[tuple[str, str], str] = {}  # (host, identity) -> hadoop.auth cookie

    async def data_key(self, info: FileEncryption, auth: RpcAuth, path: str) -> bytes:
        """The data key of `info`'s EDEK, asked as `auth`'s identity. Raises AccessDenied (a key ACL),
        AuthenticationRequired, or KeyUnavailable (no host answered in time, or failed)."""
        what = f"{path}: key {info.key_version} from KMS {self.endpoints.uri} as {auth.description}"
        hosts = self.endpoints.hosts
        start, self._first = self._first, (self._first + 1) % len(hosts)
        failures: list[str] = []
        with trio.move_on_after(self.timeouts.total):
            for i in range(len(hosts)):
                host = hosts[(start + i) % len(hosts)]
                try:
                    return await self._ask(host, info, auth, what)
                except (OSError, trio.BrokenResourceError, trio.TooSlowError, HttpProtocolError, KeyUnavailable) as e:
                    failures.append(f"{host}: {_reason(e, what)}")
        if not failures:
            failures.append(f"no answer within {self.timeouts.total:g}s")
        raise KeyUnavailable(f"{what}: the KMS could not be asked ({'; '.join(failures)})")

    async def _ask(self, host: str, info: FileEncryption, auth: RpcAuth, what: str) -> bytes:
        identity = auth.description
        if auth.kerberos is None and auth.token is not None:
            token = select_kms_token(self._tokens, self.endpoints, {f"{host}:{self.endpoints.port}"})
            if token is None:
                raise AuthenticationRequired(f"{what}: the token file holds no KMS delegation token (kms-dt) "
                                             f"for {self.endpoints.uri}")
            request = decrypt_request(self.endpoints, info,
                                      headers=(("X-Hadoop-Delegation-Token", token_url_string(token)),))
            return self._key_from(await self._exchange(host, request), info, what)
        if auth.kerberos is None:
            request = decrypt_request(self.endpoints, info, user=auth.user)
            return self._key_from(await self._exchange(host, request), info, what)
        do_as = auth.user if auth.proxy else None
        cookie = self._cookies.get((host, identity))
        if cookie is not None:
            request = decrypt_request(self.endpoints, info, do_as=do_as,
                                      headers=(("Cookie", f"hadoop.auth={cookie}"),))
            response = await self._exchange(host, request)
            if response.status != 401:
                return self._key_from(response, info, what, host=host, identity=identity)
            del self._cookies[(host, identity)]  # expired: negotiate again
        service_host = await trio.to_thread.run_sync(canonical_hostname, host, abandon_on_cancel=True)
        negotiation = HttpNegotiation(auth.kerberos, service_host)
        first = await trio.to_thread.run_sync(negotiation.start, abandon_on_cancel=True)
        request = decrypt_request(self.endpoints, info, do_as=do_as,
                                  headers=(("Authorization", "Negotiate " + _b64(first)),))
        response = await self._exchange(host, request)
        if response.status == 200:
            negotiation.finish(negotiate_token(response))
        return self._key_from(response, info, what, host=host, identity=identity)

    def _key_from(self, response: HttpResponse, info: FileEncryption, what: str, *, host: str = "",
                  identity: str = "") -> bytes:
        if response.status != 200:
            raise error_for(response, what)
        key = data_key(response, info)
        cookie = auth_cookie(response)
        if cookie is not None and host:
            self._cookies[(host, identity)] = cookie
        return key

    async def _exchange(self, host: str, request: KmsRequest) -> HttpResponse:
        with trio.fail_after(self.timeouts.connect):
            stream: trio.abc.Stream = await trio.open_tcp_stream(host, self.endpoints.port)
        try:
            if self.endpoints.scheme == "https":
                stream = trio.SSLStream(stream, self._ssl_context(), server_hostname=host, https_compatible=True)
                with trio.fail_after(self.timeouts.connect):
                    await stream.do_handshake()
            await stream.send_all(encode_request(request, host, self.endpoints.port))
            parser = ResponseParser()
            while not parser.complete:
                data = await stream.receive_some(65536)
                if not data:
                    return parser.eof()
                parser.feed(data)
            assert parser.response is not None
            return parser.response
        finally:
            await trio.aclose_forcefully(stream)

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=self._ca_file)
        return self._ssl


def _b64(token: bytes) -> str:
    return base64.b64encode(token).decode()


def _reason(e: BaseException, what: str) -> str:
    if isinstance(e, trio.TooSlowError):
        return "no connection within the connect timeout"
    if isinstance(e, HdfsError):
        text = str(e)
        return text[len(what) + 2 :] if text.startswith(what + ": ") else text
    cause = e.__cause__  # trio's failed connect: the attempts' errors, grouped
    while isinstance(cause, BaseExceptionGroup) and cause.exceptions:
        cause = cause.exceptions[0]
    if isinstance(e, OSError) and not e.strerror and isinstance(cause, OSError) and cause.strerror:
        return cause.strerror
    if isinstance(cause, ssl.SSLCertVerificationError):  # trio.SSLStream's BrokenResourceError
        return f"TLS: {cause.verify_message} (trust its CA: -o kms_ca_file=FILE, or the system's store)"
    if isinstance(cause, ssl.SSLError):
        return f"TLS: {cause.reason or cause}"
    return e.strerror if isinstance(e, OSError) and e.strerror else f"{type(e).__name__}: {e}"
