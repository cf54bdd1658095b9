"""Blocks of finalized files that earlier reads were told of, for a `cat_file` to start its
DataNode read at once, while the NameNode is asked where the range lies. The answer then decides:
the bytes are returned only if it names the same file length and the same blocks (block id and
generation stamp) for the range; otherwise they are dropped and the range is read as the answer
says. Pure bookkeeping, bounded in files and in blocks per file.

Block ids are never reused, and a block's bytes do not change under one generation stamp (an
append, a truncate or a recovery gives it a new one), so bytes read from the same block as the
answer names are the bytes the answer would have read.

A block is kept serialized (about 1.3 KiB in memory with three locations and a token): a parsed
block would keep its whole answer's parse alive (about 5 KiB).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import NamedTuple

from hdfsfuse.datanode.pieces import clamp
from hdfsfuse.proto import hdfs_pb2

LocatedBlocks = hdfs_pb2.LocatedBlocksProto
LocatedBlock = hdfs_pb2.LocatedBlockProto

SEEN_FILES = 256  # files whose blocks are kept, the least recently read dropped first
SEEN_BLOCKS = 16  # blocks kept per file, the oldest dropped first


class _Block(NamedTuple):
    offset: int
    block_id: int
    stamp: int
    length: int
    raw: bytes  # the LocatedBlockProto, serialized

    @classmethod
    def of(cls, block: LocatedBlock) -> _Block:
        return cls(block.offset, block.b.blockId, block.b.generationStamp, block.b.numBytes,
                   block.SerializeToString())

    def holds(self, offset: int, n: int) -> bool:
        """Whether the block holds part of [offset, offset+n)."""
        return n > 0 and self.offset < offset + n and offset < self.offset + self.length


class _Seen:
    __slots__ = ("blocks", "identity", "template")

    def __init__(self, answer: LocatedBlocks) -> None:
        self.identity = _identity(answer)
        template = LocatedBlocks(fileLength=answer.fileLength, underConstruction=False, isLastBlockComplete=True)
        if answer.HasField("ecPolicy"):
            template.ecPolicy.CopyFrom(answer.ecPolicy)
        if answer.HasField("fileEncryptionInfo"):
            template.fileEncryptionInfo.CopyFrom(answer.fileEncryptionInfo)
        self.template = template.SerializeToString()  # the answer without its blocks
        self.blocks: collections.OrderedDict[int, _Block] = collections.OrderedDict()  # by offset


def _identity(lbs: LocatedBlocks) -> tuple[int, str, bytes]:
    return (lbs.fileLength, lbs.ecPolicy.name if lbs.HasField("ecPolicy") else "",
            lbs.fileEncryptionInfo.iv if lbs.HasField("fileEncryptionInfo") else b"")


def finalized(lbs: LocatedBlocks) -> bool:
    """A file no longer written: its blocks and length can only change under new stamps."""
    return not lbs.underConstruction and (not lbs.HasField("lastBlock") or lbs.isLastBlockComplete)


def touched(blocks: Iterable[LocatedBlock], offset: int, n: int) -> list[tuple[int, int, int, int]]:
    """(offset, block id, generation stamp, length) of each block holding part of [offset, offset+n)."""
    named = ((b.offset, b.b.blockId, b.b.generationStamp, b.b.numBytes) for b in blocks)
    return sorted(t for t in named if n > 0 and t[0] < offset + n and offset < t[0] + t[3])


class SeenBlocks:
    """path -> the blocks answers named for it, while the file is finalized."""

    def __init__(self, *, files: int = SEEN_FILES, blocks: int = SEEN_BLOCKS) -> None:
        self.files = files
        self.blocks = blocks
        self._seen: collections.OrderedDict[str, _Seen] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def note(self, path: str, lbs: LocatedBlocks) -> None:
        """Keep what an answer named (a file being written: forget it)."""
        if not finalized(lbs) or lbs.fileLength == 0:
            self._seen.pop(path, None)
            return
        seen = self._seen.get(path)
        if seen is None or seen.identity != _identity(lbs) or any(
                _other(seen.blocks.get(block.offset), block) for block in lbs.blocks):
            seen = self._seen[path] = _Seen(lbs)  # another file, or this one changed: start over
        for block in lbs.blocks:
            seen.blocks[block.offset] = _Block.of(block)
            seen.blocks.move_to_end(block.offset)
        while len(seen.blocks) > self.blocks:
            seen.blocks.popitem(last=False)
        self._seen.move_to_end(path)
        while len(self._seen) > self.files:
            self._seen.popitem(last=False)

    def forget(self, path: str) -> None:
        self._seen.pop(path, None)

    def guess(self, path: str, offset: int, length: int) -> LocatedBlocks | None:
        """An answer for [offset, offset+length) made of kept blocks, or None when any part of
        the range (clamped at the kept length) lies in a block not kept."""
        seen = self._seen.get(path)
        if seen is None:
            return None
        n = clamp(offset, length, seen.identity[0])
        blocks = sorted((b for b in seen.blocks.values() if b.holds(offset, n)), key=lambda b: b.offset)
        covered = offset
        for block in blocks:
            if block.offset > covered:
                return None
            covered = max(covered, block.offset + block.length)
        if n and covered < offset + n:
            return None
        guess = LocatedBlocks.FromString(seen.template)
        for block in blocks:
            guess.blocks.add().MergeFromString(block.raw)
        return guess


def _other(kept: _Block | None, block: LocatedBlock) -> bool:
    """Whether a kept block at the same offset is not the same block as `block`."""
    return kept is not None and (kept.block_id, kept.stamp) != (block.b.blockId, block.b.generationStamp)


def same_range(guess: LocatedBlocks, answer: LocatedBlocks, offset: int, length: int) -> bool:
    """Whether bytes read as `guess` says are the bytes `answer` names for [offset, offset+length)."""
    if _identity(guess) != _identity(answer) or not finalized(answer):
        return False
    n = clamp(offset, length, answer.fileLength)
    return touched(guess.blocks, offset, n) == touched(answer.blocks, offset, n)
