"""Kerberos for Hadoop IPC: logins (keytab, ticket cache) and the GSSAPI SASL mechanism.

Owns every call into MIT krb5 (python-gssapi). These calls block (a login or the first
context step may talk to the KDC), so the trio adapter (`hdfsfuse.namenode.rpc`) runs `acquire` and
`GssapiMechanism.start` in threads. `wrap`/`unwrap` are local and fast.

Logins are re-acquired before each new connection, never cached across dials: MIT refreshes
a keytab login's TGT past half its life, and a ticket cache renewed by `kinit` is read again.
A keytab login lives in a private in-memory cache (`MEMORY:`), never the user's.

The exchange with a NameNode (Hadoop's SaslRpcClient, mutual authentication):

    INITIATE  {AP-REQ}          ->
              <-  CHALLENGE {AP-REP}            the context is complete
    RESPONSE  {}                ->
              <-  CHALLENGE {wrap(offer)}       security layers + max buffer (sasl.gss_layer_reply)
    RESPONSE  {wrap(choice)}    ->
              <-  SUCCESS                       then every frame is WRAP'ed unless QOP is auth
"""

from __future__ import annotations

import itertools
import os
import re

from hdfsfuse.errors import AuthenticationRequired

try:
    import gssapi
    import gssapi.exceptions
except ImportError:  # pragma: no cover - gssapi is a declared dependency; a clear error if missing
    gssapi = None  # type: ignore[assignment]

from hdfsfuse.security import sasl

_memory_caches = itertools.count()


class KerberosError(AuthenticationRequired):
    """No usable Kerberos credentials, or the KDC or a server refused them."""


def _require_gssapi() -> None:
    if gssapi is None:
        raise KerberosError("Kerberos needs the python 'gssapi' package: pip install 'hdfsfuse[kerberos]'")


# GSS/krb5 message fragments -> what the user should do about it.
_CAUSES = [
    (r"No Kerberos credentials available|No credentials cache found|Credentials cache file .* not found",
     "no Kerberos ticket: run kinit, or mount with -o keytab=FILE,principal=NAME"),
    (r"[Tt]icket expired|credentials have expired|Credentials expired",
     "the Kerberos ticket has expired: run kinit again (or use a keytab)"),
    (r"Keytab contains no suitable keys|No key table entry found",
     "the keytab holds no key for this principal"),
    (r"Key table file .* not found", "the keytab file does not exist"),
    (r"Cannot find KDC for realm|Cannot resolve network address for KDC",
     "no KDC is configured for this realm (check krb5.conf and the principal's realm)"),
    (r"Cannot contact any KDC", "cannot reach the KDC (is it running, and is krb5.conf's kdc right?)"),
    (r"Clock skew too great", "this host's clock differs from the KDC's by more than the allowed skew"),
    (r"Server krbtgt/\S+ not found in Kerberos database",
     "the KDC knows no path to the server's realm (check the realm of dfs.namenode.kerberos.principal)"),
    (r"Server .* not found in Kerberos database",
     "the service principal is unknown to the KDC (check dfs.namenode.kerberos.principal)"),
    (r"Client .* not found in Kerberos database", "the client principal does not exist in the KDC"),
    (r"Preauthentication failed|Password incorrect|Decrypt integrity check failed",
     "the key was refused by the KDC (stale keytab?)"),
]


def explain(e: BaseException, what: str) -> KerberosError:
    """One clear line for a GSS/krb5 failure: what failed, the cause, and the library's words."""
    detail = _gss_text(e)
    for pattern, cause in _CAUSES:
        if re.search(pattern, detail):
            return KerberosError(f"{what}: {cause} ({detail})")
    return KerberosError(f"{what}: {detail}")


def _gss_text(e: BaseException) -> str:
    if gssapi is not None and isinstance(e, gssapi.exceptions.GSSError):
        try:
            text = e.gen_message()
        except Exception:
            text = str(e)
        # gssapi's text is "Major (...): ..., Minor (...): ..."; keep the informative minor part.
        minor = re.search(r"Minor \(\d+\): (.*)", text)
        return (minor.group(1) if minor else text).strip()
    return str(e)


