"""How observer reads route, with scripted connections: which errors move on to the next
observer, which send the read to the active, which are the answer; one probe, one msync."""

from __future__ import annotations

import pytest

from hdfsfuse.errors import FileNotFound, Retriable, StandbyNameNode
from hdfsfuse.namenode.observers import ORAE, ObserverReads
from hdfsfuse.proto import hdfs_pb2


class FakeConn:
    def __init__(self, address: str, state: int, answers: list[bytes | Exception]) -> None:
        self.address = address
        self.state = state
        self.answers = answers
        self.calls: list[str] = []

    async def call(self, method: str, payload: bytes, timeout: float) -> bytes:
        self.calls.append(method)
        if method == "getHAServiceState":
            return hdfs_pb2.HAServiceStateResponseProto(state=self.state).SerializeToString()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _cluster(*observer_answers: list[bytes | Exception]) -> tuple[ObserverReads, list[FakeConn], list[int]]:
    conns = [FakeConn("active", hdfs_pb2.ACTIVE, []), FakeConn("standby", hdfs_pb2.STANDBY, [])]
    conns += [FakeConn(f"observer{i}", hdfs_pb2.OBSERVER, list(a)) for i, a in enumerate(observer_answers)]
    msyncs: list[int] = []

    async def msync() -> None:
        msyncs.append(1)

    return ObserverReads(conns, msync), conns, msyncs  # type: ignore[arg-type]


async def test_an_observer_answers_after_one_probe_and_one_msync() -> None:
    reads, conns, msyncs = _cluster([b"one", b"two"])
    assert await reads.read("getFileInfo", b"", 1.0) == b"one"
    assert await reads.read("getFileInfo", b"", 1.0) == b"two"
    assert msyncs == [1]
    assert [c.calls.count("getHAServiceState") for c in conns] == [1, 1, 1]


@pytest.mark.parametrize("error", [StandbyNameNode("standby"), Retriable("too far behind")])
async def test_standby_or_behind_tries_the_next_observer(error: Exception) -> None:
    reads, conns, _ = _cluster([error], [b"second"])
    assert await reads.read("getListing", b"", 1.0) == b"second"
    assert conns[2].calls[-1] == "getListing" and conns[3].calls[-1] == "getListing"


async def test_retry_on_active_goes_straight_to_the_active() -> None:
    reads, conns, _ = _cluster([StandbyNameNode("zero block locations", java_class=ORAE)], [b"unused"])
    assert await reads.read("getBlockLocations", b"", 1.0) is None
    assert conns[3].calls == ["getHAServiceState"]  # the second observer was not asked


async def test_other_errors_are_the_answer() -> None:
    reads, _, _ = _cluster([FileNotFound("/x: no such file")])
    with pytest.raises(FileNotFound):
        await reads.read("getFileInfo", b"", 1.0)


async def test_without_observers_everything_goes_to_the_active() -> None:
    reads, _, msyncs = _cluster()
    assert await reads.read("getFileInfo", b"", 1.0) is None
    await reads.sync()
    assert msyncs == []  # nothing to align with


async def test_sync_msyncs_every_time_with_observers() -> None:
    reads, _, msyncs = _cluster([b"x"])
    await reads.sync()
    await reads.sync()
    assert len(msyncs) == 2
    assert await reads.read("getFileInfo", b"", 1.0) == b"x"
    assert len(msyncs) == 2  # already aligned: no msync before this first read
