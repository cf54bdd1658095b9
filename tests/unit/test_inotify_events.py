"""Live invalidation without a cluster: the event decoder byte by byte, the name index, the kernel
notices, and the tailing loop against a fake stream."""

from __future__ import annotations

import pytest
import trio

from hdfsfuse.errors import AccessDenied, NameNodeUnavailable, ProtocolError
from hdfsfuse.fuse.inodes import ROOT_INODE, InodeTable
from hdfsfuse.fuse.invalidation import LiveInvalidation, notices
from hdfsfuse.namenode import inotify
from hdfsfuse.namenode.inotify import Change
from hdfsfuse.proto import hdfs_pb2
from hdfsfuse.stats import Stats

E = hdfs_pb2
LONG = "entry_timeout=3600,attr_timeout=3600,negative_timeout=3600"


def _event(kind: int, message: object) -> hdfs_pb2.EventProto:
    return E.EventProto(type=kind, contents=message.SerializeToString())  # type: ignore[attr-defined, arg-type]


def test_each_event_type_names_what_changed() -> None:
    events = E.EventsListProto(firstTxid=5, lastTxid=11, syncTxid=11, batch=[
        E.EventBatchProto(txid=5, events=[_event(E.EVENT_CREATE, E.CreateEventProto(type=0, path="/a"))]),
        E.EventBatchProto(txid=7, events=[
            _event(E.EVENT_CLOSE, E.CloseEventProto(path="/a", fileSize=10, timestamp=1)),
            _event(E.EVENT_APPEND, E.AppendEventProto(path="/b")),
            _event(E.EVENT_TRUNCATE, E.TruncateEventProto(path="/c", fileSize=0, timestamp=1)),
        ]),
        E.EventBatchProto(txid=9, events=[
            _event(E.EVENT_RENAME, E.RenameEventProto(srcPath="/d", destPath="/e/d", timestamp=1)),
            _event(E.EVENT_METADATA, E.MetadataUpdateEventProto(path="/f", type=3)),
            _event(E.EVENT_UNLINK, E.UnlinkEventProto(path="/g", timestamp=1)),
        ]),
    ])
    assert inotify.changes(events) == [
        Change("/a", name_changed=True), Change("/a", data_changed=True), Change("/b", data_changed=True),
        Change("/c", data_changed=True), Change("/d", name_changed=True), Change("/e/d", name_changed=True),
        Change("/f"), Change("/g", name_changed=True),
    ]
    assert inotify.next_txid(events, 5) == 12


def test_the_wire_layout_of_an_event() -> None:
    # EventProto {1: type EVENT_UNLINK (5), 2: contents UnlinkEventProto {1: path "/x", 2: timestamp 7}}
    raw = b"\x08\x05\x12\x06" + b"\x0a\x02/x\x10\x07"
    assert inotify.changes(E.EventsListProto(events=[E.EventProto.FromString(raw)])) == [
        Change("/x", name_changed=True)]


def test_no_new_edits_asks_for_the_same_txid_again() -> None:
    assert inotify.next_txid(E.EventsListProto(firstTxid=-1, lastTxid=-1, syncTxid=40), 41) == 41


@pytest.mark.parametrize("event", [
    E.EventProto(type=E.EVENT_RENAME, contents=b"\x0a\xff"),  # a truncated field
    E.EventProto.FromString(b"\x08\x09\x12\x00"),  # a type newer than this code, from the wire
])
def test_events_it_cannot_read_are_protocol_errors(event: hdfs_pb2.EventProto) -> None:
    with pytest.raises(ProtocolError):
        inotify.changes(E.EventsListProto(events=[event]))


def _table() -> InodeTable:
    table = InodeTable("/data", index_names=True)
    root = table.get(ROOT_INODE)
    assert root is not None
    d = table.get(table.child(root, "d", 100))
    assert d is not None
    table.child(d, "f", 101)
    return table


