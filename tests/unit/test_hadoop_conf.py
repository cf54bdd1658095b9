"""Hadoop configuration parsing and hdfs:// URI resolution (inline XML, no cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hdfsfuse.conf.hadoop import load_hadoop_conf, parse_hadoop_xml, resolve_uri
from hdfsfuse.errors import ConfigError

CORE = b"""<?xml version="1.0"?>
<configuration>
  <property><name>fs.defaultFS</name><value>hdfs://mycluster</value></property>
</configuration>
"""
HDFS = b"""<?xml version="1.0"?>
<configuration>
  <property><name>dfs.nameservices</name><value>mycluster</value></property>
  <property><name>dfs.ha.namenodes.mycluster</name><value>nn1, nn2</value></property>
  <property><name>dfs.namenode.rpc-address.mycluster.nn1</name><value>nn-a.example:8020</value></property>
  <property><name>dfs.namenode.rpc-address.mycluster.nn2</name><value>nn-b.example:9000</value></property>
  <property><name>dfs.blocksize</name><value> 134217728 </value></property>
  <property><name></name><value>ignored</value></property>
</configuration>
"""


@pytest.fixture
def conf_dir(tmp_path: Path) -> Path:
    (tmp_path / "core-site.xml").write_bytes(CORE)
    (tmp_path / "hdfs-site.xml").write_bytes(HDFS)
    return tmp_path


def test_parse_properties() -> None:
    props = parse_hadoop_xml(HDFS)
    assert props["dfs.ha.namenodes.mycluster"] == "nn1, nn2"
    assert props["dfs.blocksize"] == "134217728"
    assert "" not in props


def test_nameservice_with_two_namenodes(conf_dir: Path) -> None:
    conf = load_hadoop_conf(str(conf_dir))
    t = resolve_uri("hdfs://mycluster/data/x", conf)
    assert t.label == "mycluster" and t.ha
    assert t.addresses == (("nn-a.example", 8020), ("nn-b.example", 9000))
    assert t.path == "/data/x"


def test_default_fs_from_env(conf_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf_dir))
    t = resolve_uri("hdfs:///logs", load_hadoop_conf())
    assert t.label == "mycluster" and t.path == "/logs" and len(t.addresses) == 2


def test_hadoop_home_fallback(conf_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / "etc").mkdir(parents=True)
    (home / "etc" / "hadoop").symlink_to(conf_dir)
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.setenv("HADOOP_HOME", str(home))
    assert load_hadoop_conf()["fs.defaultFS"] == "hdfs://mycluster"


@pytest.mark.parametrize(
    ("uri", "addresses", "path"),
    [
        ("hdfs://nn:9000/a/b", (("nn", 9000),), "/a/b"),
        ("hdfs://nn/a", (("nn", 8020),), "/a"),
        ("hdfs://nn", (("nn", 8020),), "/"),
        ("hdfs://127.0.0.1:1234//x//y/", (("127.0.0.1", 1234),), "/x/y"),
        ("hdfs://[::1]:8021/z", (("::1", 8021),), "/z"),
        ("hdfs://nn:9000/with%20space", (("nn", 9000),), "/with space"),
    ],
)
def test_uri_forms(uri: str, addresses: tuple[tuple[str, int], ...], path: str) -> None:
    t = resolve_uri(uri, {})
    assert t.addresses == addresses and t.path == path


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("http://nn:8020/", "scheme"),
        ("nn:8020/x", "scheme"),
        ("hdfs://nn:99999/", "(?i)port"),
        ("hdfs://nn:0/", "port"),
        ("hdfs://nn:abc/", "(?i)port"),
        ("hdfs:///x", "fs.defaultFS"),
        ("hdfs://nn/x?y=1", "query"),
        ("hdfs://u@nn/x", "user"),
        ("hdfs://nn/a/../b", "'..'"),
        ("hdfs://:8020/x", "host"),
    ],
)
def test_bad_uris(uri: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_uri(uri, {})


def test_nameservice_without_addresses_is_an_error() -> None:
    conf = {"dfs.nameservices": "ns", "dfs.ha.namenodes.ns": "a,b", "dfs.namenode.rpc-address.ns.a": "h:1"}
    with pytest.raises(ConfigError, match="NameNode b"):
        resolve_uri("hdfs://ns/", conf)
    with pytest.raises(ConfigError, match="no NameNode addresses"):
        resolve_uri("hdfs://ns/", {"dfs.nameservices": "ns"})


def test_federated_nameservice_without_ha() -> None:
    t = resolve_uri("hdfs://ns/", {"dfs.namenode.rpc-address.ns": "host:7000"})
    assert t.addresses == (("host", 7000),) and not t.ha


def test_bad_config_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid XML"):
        parse_hadoop_xml(b"<configuration><property>")
    with pytest.raises(ConfigError, match="root element"):
        parse_hadoop_xml(b"<html/>")
    with pytest.raises(ConfigError, match="does not exist"):
        load_hadoop_conf(str(tmp_path / "missing"))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_xml_parser_bytes(data: bytes) -> None:
    try:
        parse_hadoop_xml(data)
    except ConfigError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=20), st.text(max_size=20)), max_size=5))
def test_fuzz_xml_parser_structured(props: list[tuple[str, str]]) -> None:
    from xml.sax.saxutils import escape

    body = "".join(f"<property><name>{escape(n)}</name><value>{escape(v)}</value></property>" for n, v in props)
    try:
        parsed = parse_hadoop_xml(f"<configuration>{body}</configuration>".encode())
    except ConfigError:
        return  # e.g. control characters, which XML forbids
    for name, _value in props:
        name = name.replace("\r\n", "\n").replace("\r", "\n").strip()  # XML normalizes line ends
        if name:
            assert name in parsed


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_fuzz_uri_resolution(uri: str) -> None:
    try:
        t = resolve_uri(uri, {})
    except ConfigError:
        return
    assert t.path.startswith("/") and t.addresses


@pytest.mark.parametrize(
    ("value", "expected"),
    [("[::1]:8020", ("::1", 8020)), ("[fe80::2]", ("fe80::2", 8020)), ("fe80::2", ("fe80::2", 8020)),
     ("[2001:db8::7]:9000", ("2001:db8::7", 9000))],
)
def test_ipv6_namenode_addresses_in_config(value: str, expected: tuple[str, int]) -> None:
    t = resolve_uri("hdfs://ns/", {"dfs.ha.namenodes.ns": "a", "dfs.namenode.rpc-address.ns.a": value})
    assert t.addresses == (expected,)


def test_ipv6_uri_label_and_datanode_addresses() -> None:
    from hdfsfuse.conf.hadoop import ClusterSettings
    from hdfsfuse.datanode.context import xfer_address
    from hdfsfuse.proto import hdfs_pb2

    assert resolve_uri("hdfs://[::1]:8021/z", {}).label == "[::1]:8021"
    loc = hdfs_pb2.DatanodeInfoProto()
    loc.id.ipAddr, loc.id.hostName, loc.id.xferPort = "fd00::5", "dn5.example.com", 9866
    assert xfer_address(loc) == "[fd00::5]:9866"
    assert xfer_address(loc, use_hostname=True) == "dn5.example.com:9866"
    settings = ClusterSettings.from_conf({"dfs.client.use.datanode.hostname": "true",
                                          "dfs.data.transfer.protection": " privacy "})
    assert settings.use_datanode_hostname and settings.data_transfer_protection == "privacy"
    assert resolve_uri("hdfs://nn:1/", {"dfs.client.use.datanode.hostname": "true"}).settings == settings.__class__(
        use_datanode_hostname=True)


def test_a_router_nameservice_is_known_by_its_proxy_provider() -> None:
    conf = {"dfs.nameservices": "fed,ha", "dfs.namenode.rpc-address.fed": "r1:8888",
            "dfs.client.failover.proxy.provider.fed":
                "org.apache.hadoop.hdfs.server.namenode.ha.RouterObserverReadConfiguredFailoverProxyProvider",
            "dfs.namenode.rpc-address.ha": "n1:8020",
            "dfs.client.failover.proxy.provider.ha":
                "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider"}
    assert resolve_uri("hdfs://fed/", conf).router
    assert not resolve_uri("hdfs://ha/", conf).router
    assert not resolve_uri("hdfs://n1:8020/", conf).router
