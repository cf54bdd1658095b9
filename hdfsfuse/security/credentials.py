"""Who hdfsfuse is to a cluster, and how each RPC connection proves it.

Owns the choice of credentials (Hadoop's UserGroupInformation login, done our way), the
service principal a connection authenticates to, and `RpcAuth`, the recipe one connection
follows. The SASL exchanges themselves are in `hdfsfuse.namenode.rpc` (adapter), `hdfsfuse.security.sasl`
(DIGEST-MD5, layer choice) and `hdfsfuse.security.kerberos` (GSSAPI).

Credentials, in order, on a cluster with hadoop.security.authentication=kerberos:

    1. -o keytab=FILE,principal=NAME   a private in-memory cache, refreshed from the keytab
    2. the user's ticket cache          $KRB5CCNAME or the default, read again at every dial
    3. a delegation-token file          -o token_file=FILE or $HADOOP_TOKEN_FILE_LOCATION

Per-caller identity (`-o identity=`): `mount` (everyone is the mount's identity), `caller`
(the mount's Kerberos principal impersonates each calling local user: a proxy user), or
`ticket_cache` (each caller's own ticket cache, as fuse_dfs does it).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import socket

import trio

from hdfsfuse.conf.hadoop import ClusterSettings, NameNodeTarget
from hdfsfuse.errors import AuthenticationRequired, ConfigError
from hdfsfuse.proto import rpc_pb2
from hdfsfuse.security.kerberos import KerberosError, KerberosLogin, KeytabLogin, TicketCacheLogin
from hdfsfuse.security.sasl import parse_protection
from hdfsfuse.security.tokens import (
    DELEGATION_KIND,
    parse_delegation_identifier,
    parse_token_storage,
    select_delegation_token,
    token_services,
)

log = logging.getLogger(__name__)

@dataclasses.dataclass(frozen=True)
class RpcAuth:
    """How one IPC connection authenticates, and as whom.

    - `token`: SASL TOKEN (DIGEST-MD5) with a delegation or block token.
    - `kerberos`: SASL KERBEROS (GSSAPI) with this login; with `proxy`, acting for `user`.
    - neither: SIMPLE, as `user`.
    """

    user: str
    token: rpc_pb2.TokenProto | None = None
    kerberos: KerberosLogin | None = None
    principal: str = ""  # the service principal, maybe with _HOST; "" = as the server names itself
    qops: tuple[str, ...] | None = None  # hadoop.rpc.protection as QOPs; None = not configured
    proxy: bool = False
    simple_fallback: bool = False  # ipc.client.fallback-to-simple-auth-allowed

    @property
    def sasl(self) -> bool:
        return self.token is not None or self.kerberos is not None

    @property
    def description(self) -> str:
        if self.kerberos is not None:
            return self.kerberos.description + (f" acting for {self.user}" if self.proxy else "")
        if self.token is not None:
            return f"a {self.token.kind or 'token'}"
        return f"user {self.user} (SIMPLE)"


def expand_principal(template: str, hostname: str) -> str:
    """Hadoop's SecurityUtil.getServerPrincipal: `nn/_HOST@R` with the server's host name."""
    parts = re.split(r"[/@]", template)
    if len(parts) != 3 or parts[1] != "_HOST":
        return template
    host = hostname.rstrip(".").lower()
    return f"{parts[0]}/{host}@{parts[2]}"


def canonical_hostname(host: str) -> str:
    """The server's canonical name as Java finds it (reverse DNS of its address). Blocking."""
    try:
        ip = socket.getaddrinfo(host, None)[0][4][0]
        name = socket.gethostbyaddr(ip)[0]
    except OSError:
        name = ""
    if not name or name == "0.0.0.0":
        name = socket.getfqdn()
    return name.rstrip(".").lower()


@dataclasses.dataclass(frozen=True)
class SecurityOptions:
    """The mount options that choose credentials."""

    keytab: str | None = None
    principal: str | None = None
    token_file: str | None = None