class KerberosLogin:
    """Where Kerberos credentials come from. `acquire()` blocks; call it from a thread."""

    description = "Kerberos"

    def acquire(self) -> gssapi.Credentials:
        raise NotImplementedError

    def _check(self, creds: gssapi.Credentials) -> gssapi.Credentials:
        expired = KerberosError(f"{self.description}: the Kerberos ticket has expired: run kinit again "
                                "(or use a keytab)")
        try:
            if creds.lifetime <= 0:
                raise expired
        except gssapi.exceptions.ExpiredCredentialsError:
            raise expired from None
        except gssapi.exceptions.GSSError as e:
            raise explain(e, self.description) from None
        return creds


class KeytabLogin(KerberosLogin):
    """-o keytab=FILE,principal=NAME: a private in-memory cache, refreshed from the keytab."""

    def __init__(self, principal: str, keytab: str) -> None:
        _require_gssapi()
        self.principal = principal
        self.keytab = os.path.abspath(keytab)
        self.ccache = f"MEMORY:hdfsfuse-{os.getpid()}-{next(_memory_caches)}"
        self.description = f"Kerberos login of {principal} from keytab {self.keytab}"

    def acquire(self) -> gssapi.Credentials:
        try:
            with open(self.keytab, "rb") as f:
                principals = keytab_principals(f.read(1 << 20))
        except OSError as e:
            raise KerberosError(f"{self.description}: cannot read the keytab file ({e.strerror or e})") from None
        try:
            name = gssapi.Name(self.principal, gssapi.NameType.kerberos_principal)
            canonical = str(name.canonicalize(gssapi.MechType.kerberos))
            if principals is not None and canonical not in principals:
                raise KerberosError(f"{self.description}: the keytab holds no key for this principal "
                                    f"({canonical}; it holds {', '.join(sorted(principals)) or 'none'})")
            creds = gssapi.Credentials(name=name, usage="initiate",
                                       store={"client_keytab": self.keytab, "ccache": self.ccache})
        except gssapi.exceptions.GSSError as e:
            raise explain(e, self.description) from None
        return self._check(creds)


def keytab_principals(data: bytes) -> set[str] | None:
    """The principals in a keytab file (MIT format 0x0502), or None if it cannot be read as one.

        0x05 0x02, then entries: i32 size (negative: a hole), u16 component count, counted realm,
        counted components, u32 name type, u32 timestamp, u8 kvno, u16 enctype, counted key ...
    """
    if len(data) < 2 or data[:2] != b"\x05\x02":
        return None
    out: set[str] = set()
    pos = 2
    try:
        while pos + 4 <= len(data):
            size = int.from_bytes(data[pos : pos + 4], "big", signed=True)
            pos += 4
            if size <= 0:
                pos += -size
                continue
            entry, pos = data[pos : pos + size], pos + size
            count = int.from_bytes(entry[0:2], "big")
            at = 2
            parts = []
            for _ in range(count + 1):  # the realm, then the components
                n = int.from_bytes(entry[at : at + 2], "big")
                parts.append(entry[at + 2 : at + 2 + n].decode("utf-8", "replace"))
                at += 2 + n
            out.add("/".join(parts[1:]) + "@" + parts[0])
    except (IndexError, ValueError):
        return None
    return out


class TicketCacheLogin(KerberosLogin):
    """A ticket cache made by kinit: $KRB5CCNAME or the default, or one named explicitly."""

    def __init__(self, ccache: str | None = None) -> None:
        _require_gssapi()
        self.ccache = ccache
        self.description = f"Kerberos ticket cache {ccache or os.environ.get('KRB5CCNAME') or '(default)'}"

    def acquire(self) -> gssapi.Credentials:
        try:
            store = {"ccache": self.ccache} if self.ccache else None
            creds = gssapi.Credentials(usage="initiate", store=store)
        except gssapi.exceptions.GSSError as e:
            raise explain(e, self.description) from None
        return self._check(creds)


class GssLayer:
    """The integrity or privacy layer of an established context (QOP auth-int or auth-conf)."""

    def __init__(self, ctx: gssapi.SecurityContext, qop: str) -> None:
        self._ctx = ctx
        self.qop = qop
        self._encrypt = qop == "auth-conf"

    def wrap(self, data: bytes) -> bytes:
        return self._ctx.wrap(data, self._encrypt).message

    def unwrap(self, token: bytes) -> bytes:
        try:
            result = self._ctx.unwrap(token)
        except gssapi.exceptions.GSSError as e:
            raise sasl.SaslError(f"a wrapped RPC frame failed its check: {_gss_text(e)}") from None
        if self._encrypt and not result.encrypted:
            raise sasl.SaslError("the server sent an unencrypted frame under RPC privacy")
        return result.message


