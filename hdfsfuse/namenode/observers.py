"""Reads from observer NameNodes (HDFS-12943), apart from the connections and from HA failover.

Used when the nameservice's proxy provider is ObserverReadProxyProvider, as Java decides:

    1. find each NameNode's role with getHAServiceState (lazily, cached; re-probed after a while
       when no observer was found);
    2. before the first observer read, msync the active (its answer carries its state id);
    3. send coordinated reads to an observer, every call carrying the highest state id seen
       (`rpc.StateAlignment`), so an observer answers only from a state at least that new;
       - ObserverRetryOnActiveException: straight to the active;
       - StandbyException, RetriableException (too far behind), a lost connection: the next
         observer, then the active;
       - any other error is the answer (a missing file is missing);
    4. everything else (writes, msync, unlisted reads) goes to the active.

Other clients' writes reach an observer a few milliseconds later. So that a file another
client has closed is seen as a local filesystem would show it, the mount also msyncs:
- before every open (close-to-open consistency, as NFS gives);
- before believing an observer that a name does not exist (then asks again).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import trio

from hdfsfuse.errors import ConnectionLost, HdfsError, Retriable, RpcTimeout, StandbyNameNode
from hdfsfuse.namenode.rpc import RpcConnection
from hdfsfuse.proto import hdfs_pb2

log = logging.getLogger(__name__)

# ClientProtocol methods marked @ReadOnly(isCoordinated = true) that this client calls.
COORDINATED_READS = frozenset({
    "getBlockLocations", "getListing", "getBatchedListing", "getFileInfo", "getFileLinkInfo",
    "getLocatedFileInfo", "getContentSummary", "getLinkTarget", "isFileClosed", "getServerDefaults",
    "getStoragePolicy", "getAclStatus", "getXAttrs", "listXAttrs", "getErasureCodingPolicy",
})
ORAE = "org.apache.hadoop.ipc.ObserverRetryOnActiveException"
PROBE_TIMEOUT = 5.0
REPROBE_SECONDS = 600.0  # dfs.client.failover.observer.probe.retry.period


class ObserverReads:
    """Which connections are observers, and one coordinated read across them."""

    def __init__(self, conns: Sequence[RpcConnection], msync: Callable[[], Awaitable[None]]) -> None:
        self._conns = conns
        self._msync = msync
        self._observers: list[int] | None = None
        self._probed_at = -REPROBE_SECONDS
        self._synced = False  # msynced at least once
        self._lock = trio.Lock()

    async def read(self, method: str, payload: bytes, timeout: float) -> bytes | None:
        """The body from an observer, or None: ask the active."""
        observers = await self._find()
        if observers and not self._synced:
            await self.sync()  # the active's state id, before the first observer read
        for index in observers:
            conn = self._conns[index]
            try:
                return await conn.call(method, payload, timeout=timeout)
            except StandbyNameNode as e:
                if e.java_class == ORAE:
                    log.debug("%s: observer %s sends it to the active: %s", method, conn.address, e)
                    return None
                log.info("%s: observer %s is not serving (%s); trying the next", method, conn.address, e)
            except (Retriable, ConnectionLost, RpcTimeout) as e:
                log.info("%s: observer %s cannot answer now (%s); trying the next", method, conn.address, e)
        return None

    async def sync(self) -> None:
        """msync now, when reads go to observers: later reads see every write made before it."""
        if await self._find():
            await self._msync()
            self._synced = True

    async def _find(self) -> list[int]:
        """The observers' indexes, probed once (again after a while if there were none)."""
        async with self._lock:  # one probe at a time
            now = trio.current_time()
            if self._observers is None or (not self._observers and now - self._probed_at >= REPROBE_SECONDS):
                self._observers = [i for i, conn in enumerate(self._conns) if await _is_observer(conn)]
                self._probed_at = now
                if self._observers:
                    log.info("observer NameNodes: %s", ", ".join(self._conns[i].address for i in self._observers))
            return self._observers


async def _is_observer(conn: RpcConnection) -> bool:
    try:
        body = await conn.call("getHAServiceState", hdfs_pb2.HAServiceStateRequestProto().SerializeToString(),
                               timeout=PROBE_TIMEOUT)
    except (HdfsError, ConnectionLost, RpcTimeout) as e:
        log.debug("probing %s for its HA state: %s", conn.address, e)
        return False
    return hdfs_pb2.HAServiceStateResponseProto.FromString(body).state == hdfs_pb2.OBSERVER
