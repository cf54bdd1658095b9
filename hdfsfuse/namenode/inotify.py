"""HDFS inotify events, sans I/O: which paths a getEditsFromTxid answer changed, and how.

    EventsListProto { batch: [EventBatchProto { txid, events: [EventProto {type, contents}] }],
                      firstTxid, lastTxid, syncTxid }
    EventProto.contents = a serialized CreateEventProto, CloseEventProto, ... named by `type`

Every event becomes one or two `Change`s for a mount's caches: a name that appeared or went
(create, unlink, both ends of a rename), a file whose bytes changed (close, append, truncate),
or attributes that changed (metadata: times, owner, mode, ACLs, xattrs, replication).
"""

from __future__ import annotations

import dataclasses

from google.protobuf.message import DecodeError

from hdfsfuse.errors import ProtocolError
from hdfsfuse.proto import hdfs_pb2

E = hdfs_pb2


@dataclasses.dataclass(frozen=True, slots=True)
class Change:
    path: str
    name_changed: bool = False  # the name appeared or went: the parent's entry for it is stale
    data_changed: bool = False  # the file's bytes changed: its cached pages are stale


def changes(events: hdfs_pb2.EventsListProto) -> list[Change]:
    """What the events of one answer changed, in edit-log order. Raises ProtocolError for an
    event it cannot read (garbage, or a type newer than this code)."""
    out: list[Change] = []
    batches = list(events.batch) or [hdfs_pb2.EventBatchProto(events=events.events)]
    for batch in batches:
        for event in batch.events:
            out.extend(_decode(event))
    return out


def next_txid(events: hdfs_pb2.EventsListProto, asked: int) -> int:
    """The txid to ask for next: one past the last the NameNode has covered (or `asked` again)."""
    return events.lastTxid + 1 if events.lastTxid >= asked else asked


def _decode(event: hdfs_pb2.EventProto) -> list[Change]:
    kind = event.type
    try:
        if kind == E.EVENT_CREATE:
            return [Change(E.CreateEventProto.FromString(event.contents).path, name_changed=True)]
        if kind == E.EVENT_UNLINK:
            return [Change(E.UnlinkEventProto.FromString(event.contents).path, name_changed=True)]
        if kind == E.EVENT_RENAME:
            rename = E.RenameEventProto.FromString(event.contents)
            return [Change(rename.srcPath, name_changed=True), Change(rename.destPath, name_changed=True)]
        if kind == E.EVENT_CLOSE:
            return [Change(E.CloseEventProto.FromString(event.contents).path, data_changed=True)]
        if kind == E.EVENT_APPEND:
            return [Change(E.AppendEventProto.FromString(event.contents).path, data_changed=True)]
        if kind == E.EVENT_TRUNCATE:
            return [Change(E.TruncateEventProto.FromString(event.contents).path, data_changed=True)]
        if kind == E.EVENT_METADATA:
            return [Change(E.MetadataUpdateEventProto.FromString(event.contents).path)]
    except DecodeError as e:
        raise ProtocolError(f"undecodable inotify event of type {kind}: {e}") from None
    raise ProtocolError(f"unknown inotify event type {kind}")  # the caller forgets everything cached