class GssapiMechanism:
    """One GSSAPI SASL exchange. `start` blocks (it may fetch a service ticket)."""

    method = "KERBEROS"
    mechanism = "GSSAPI"

    def __init__(self, login: KerberosLogin, target: str, wanted: tuple[str, ...] | None, peer: str) -> None:
        self.login = login
        self.target = target  # the service principal, e.g. nn/host.example.com@REALM
        self.wanted = wanted
        self.peer = peer
        self.principal = ""
        self.layer: GssLayer | None = None
        self.qop = ""
        self._ctx: gssapi.SecurityContext | None = None

    @property
    def complete(self) -> bool:
        return bool(self.qop)

    def start(self) -> bytes:
        """The first token (a Kerberos AP-REQ for `target`)."""
        creds = self.login.acquire()
        self.principal = str(creds.name)
        flags = (gssapi.RequirementFlag.mutual_authentication | gssapi.RequirementFlag.integrity
                 | gssapi.RequirementFlag.confidentiality | gssapi.RequirementFlag.replay_detection
                 | gssapi.RequirementFlag.out_of_sequence_detection)
        try:
            name = gssapi.Name(self.target, gssapi.NameType.kerberos_principal)
            self._ctx = gssapi.SecurityContext(name=name, creds=creds, usage="initiate",
                                               mech=gssapi.MechType.kerberos, flags=flags)
            return self._ctx.step() or b""
        except gssapi.exceptions.GSSError as e:
            raise explain(e, f"Kerberos authentication of {self.principal} to {self.peer} as {self.target}") from None

    def finish(self, token: bytes) -> None:
        """SUCCESS: only after the security layer was chosen."""
        if not self.complete:
            raise sasl.SaslError(f"{self.peer} ended Kerberos authentication before choosing a security layer")

    def evaluate(self, challenge: bytes) -> bytes:
        """The reply to one server CHALLENGE."""
        assert self._ctx is not None
        try:
            if not self._ctx.complete:
                return self._ctx.step(challenge) or b""
            offer = self._ctx.unwrap(challenge).message
            qop, reply = sasl.gss_layer_reply(offer, self.wanted, self.peer)
            wrapped = self._ctx.wrap(reply, False).message
        except gssapi.exceptions.GSSError as e:
            raise explain(e, f"Kerberos authentication to {self.peer}") from None
        self.qop = qop
        self.layer = None if qop == "auth" else GssLayer(self._ctx, qop)
        return wrapped


class HttpNegotiation:
    """SPNEGO for an HTTP service (a KMS), as Hadoop's KerberosAuthenticator does it: a Kerberos
    context for `HTTP/<canonical host>` in the client's realm, mutual authentication, the token
    in `Authorization: Negotiate`. `start` blocks (it may fetch a service ticket)."""

    def __init__(self, login: KerberosLogin, service_host: str) -> None:
        _require_gssapi()
        self.login = login
        self.service_host = service_host
        self._ctx: gssapi.SecurityContext | None = None

    def start(self) -> bytes:
        """The first token for the Authorization header."""
        creds = self.login.acquire()
        principal = str(creds.name)
        realm = principal.rpartition("@")[2]
        target = f"HTTP/{self.service_host}" + (f"@{realm}" if realm else "")
        try:
            name = gssapi.Name(target, gssapi.NameType.kerberos_principal)
            self._ctx = gssapi.SecurityContext(name=name, creds=creds, usage="initiate", mech=gssapi.MechType.kerberos,
                                               flags=gssapi.RequirementFlag.mutual_authentication)
            return self._ctx.step() or b""
        except gssapi.exceptions.GSSError as e:
            raise explain(e, f"Kerberos authentication of {principal} to {target}") from None

    def finish(self, token: bytes | None) -> None:
        """Check the server's answer token (mutual authentication)."""
        assert self._ctx is not None
        if self._ctx.complete:
            return
        if not token:
            raise KerberosError(f"HTTP/{self.service_host} accepted the Kerberos token but did not prove itself "
                                "(no mutual-authentication answer)")
        try:
            self._ctx.step(token)
        except gssapi.exceptions.GSSError as e:
            raise explain(e, f"Kerberos mutual authentication of HTTP/{self.service_host}") from None
