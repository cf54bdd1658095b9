"""Blocks of finalized files that earlier reads were told of, for a `cat_file` to start its
DataNode read at once, while the NameNode is asked where the range lies. The answer then decides:
the bytes are returned only if it names the same file length and the same blocks (block id and
generation stamp) for the range; otherwise they are dropped and the range is read as the answer
says. Pure bookkeeping, bounded in files and in blocks per file.

Block ids are never reused, and a block's bytes do not change under one generation stamp (an
append, a truncate or a recovery gives it a new one), so bytes read from the same block as the
answer names are the bytes the answer would have read.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable

from hdfsfuse.datanode.pieces import clamp
from hdfsfuse.proto import hdfs_pb2

LocatedBlocks = hdfs_pb2.LocatedBlocksProto
LocatedBlock = hdfs_pb2.LocatedBlockProto

SEEN_FILES = 1024  # files whose blocks are kept, the least recently read dropped first
SEEN_BLOCKS = 64  # blocks kept per file, the oldest dropped first


class _Seen:
    __slots__ = ("answer", "blocks")

    def __init__(self, answer: LocatedBlocks) -> None:
        self.answer = answer  # the newest answer: the file's length, EC policy and encryption
        self.blocks: collections.OrderedDict[int, LocatedBlock] = collections.OrderedDict()  # by offset


def _identity(lbs: LocatedBlocks) -> tuple[int, str, bytes]:
    return (lbs.fileLength, lbs.ecPolicy.name if lbs.HasField("ecPolicy") else "",
            lbs.fileEncryptionInfo.iv if lbs.HasField("fileEncryptionInfo") else b"")


def finalized(lbs: LocatedBlocks) -> bool:
    """A file no longer written: its blocks and length can only change under new stamps."""
    return not lbs.underConstruction and (not lbs.HasField("lastBlock") or lbs.isLastBlockComplete)


def _holds(block: LocatedBlock, offset: int, n: int) -> bool:
    """Whether the block holds part of [offset, offset+n)."""
    return n > 0 and block.offset < offset + n and offset < block.offset + block.b.numBytes


def _other(kept: LocatedBlock | None, block: LocatedBlock) -> bool:
    """Whether a kept block at the same offset is not the same block as `block`."""
    return kept is not None and (kept.b.blockId, kept.b.generationStamp) != (block.b.blockId, block.b.generationStamp)


def touched(blocks: Iterable[LocatedBlock], offset: int, n: int) -> list[tuple[int, int, int, int]]:
    """(offset, block id, generation stamp, length) of each block holding part of [offset, offset+n)."""
    return sorted((b.offset, b.b.blockId, b.b.generationStamp, b.b.numBytes) for b in blocks if _holds(b, offset, n))


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
        if seen is None or _identity(seen.answer) != _identity(lbs) or any(
                _other(seen.blocks.get(block.offset), block) for block in lbs.blocks):
            seen = self._seen[path] = _Seen(lbs)  # another file, or this one changed: start over
        seen.answer = lbs
        for block in lbs.blocks:
            seen.blocks[block.offset] = block
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
        n = clamp(offset, length, seen.answer.fileLength)
        blocks = [b for b in seen.blocks.values() if _holds(b, offset, n)]
        covered = offset
        for block in sorted(blocks, key=lambda b: b.offset):
            if block.offset > covered:
                return None
            covered = max(covered, block.offset + block.b.numBytes)
        if n and covered < offset + n:
            return None
        guess = LocatedBlocks(fileLength=seen.answer.fileLength, underConstruction=False,
                              isLastBlockComplete=True, blocks=blocks)
        if seen.answer.HasField("ecPolicy"):
            guess.ecPolicy.CopyFrom(seen.answer.ecPolicy)
        if seen.answer.HasField("fileEncryptionInfo"):
            guess.fileEncryptionInfo.CopyFrom(seen.answer.fileEncryptionInfo)
        return guess


def same_range(guess: LocatedBlocks, answer: LocatedBlocks, offset: int, length: int) -> bool:
    """Whether bytes read as `guess` says are the bytes `answer` names for [offset, offset+length)."""
    if _identity(guess) != _identity(answer) or not finalized(answer):
        return False
    n = clamp(offset, length, answer.fileLength)
    return touched(guess.blocks, offset, n) == touched(answer.blocks, offset, n)
