"""viewfs mount tables (pure): parsing fs.viewfs.mounttable.* as Hadoop's InodeTree does, and
resolving view paths to a namespace and a path there."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hdfsfuse.conf.hadoop import ViewTarget, resolve_source
from hdfsfuse.conf.mounttable import Internal, Link, MountTable, view_name
from hdfsfuse.errors import ConfigError, FileNotFound

P = "fs.viewfs.mounttable.c."


def test_links_fallback_and_internal_directories() -> None:
    t = MountTable.from_conf("c", {
        P + "link./data": "hdfs://ns1/warehouse",
        P + "link./user/logs": "hdfs://ns0/applogs",
        P + "link./user/alice": "hdfs://ns1/",
        P + "linkFallback": "hdfs://ns0/base",
        P + "homedir": "/user",  # ignored, as Hadoop ignores it for resolution
        "fs.viewfs.mounttable.other.link./x": "hdfs://ns9/x",  # another table
    })
    assert t.resolve("/data") == Link("hdfs://ns1", "/warehouse")
    assert t.resolve("/data/2024/part-0") == Link("hdfs://ns1", "/warehouse/2024/part-0")
    assert t.resolve("/user/logs/a.log") == Link("hdfs://ns0", "/applogs/a.log")
    assert t.resolve("/user/alice/x") == Link("hdfs://ns1", "/x")
    assert t.resolve("//user///logs/") == Link("hdfs://ns0", "/applogs")
    # Not a mount point: the fallback holds the whole path, under its own base.
    assert t.resolve("/tmp/y") == Link("hdfs://ns0", "/base/tmp/y")
    assert t.resolve("/user/bob") == Link("hdfs://ns0", "/base/user/bob")
    root = t.resolve("/")
    assert root == Internal("/", ("data", "user"), Link("hdfs://ns0", "/base"))
    assert t.resolve("/user") == Internal("/user", ("alice", "logs"), Link("hdfs://ns0", "/base/user"))
    assert t.targets() == ["hdfs://ns0", "hdfs://ns1"]  # the fallback first: the primary namespace


def test_without_a_fallback_other_paths_do_not_exist() -> None:
    t = MountTable.from_conf("c", {P + "link./a/b": "hdfs://ns0/b"})
    assert t.resolve("/a") == Internal("/a", ("b",), None)
    with pytest.raises(FileNotFound, match="/x: no such file"):
        t.resolve("/x/y")
    with pytest.raises(FileNotFound, match="/a/c: no such file"):
        t.resolve("/a/c")
    assert t.targets() == ["hdfs://ns0"]


def test_merge_slash_is_the_whole_view() -> None:
    t = MountTable.from_conf("c", {P + "linkMergeSlash": "hdfs://ns1/"})
    assert t.resolve("/") == Link("hdfs://ns1", "/")
    assert t.resolve("/a/b") == Link("hdfs://ns1", "/a/b")
    t = MountTable.from_conf("c", {P + "linkMergeSlash": "hdfs://nn:8020/top"})
    assert t.resolve("/a") == Link("hdfs://nn:8020", "/top/a")


@pytest.mark.parametrize(("conf", "message"), [
    ({}, "the mount table is empty"),
    ({P + "link./": "hdfs://ns0/"}, "linkMergeSlash"),
    ({P + "linkMergeSlash": "hdfs://ns0/", P + "link./a": "hdfs://ns1/a"}, "cannot be combined"),
    ({P + "linkMergeSlash": "hdfs://ns0/", P + "linkFallback": "hdfs://ns1/"}, "cannot be combined"),
    ({P + "link./a": "hdfs://ns0/a", P + "link./a/b": "hdfs://ns1/b"}, "nested mount points are not supported"),
    ({P + "link./a/b": "hdfs://ns1/b", P + "link./a": "hdfs://ns0/a"}, "nested mount points are not supported"),
    ({P + "link./a": "file:///tmp"}, "not an hdfs:// URI"),
    ({P + "link./a": "s3a://bucket/x"}, "not an hdfs:// URI"),
    ({P + "link./a": "hdfs:///x"}, "names no NameNode"),
    ({P + "link./a": "hdfs://ns0/x?y=1"}, "query strings"),
    ({P + "link.relative": "hdfs://ns0/x"}, "not an absolute path"),
    ({P + "link./a/../b": "hdfs://ns0/x"}, "not an absolute path"),
    ({P + "linkMerge./a": "hdfs://ns0/x,hdfs://ns1/x"}, "linkMerge mount points are not supported"),
    ({P + "linkNfly.minReplication=2./a": "hdfs://ns0/x"}, "linkNfly mount points are not supported"),
    ({P + "linkRegex.^/user/(\\w+)": "hdfs://ns0/$1"}, "linkRegex mount points are not supported"),
    ({P + "lnk./a": "hdfs://ns0/x"}, "not a mount table entry"),
])
def test_bad_mount_tables_are_refused_with_the_key(conf: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        MountTable.from_conf("c", conf)


def test_view_uris_name_their_table() -> None:
    assert view_name("viewfs://cluster/", {}) == ("cluster", "/")
    assert view_name("viewfs://cluster/a//b/", {}) == ("cluster", "/a/b")
    assert view_name("viewfs:///data", {}) == ("default", "/data")
    assert view_name("viewfs:///", {"fs.viewfs.mounttable.default.name.key": "prod"}) == ("prod", "/")
    for bad in ("viewfs://c/a?x=1", "viewfs://u@c/", "viewfs://c/../etc"):
        with pytest.raises(ConfigError):
            view_name(bad, {})


def test_a_viewfs_source_resolves_every_namespace_it_names() -> None:
    conf = {
        "dfs.nameservices": "ns0,ns1",
        "dfs.ha.namenodes.ns0": "a,b",
        "dfs.namenode.rpc-address.ns0.a": "h1:8020",
        "dfs.namenode.rpc-address.ns0.b": "h2:8020",
        "dfs.namenode.rpc-address.ns1": "h3:9000",
        P + "link./a": "hdfs://ns0/x",
        P + "link./b": "hdfs://ns1/y",
        P + "link./c": "hdfs://h4:7000/z",
    }
    target = resolve_source("viewfs://c/a", conf)
    assert isinstance(target, ViewTarget)
    assert target.label == "viewfs://c" and target.path == "/a"
    assert {uri: ns.addresses for uri, ns in target.namespaces.items()} == {
        "hdfs://ns0": (("h1", 8020), ("h2", 8020)),
        "hdfs://ns1": (("h3", 9000),),
        "hdfs://h4:7000": (("h4", 7000),),
    }
    with pytest.raises(ConfigError, match="the mount table is empty"):
        resolve_source("viewfs://nosuchtable/", conf)
    with pytest.raises(ConfigError, match="nameservice ns2 is listed"):
        resolve_source("viewfs://d/", {**conf, "dfs.nameservices": "ns0,ns1,ns2",
                                       "fs.viewfs.mounttable.d.link./q": "hdfs://ns2/q"})


names = st.text(alphabet="abc", min_size=1, max_size=2)
paths = st.lists(names, min_size=1, max_size=3).map(lambda p: "/" + "/".join(p))
TARGETS = {"hdfs://ns0/t": ("hdfs://ns0", "/t"), "hdfs://ns1/": ("hdfs://ns1", "/")}


@given(links=st.dictionaries(paths, st.sampled_from(sorted(TARGETS)), min_size=1, max_size=5),
       fallback=st.booleans(), probe=st.lists(names, max_size=4))
def test_resolution_matches_the_mount_point_prefix(links: dict[str, str], fallback: bool,
                                                   probe: list[str]) -> None:
    """Against a reference: the mount point that is a prefix of the path holds it; a proper prefix
    of a mount point is an internal directory; anything else is the fallback's, or missing."""
    conf = {P + f"link.{src}": target for src, target in links.items()}
    if fallback:
        conf[P + "linkFallback"] = "hdfs://fb/base"
    sources = {tuple(src.strip("/").split("/")): target for src, target in links.items()}
    if any(a != b and b[: len(a)] == a for a in sources for b in sources):
        with pytest.raises(ConfigError, match="nested"):
            MountTable.from_conf("c", conf)
        return
    t = MountTable.from_conf("c", conf)
    path = "/" + "/".join(probe)
    owners = [src for src in sources if tuple(probe[: len(src)]) == src]
    below = {src[len(probe)] for src in sources if len(src) > len(probe) and src[: len(probe)] == tuple(probe)}
    if owners:
        uri, base = TARGETS[sources[owners[0]]]
        rest = probe[len(owners[0]):]
        assert t.resolve(path) == Link(uri, "/".join([base.rstrip("/"), *rest]) if rest else base)
    elif below:
        where = t.resolve(path)
        assert isinstance(where, Internal) and set(where.children) == below
    elif fallback:
        assert t.resolve(path) == Link("hdfs://fb", "/base" + ("" if path == "/" else path))
    else:
        with pytest.raises(FileNotFound):
            t.resolve(path)
