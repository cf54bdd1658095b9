"""viewfs mount tables: parse `fs.viewfs.mounttable.NAME.*` and resolve view paths. Pure code.

A client-side mount table joins several HDFS namespaces into one tree, as Hadoop's
ViewFileSystem does (InodeTree):

    fs.viewfs.mounttable.NAME.link./data       = hdfs://ns0/data
    fs.viewfs.mounttable.NAME.link./user/logs  = hdfs://ns1/logs
    fs.viewfs.mounttable.NAME.linkFallback     = hdfs://ns0/          (every other path)
  or, alone:
    fs.viewfs.mounttable.NAME.linkMergeSlash   = hdfs://ns1/          (the whole view is one target)

    /                  internal directory: data, user (+ the fallback's entries of /)
    /user              internal directory: logs (+ the fallback's /user)
    /user/logs/a.log   link     -> hdfs://ns1  /logs/a.log
    /tmp/x             fallback -> hdfs://ns0  /tmp/x

`resolve(path)` answers a `Link` (a namespace and the path inside it) or an `Internal` directory
that only the table makes. Like Hadoop's default (nested mount points off), a link inside another
link is refused, and so are linkMerge, linkNfly and linkRegex, which hdfsfuse does not build.
"""

from __future__ import annotations

import dataclasses
from urllib.parse import urlsplit

from hdfsfuse.errors import ConfigError, FileNotFound

PREFIX = "fs.viewfs.mounttable"
DEFAULT_TABLE = "default"
DEFAULT_TABLE_KEY = "fs.viewfs.mounttable.default.name.key"
_UNSUPPORTED = ("linkMerge.", "linkNfly", "linkRegex")


@dataclasses.dataclass(frozen=True)
class Link:
    """A view path inside one HDFS namespace: its `target` ("hdfs://ns0") and the path there."""

    target: str
    remote: str


@dataclasses.dataclass(frozen=True)
class Internal:
    """A directory the table itself makes: its mount-point children, and where the fallback
    holds the same directory (its entries are listed beside the children), if there is one."""

    path: str
    children: tuple[str, ...]
    fallback: Link | None


@dataclasses.dataclass
class _Node:
    children: dict[str, _Node] = dataclasses.field(default_factory=dict)
    link: Link | None = None  # a mount point: where its subtree lives


def _split_target(key: str, uri: str) -> Link:
    """("hdfs://ns0", "/data") from a link target "hdfs://ns0/data"."""
    try:
        parts = urlsplit(uri.strip())
    except ValueError as e:
        raise ConfigError(f"{key}: bad target {uri!r}: {e}") from None
    if parts.scheme != "hdfs":
        raise ConfigError(f"{key}: target {uri!r} is not an hdfs:// URI; hdfsfuse mounts HDFS namespaces only")
    if not parts.netloc:
        raise ConfigError(f"{key}: target {uri!r} names no NameNode or nameservice")
    if parts.query or parts.fragment:
        raise ConfigError(f"{key}: target {uri!r}: query strings and fragments are not allowed")
    return Link(f"hdfs://{parts.netloc}", _normal(parts.path or "/", key))


def _normal(path: str, what: str) -> str:
    names = [n for n in path.split("/") if n]
    if not path.startswith("/") or any(n in (".", "..") for n in names) or "\x00" in path:
        raise ConfigError(f"{what}: {path!r} is not an absolute path")
    return "/" + "/".join(names)


def _under(base: str, rest: list[str]) -> str:
    """`rest` (path names) inside `base`."""
    if not rest:
        return base
    return base.rstrip("/") + "/" + "/".join(rest)


