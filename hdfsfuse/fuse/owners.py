"""HDFS owner and group names shown as local uids and gids: by name, falling back to the mount's ids."""

from __future__ import annotations

import grp
import pwd
from collections.abc import Callable


class OwnerIds:
    """HDFS owner/group names to local ids by name, falling back to the configured ids."""

    def __init__(self, uid: int, gid: int) -> None:
        self.uid = uid
        self.gid = gid
        self._users: dict[str, int] = {}
        self._groups: dict[str, int] = {}

    def user(self, name: str) -> int:
        return self._resolve(self._users, name, lambda n: pwd.getpwnam(n).pw_uid, self.uid)

    def group(self, name: str) -> int:
        return self._resolve(self._groups, name, lambda n: grp.getgrnam(n).gr_gid, self.gid)

    @staticmethod
    def known_user(name: str) -> int | None:
        """The local uid of exactly this user, or None (no fallback: for ACL entries)."""
        try:
            return pwd.getpwnam(name).pw_uid
        except KeyError:
            return None

    @staticmethod
    def known_group(name: str) -> int | None:
        try:
            return grp.getgrnam(name).gr_gid
        except KeyError:
            return None

    @staticmethod
    def _resolve(cache: dict[str, int], name: str, lookup: Callable[[str], int], fallback: int) -> int:
        if name not in cache:
            try:
                cache[name] = lookup(name)
            except KeyError:
                cache[name] = fallback
        return cache[name]