def test_the_name_index_finds_what_the_kernel_holds() -> None:
    table = _table()
    parent, entry, name = table.find("/data/d/f")
    assert (parent.inode if parent else None, entry.inode if entry else None, name) == (100, 101, "f")
    parent, entry, name = table.find("/data/d/new")
    assert (parent.inode if parent else None, entry, name) == (100, None, "new")
    assert table.find("/data/unknown/f") == (None, None, "f")  # nothing cached under an unknown dir
    assert table.find("/elsewhere/f") == (None, None, "")
    assert table.find("/data")[1] is table.get(ROOT_INODE)
    # A rename seen by a lookup moves the name; forgetting the inode drops it.
    d = table.get(100)
    assert d is not None
    table.child(d, "g", 101)
    assert table.find("/data/d/f")[1] is None and table.find("/data/d/g")[1] is table.get(101)
    table.referenced(101)
    assert table.forget(101, 1)
    assert table.find("/data/d/g") == (d, None, "g")
    table.child(d, "h", 101)  # the same file, seen again under another name: the old name finds nothing
    assert table.find("/data/d/g") == (d, None, "g") and table.find("/data/d/h")[1] is table.get(101)


class _Caches:
    def __init__(self) -> None:
        self.inodes = _table()
        self.forgotten: list[tuple[int | None, int | None, str]] = []
        self.paths: list[str] = []
        self.cleared = 0

    def forget_cached(self, inode: int | None, parent: int | None, name: str) -> None:
        self.forgotten.append((inode, parent, name))

    def forget_path(self, path: str) -> None:
        self.paths.append(path)

    def forget_all(self) -> None:
        self.cleared += 1


def test_changes_become_kernel_notices() -> None:
    caches = _Caches()
    assert notices(caches, Change("/data/d/f", data_changed=True)) == [("inode", 101, False)]
    assert notices(caches, Change("/data/d/new", name_changed=True)) == [
        ("entry", 100, b"new"), ("inode", 100, True)]
    assert notices(caches, Change("/data/d/f")) == [("inode", 101, True)]
    assert notices(caches, Change("/data/other/x", name_changed=True)) == []
    assert caches.forgotten == [(101, 100, "f"), (None, 100, "new"), (101, 100, "f")]
    # Every changed path reaches the listing caches, held by the kernel or not.
    assert caches.paths == ["/data/d/f", "/data/d/new", "/data/d/f", "/data/other/x"]


class _Stream:
    def __init__(self, answers: list[object]) -> None:
        self.answers = answers
        self.asked: list[int] = []
        self.current = 0

    async def current_edit_txid(self) -> int:
        self.current += 1
        if self.current == 1 and isinstance(self.answers[0], Exception) and "start" in str(self.answers[0]):
            raise self.answers.pop(0)  # type: ignore[misc]
        return 100 * self.current

    async def edits_from(self, txid: int) -> hdfs_pb2.EventsListProto:
        self.asked.append(txid)
        if not self.answers:
            await trio.sleep_forever()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[return-value]


async def test_the_loop_follows_the_stream_and_resyncs_after_losing_it() -> None:
    unlink = E.EventsListProto(firstTxid=101, lastTxid=101, syncTxid=101, batch=[E.EventBatchProto(
        txid=101, events=[_event(E.EVENT_UNLINK, E.UnlinkEventProto(path="/data/d/f", timestamp=1))])])
    stream = _Stream([unlink, E.EventsListProto(lastTxid=-1, syncTxid=101), NameNodeUnavailable("gone"),
                      E.EventsListProto(lastTxid=-1, syncTxid=200)])
    sent: list[list[object]] = []
    caches = _Caches()
    stats = Stats()
    loop = LiveInvalidation(stream, caches, stats, poll=0.01, send=sent.append)
    async with trio.open_nursery() as nursery:
        assert await nursery.start(loop.run) is True
        with trio.fail_after(5):
            while len(stream.asked) < 4:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert stream.asked[:4] == [101, 102, 102, 201]  # after the loss: the current end, not the old txid
    assert set(stream.asked[4:]) <= {201}
    assert sent[0] == [("entry", 100, b"f"), ("inode", 100, True), ("inode", 101, True)]
    everything = sent[1]
    assert ("inode", ROOT_INODE, False) in everything and ("entry", 100, b"f") in everything
    assert stats.inotify_changes == 1 and stats.inotify_resyncs == 1
    assert caches.cleared == 1  # a lost stream forgets every kept name and location


async def test_a_refused_stream_leaves_the_timeouts_in_charge(caplog: pytest.LogCaptureFixture) -> None:
    stream = _Stream([AccessDenied("start: Superuser privilege is required")])
    loop = LiveInvalidation(stream, _Caches(), Stats(), poll=0.01, send=lambda batch: None)
    async with trio.open_nursery() as nursery:
        assert await nursery.start(loop.run) is False
    assert stream.asked == []
    assert "will not stream its edits" in caplog.text and "Superuser privilege" in caplog.text


# ----- through the mount ------------------------------------------------------------------------------


