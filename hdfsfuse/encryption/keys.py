"""Data keys held in memory. Pure code: the caller passes the time.

A data key (DEK) is what the KMS decrypts an EDEK to. It is kept only in this process's memory:
never logged (its repr withholds it), never written anywhere. The cache is keyed by the identity
that asked as well as by the EDEK and its key version, because the KMS's key ACLs decide per
user: a key one user was given is never handed to another without asking the KMS as them.

A key stays while any open file holds it (the files keep it, the cache only refers to it weakly),
and for `keep_seconds` after it was last asked for, so reopening a file needs no KMS call.
"""

from __future__ import annotations

import collections
import weakref

KeyId = tuple[str, bytes, str]  # (identity, EDEK, key version name)


class DataKey:
    """A decrypted data key. Its bytes are in `material`; its repr never shows them."""

    __slots__ = ("__weakref__", "material")

    def __init__(self, material: bytes) -> None:
        self.material = material

    def __repr__(self) -> str:
        return f"DataKey(<{len(self.material) * 8}-bit key withheld>)"


class KeyCache:
    def __init__(self, keep_seconds: float = 600.0, max_entries: int = 4096) -> None:
        self.keep_seconds = keep_seconds
        self.max_entries = max_entries
        self._kept: collections.OrderedDict[KeyId, tuple[DataKey, float]] = collections.OrderedDict()
        self._in_use: weakref.WeakValueDictionary[KeyId, DataKey] = weakref.WeakValueDictionary()

    def get(self, key_id: KeyId, now: float) -> DataKey | None:
        entry = self._kept.get(key_id)
        key = entry[0] if entry is not None and entry[1] > now else self._in_use.get(key_id)
        if key is None:
            self._kept.pop(key_id, None)
            return None
        self._keep(key_id, key, now)
        return key

    def put(self, key_id: KeyId, key: DataKey, now: float) -> None:
        self._in_use[key_id] = key
        self._keep(key_id, key, now)

    def _keep(self, key_id: KeyId, key: DataKey, now: float) -> None:
        self._kept[key_id] = (key, now + self.keep_seconds)
        self._kept.move_to_end(key_id)
        while len(self._kept) > self.max_entries or (self._kept and next(iter(self._kept.values()))[1] <= now):
            self._kept.popitem(last=False)

    def __len__(self) -> int:
        """Keys held: kept ones, and those only open files still hold."""
        return len(set(self._kept) | set(self._in_use.keys()))
