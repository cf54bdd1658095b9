"""Per-caller identity: which NameNode connection a FUSE request uses (`-o identity=`).

Owns the mapping from a request's caller (uid, pid) to a `NameNodeClient` that authenticates
as that caller, so the NameNode checks permissions and ACLs for each local user:

    mount         every request uses the mount's own connection (the default)
    caller        the mount's Kerberos principal impersonates the caller's local user name
                  (a Hadoop proxy user); on a SIMPLE cluster, the caller's name itself
    ticket_cache  the caller's own Kerberos ticket cache: $KRB5CCNAME from the calling
                  process's environment, else FILE:/tmp/krb5cc_<uid>; it must be a file the
                  caller owns, so nobody can borrow another user's tickets

One connection per effective identity (Hadoop keys its connections the same way), created on
first use and kept, most recently used first, up to `MAX_IDENTITIES`. An identity pushed out
only has its sockets closed: files it opened keep it, and reconnect when they next need the
NameNode.
"""

from __future__ import annotations

import collections
import logging
import os
import pwd

import trio

from hdfsfuse.errors import AccessDenied
from hdfsfuse.namenode.client import NameNodeClient
from hdfsfuse.security.credentials import Credentials
from hdfsfuse.security.kerberos import TicketCacheLogin

log = logging.getLogger(__name__)

MAX_IDENTITIES = 256


def local_user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        raise AccessDenied(f"uid {uid} has no local user name to act as in HDFS") from None


def caller_ticket_cache(uid: int, pid: int) -> str:
    """The caller's ticket cache, as its own process would find it; checked to be the caller's."""
    ccache = ""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read(1 << 20).split(b"\0"):
                if item.startswith(b"KRB5CCNAME="):
                    ccache = item[len(b"KRB5CCNAME="):].decode("utf-8", "replace")
    except OSError:
        pass  # the caller is gone or hidden: its default cache
    ccache = ccache or f"FILE:/tmp/krb5cc_{uid}"
    kind, sep, path = ccache.partition(":")
    if not sep:
        kind, path = "FILE", ccache
    if kind != "FILE" or not path.startswith("/"):
        raise AccessDenied(f"uid {uid}: ticket cache {ccache} is not a FILE: cache, which identity=ticket_cache needs")
    try:
        st = os.stat(path)
    except OSError:
        raise AccessDenied(f"uid {uid} has no Kerberos ticket cache at {path}: run kinit") from None
    if st.st_uid != uid:
        raise AccessDenied(f"uid {uid}: ticket cache {path} belongs to uid {st.st_uid}, not the caller")
    return f"FILE:{path}"


class Identities:
    """The NameNode connection for each request's caller."""

    def __init__(self, mode: str, mount: NameNodeClient, credentials: Credentials | None,
                 nursery: trio.Nursery) -> None:
        self.mode = mode
        self.mount = mount
        self.credentials = credentials
        self._nursery = nursery
        self._clients: collections.OrderedDict[tuple[int, str], NameNodeClient] = collections.OrderedDict()

    def namenode(self, uid: int | None, pid: int | None) -> NameNodeClient:
        if self.mode == "mount" or uid is None:
            return self.mount
        name = local_user_name(uid)
        login = None
        key = (uid, name)
        if self.mode == "ticket_cache":
            ccache = caller_ticket_cache(uid, pid or 0)
            key = (uid, ccache)
            login = TicketCacheLogin(ccache)
        client = self._clients.get(key)
        if client is not None:
            self._clients.move_to_end(key)
            return client
        assert self.credentials is not None
        auth = self.credentials.namenode_auth(self.mount.target, user=name, login=login)
        client = NameNodeClient(
            self.mount.target, auth=auth, nursery=self._nursery, call_timeout=self.mount.call_timeout,
            total_timeout=self.mount.total_timeout, connect_timeout=self.mount.connect_timeout,
        )
        log.info("uid %d: HDFS requests run as %s", uid, auth.description)
        self._clients[key] = client
        if len(self._clients) > MAX_IDENTITIES:
            _, oldest = self._clients.popitem(last=False)
            self._nursery.start_soon(oldest.close_connections)  # open files may still use it
        return client

    @property
    def clients(self) -> list[NameNodeClient]:
        return [self.mount, *self._clients.values()]