class MountTable:
    """One viewfs mount table."""

    def __init__(self, name: str, links: dict[str, Link], fallback: Link | None = None,
                 merge_slash: Link | None = None) -> None:
        if not links and fallback is None and merge_slash is None:
            raise ConfigError(f"viewfs://{name}/: the mount table is empty (no {PREFIX}.{name}.link.* entries)")
        if merge_slash is not None and (links or fallback is not None):
            raise ConfigError(f"{PREFIX}.{name}.linkMergeSlash cannot be combined with other links or a fallback")
        self.name = name
        self.fallback = fallback
        self.merge_slash = merge_slash
        self._root = _Node()
        for src in sorted(links):  # shortest first: a parent link is placed before its children
            self._add(src, links[src])

    @classmethod
    def from_conf(cls, name: str, conf: dict[str, str]) -> MountTable:
        """The table `name` from the Hadoop configuration (ConfigError when it is malformed)."""
        prefix = f"{PREFIX}.{name}."
        links: dict[str, Link] = {}
        fallback = merge_slash = None
        for key, value in conf.items():
            if not key.startswith(prefix) or key == DEFAULT_TABLE_KEY:
                continue
            entry = key[len(prefix):]
            if entry.startswith("link."):
                src = entry[len("link."):]
                if _normal(src, key) == "/":
                    raise ConfigError(f"{key}: a link of / is written as {prefix}linkMergeSlash")
                links[_normal(src, key)] = _split_target(key, value)
            elif entry == "linkFallback":
                fallback = _split_target(key, value)
            elif entry == "linkMergeSlash":
                merge_slash = _split_target(key, value)
            elif entry.startswith(_UNSUPPORTED):
                raise ConfigError(f"{key}: {entry.split('.')[0]} mount points are not supported by hdfsfuse")
            elif entry.startswith("homedir"):
                continue  # the home directory prefix: nothing a mount uses
            else:
                raise ConfigError(f"{key}: not a mount table entry (link.PATH, linkFallback or linkMergeSlash)")
        return cls(name, links, fallback, merge_slash)

    def _add(self, src: str, link: Link) -> None:
        node = self._root
        names = [n for n in src.split("/") if n]
        for i, name in enumerate(names):
            if node.link is not None:
                raise ConfigError(f"{PREFIX}.{self.name}.link.{src}: nested inside the mount point "
                                  f"/{'/'.join(names[:i])}; nested mount points are not supported")
            node = node.children.setdefault(name, _Node())
        if node.children:
            raise ConfigError(f"{PREFIX}.{self.name}.link.{src}: other mount points are nested inside it; "
                              "nested mount points are not supported")
        node.link = link

    def targets(self) -> list[str]:
        """Every namespace the table names, each once, the fallback (or merge-slash) first."""
        found: list[str] = []
        for link in (self.merge_slash, self.fallback, *self._links(self._root)):
            if link is not None and link.target not in found:
                found.append(link.target)
        return found

    def _links(self, node: _Node) -> list[Link]:
        found = [node.link] if node.link is not None else []
        for child in node.children.values():
            found += self._links(child)
        return found

    def resolve(self, path: str) -> Link | Internal:
        """Where the view path `path` lives (FileNotFound: under no mount point, and no fallback)."""
        names = [n for n in path.split("/") if n]
        if self.merge_slash is not None:
            return Link(self.merge_slash.target, _under(self.merge_slash.remote, names))
        node = self._root
        for i, name in enumerate(names):
            child = node.children.get(name)
            if child is None:
                if self.fallback is not None:
                    return Link(self.fallback.target, _under(self.fallback.remote, names))
                raise FileNotFound(f"/{'/'.join(names[: i + 1])}: no such file or directory in viewfs://{self.name}/")
            if child.link is not None:
                return Link(child.link.target, _under(child.link.remote, names[i + 1:]))
            node = child
        fallback = None if self.fallback is None else Link(self.fallback.target, _under(self.fallback.remote, names))
        return Internal("/" + "/".join(names), tuple(sorted(node.children)), fallback)


def view_name(uri: str, conf: dict[str, str]) -> tuple[str, str]:
    """(mount table name, path) of a viewfs:// URI; `viewfs:///p` names the default table."""
    try:
        parts = urlsplit(uri.strip())
    except ValueError as e:
        raise ConfigError(f"bad URI {uri!r}: {e}") from None
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ConfigError(f"bad URI {uri!r}: only viewfs://TABLE/PATH is allowed")
    name = parts.netloc or conf.get(DEFAULT_TABLE_KEY, "").strip() or DEFAULT_TABLE
    return name, _normal(parts.path or "/", f"bad URI {uri!r}")