class Credentials:
    """The mount's own login, chosen once at start-up (`choose`, blocking), and the RpcAuth
    each connection gets from it."""

    def __init__(self, settings: ClusterSettings, user: str, *, login: KerberosLogin | None = None,
                 tokens: list[rpc_pb2.TokenProto] | None = None, token_source: str = "") -> None:
        self.settings = settings
        self.user = user
        self.login = login
        self.tokens = tokens or []
        self.token_source = token_source

    @property
    def kerberos(self) -> bool:
        return self.settings.kerberos or self.login is not None

    @property
    def qops(self) -> tuple[str, ...] | None:
        if not self.settings.rpc_protection:
            return None
        return parse_protection(self.settings.rpc_protection)

    def namenode_auth(self, target: NameNodeTarget, *, user: str | None = None,
                      login: KerberosLogin | None = None) -> RpcAuth:
        """The recipe for the NameNodes of `target`: as the mount, or for a caller (`user`)."""
        common = dict(principal=self.settings.namenode_principal, qops=self.qops,
                      simple_fallback=self.settings.fallback_to_simple)
        if login is not None:  # a caller's own ticket cache
            return RpcAuth(user or self.user, kerberos=login, **common)  # type: ignore[arg-type]
        if self.login is not None:
            proxy = user is not None and user != self.user
            return RpcAuth(user or self.user, kerberos=self.login, proxy=proxy, **common)  # type: ignore[arg-type]
        if self.kerberos:
            if user is not None and user != self.user:
                raise AuthenticationRequired(
                    f"cannot act for {user}: the mount authenticates with {self.token_source}, and "
                    "only a Kerberos login can impersonate (use -o keytab=...,principal=...)"
                )
            token = select_delegation_token(self.tokens, self.services(target))
            if token is None:
                raise AuthenticationRequired(
                    f"{self.token_source} holds no HDFS delegation token for {target.label} "
                    f"(token services: {', '.join(sorted(t.service for t in self.tokens)) or 'none'})"
                )
            return RpcAuth(self.user, token=token, **common)  # type: ignore[arg-type]
        return RpcAuth(user or self.user, **common)  # type: ignore[arg-type]

    @staticmethod
    def services(target: NameNodeTarget) -> set[str]:
        addresses = list(target.addresses)
        for host, port in target.addresses:
            try:
                addresses += [(info[4][0], port) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
            except OSError:
                pass
        return token_services(target.label, addresses, target.label if target.ha else None)

    @classmethod
    def choose(cls, settings: ClusterSettings, options: SecurityOptions, user: str) -> Credentials:
        """Pick the mount's credentials (blocking: a Kerberos login may talk to the KDC).

        Raises one clear error when a Kerberos cluster leaves nothing to authenticate with.
        """
        if (options.keytab is None) != (options.principal is None):
            raise ConfigError("options keytab and principal go together: -o keytab=FILE,principal=NAME")
        if options.keytab is not None and options.principal is not None:
            login: KerberosLogin = KeytabLogin(options.principal, options.keytab)
            return cls(settings, short_name(str(login.acquire().name)), login=login)
        if not settings.kerberos:
            return cls(settings, user)
        token_file = options.token_file or os.environ.get("HADOOP_TOKEN_FILE_LOCATION")
        cache = TicketCacheLogin()
        try:
            return cls(settings, short_name(str(cache.acquire().name)), login=cache)
        except KerberosError as e:
            if not token_file:
                raise
            log.info("no usable ticket cache (%s); using delegation tokens from %s", e, token_file)
        tokens = read_token_file(token_file)
        owners = [parse_delegation_identifier(t.identifier).owner for t in tokens if t.kind == DELEGATION_KIND]
        return cls(settings, short_name(owners[0]) if owners else user, tokens=tokens,
                   token_source=f"token file {token_file}")


def short_name(principal: str) -> str:
    """alice@R -> alice, nn/host@R -> nn (Hadoop's default auth_to_local rule)."""
    return re.split(r"[/@]", principal, maxsplit=1)[0]


def read_token_file(path: str) -> list[rpc_pb2.TokenProto]:
    try:
        with open(path, "rb") as f:
            data = f.read(4 * 1024 * 1024)
    except OSError as e:
        raise ConfigError(f"cannot read token file {path}: {e.strerror or e}") from None
    return parse_token_storage(data, f"token file {path}")


async def keep_login_fresh(login: KerberosLogin) -> None:
    """Keep a keytab login's TGT fresh for as long as the mount runs (a background task).

    MIT renews from the keytab when credentials are acquired past half their life; acquiring
    just past that point keeps a valid TGT in the private cache, so a new connection never
    waits on the KDC for a login. Failures are logged and retried; they never end the task.
    """
    failing = False
    while True:
        try:
            creds = await trio.to_thread.run_sync(login.acquire, abandon_on_cancel=True)
            lifetime = int(creds.lifetime)
            if failing:
                log.warning("%s: renewed; the ticket is valid for %d s", login.description, lifetime)
            failing = False
            log.debug("%s: ticket valid for %d s", login.description, lifetime)
            await trio.sleep(max(5.0, min(lifetime * 0.5 + 1.0, 3600.0)))
        except Exception as e:  # a background task: log, retry, never escape
            if not failing:
                log.warning("%s: renewal failed (%s); retrying every 30 s", login.description, e)
            failing = True
            await trio.sleep(30.0)
