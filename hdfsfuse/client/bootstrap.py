"""Building a client: log in, connect to the NameNode(s), and start what its reads need.

The parts are built in order and handed to `HdfsClient` whole: credentials (may talk to the KDC),
the NameNode client (or one per viewfs namespace), the connection pool, the block cache and
short-circuit reads (when configured), and the login renewal. Their background tasks live in one
nursery, closed with the client.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from hdfsfuse.client.options import ClientOptions
from hdfsfuse.client.reports import BadBlockReports
from hdfsfuse.conf.hadoop import ClusterSettings, NameNodeTarget, ViewTarget
from hdfsfuse.datanode.context import ReadContext
from hdfsfuse.datanode.pool import ConnectionPool
from hdfsfuse.datanode.replicas import ReplicaPolicy
from hdfsfuse.errors import ConfigError
from hdfsfuse.local.blockcache.reads import CachedReads
from hdfsfuse.local.blockcache.store import BlockCache
from hdfsfuse.local.io_threads import LocalIoThreads
from hdfsfuse.local.short_circuit import ShortCircuitReads
from hdfsfuse.namenode.client import NameNodeClient, resolve_user
from hdfsfuse.namenode.viewfs import ViewNameNode
from hdfsfuse.security.credentials import Credentials, RpcAuth, keep_login_fresh
from hdfsfuse.security.kerberos import KeytabLogin
from hdfsfuse.stats import Stats

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ClientParts:
    """What a client is built from."""

    namenode: NameNodeClient | ViewNameNode
    credentials: Credentials | None
    settings: ClusterSettings
    context: ReadContext
    short_circuit: ShortCircuitReads | None  # local replicas read from their files
    reports: BadBlockReports
    nursery: trio.Nursery  # owns the client's background tasks


@asynccontextmanager
async def open_parts(target: NameNodeTarget | ViewTarget, options: ClientOptions,
                     stats: Stats) -> AsyncIterator[ClientParts]:
    credentials, auths = await trio.to_thread.run_sync(_login, target, options, abandon_on_cancel=True)
    async with _namenodes(target, auths, options) as namenode:
        try:
            async with trio.open_nursery() as nursery:
                client_name = f"hdfsfuse-{uuid.uuid4()}"
                pool = ConnectionPool(idle_seconds=options.pool_idle_seconds, capacity=options.pool_capacity)
                nursery.start_soon(pool.reap_forever)
                nursery.start_soon(pool.flush_forever)
                local_io = LocalIoThreads()
                cached = await _block_cache(options, stats, nursery, local_io)
                if isinstance(credentials.login, KeytabLogin):
                    nursery.start_soon(keep_login_fresh, credentials.login)
                short_circuit = _short_circuit(target.settings, options, client_name, stats, nursery, local_io)
                if cached is not None or short_circuit is not None:
                    nursery.start_soon(local_io.serve)
                replicas = ReplicaPolicy(connect_penalty=options.connect_penalty_seconds,
                                         hedge_after=options.hedge_after)
                context = ReadContext(pool, options.timeouts, stats, replicas, client_name,
                                      use_hostname=target.settings.use_datanode_hostname, cached=cached)
                try:
                    yield ClientParts(namenode, credentials, target.settings, context, short_circuit,
                                      BadBlockReports(stats, nursery), nursery)
                finally:
                    pool.close()
                    if short_circuit is not None:
                        short_circuit.close()
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise


def _login(target: NameNodeTarget | ViewTarget, options: ClientOptions) -> tuple[Credentials, dict[str, RpcAuth]]:
    """The mount's credentials and the recipe for each of its namespaces' NameNodes, by target
    URI ("" for a single namespace). Blocking: may talk to the KDC and DNS."""
    credentials = Credentials.choose(target.settings, options.security, resolve_user(options.user))
    if isinstance(target, ViewTarget):
        return credentials, {uri: credentials.namenode_auth(ns) for uri, ns in target.namespaces.items()}
    return credentials, {"": credentials.namenode_auth(target)}


@asynccontextmanager
async def _namenodes(target: NameNodeTarget | ViewTarget, auths: dict[str, RpcAuth],
                     options: ClientOptions) -> AsyncIterator[NameNodeClient | ViewNameNode]:
    timeouts = dict(call_timeout=options.namenode_call_timeout, total_timeout=options.namenode_total_timeout,
                    connect_timeout=options.namenode_connect_timeout)
    if isinstance(target, ViewTarget):
        async with ViewNameNode.open(target, auths, **timeouts) as view:
            yield view
    else:
        async with NameNodeClient.open(target, auth=auths[""], **timeouts) as namenode:  # type: ignore[arg-type]
            yield namenode


async def _block_cache(options: ClientOptions, stats: Stats, nursery: trio.Nursery,
                       local_io: LocalIoThreads) -> CachedReads | None:
    """The persistent block cache, opened (and its rescans started) when cache_dir is set."""
    if not options.cache_dir:
        return None
    cache = BlockCache(options.cache_dir, options.cache_size)
    try:
        await trio.to_thread.run_sync(cache.open)
    except OSError as e:
        raise ConfigError(str(e.strerror or e)) from None
    cached = CachedReads(cache, stats, nursery, local_io)
    nursery.start_soon(cached.rescan_forever)
    return cached


def _short_circuit(settings: ClusterSettings, options: ClientOptions, client_name: str, stats: Stats,
                   nursery: trio.Nursery, local_io: LocalIoThreads) -> ShortCircuitReads | None:
    """Short-circuit local reads, when the configuration turns them on and the mount allows them."""
    if not (options.short_circuit and settings.short_circuit):
        return None
    if not settings.domain_socket_path:
        log.warning("dfs.client.read.shortcircuit is true but dfs.domain.socket.path is not set: "
                    "short-circuit local reads are off")
        return None
    log.info("short-circuit local reads: on for DataNodes on this host (dfs.domain.socket.path=%s)",
             settings.domain_socket_path)
    return ShortCircuitReads(settings.domain_socket_path, client_name, timeout=options.timeouts.read,
                             stats=stats, nursery=nursery, local_io=local_io)
