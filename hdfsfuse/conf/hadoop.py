"""Hadoop configuration discovery and hdfs:// URI resolution. Pure parsing plus file reads.

Owns: parsing core-site.xml / hdfs-site.xml (`parse_hadoop_xml`, pure, bytes in), finding the
configuration directory (`load_hadoop_conf`: explicit dir, else $HADOOP_CONF_DIR, else
$HADOOP_HOME/etc/hadoop), and turning a URI into the NameNode addresses to try
(`resolve_uri`):

    hdfs://host:port/path     one NameNode
    hdfs://host/path          one NameNode on port 8020 (unless `host` is a nameservice)
    hdfs://nameservice/path   dfs.ha.namenodes.NS + dfs.namenode.rpc-address.NS.NN
    hdfs:///path              the NameNode(s) of fs.defaultFS
    viewfs://TABLE/path       fs.viewfs.mounttable.TABLE.*: one `NameNodeTarget` per namespace it
                              names (`ViewTarget`, see hdfsfuse.conf.mounttable)
"""

from __future__ import annotations

import dataclasses
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import unquote, urlsplit

from hdfsfuse.conf.mounttable import MountTable, view_name
from hdfsfuse.errors import ConfigError

DEFAULT_PORT = 8020
MAX_CONF_FILE = 16 * 1024 * 1024
CONF_FILES = ("core-site.xml", "hdfs-site.xml")


def parse_hadoop_xml(data: bytes, source: str = "<config>") -> dict[str, str]:
    """Parse one Hadoop configuration file: <configuration><property><name/><value/>..."""
    if len(data) > MAX_CONF_FILE:
        raise ConfigError(f"{source}: larger than {MAX_CONF_FILE} bytes")
    try:
        root = ET.fromstring(data)
    except (ET.ParseError, ValueError) as e:
        raise ConfigError(f"{source}: not valid XML: {e}") from None
    if root.tag != "configuration":
        raise ConfigError(f"{source}: root element is <{root.tag}>, expected <configuration>")
    props: dict[str, str] = {}
    for prop in root.iter("property"):
        name = prop.findtext("name")
        if name is None or not name.strip():
            continue
        props[name.strip()] = (prop.findtext("value") or "").strip()
    return props


def find_conf_dir(explicit: str | None = None) -> Path | None:
    if explicit:
        d = Path(explicit)
        if not d.is_dir():
            raise ConfigError(f"Hadoop configuration directory {explicit} does not exist")
        return d
    if os.environ.get("HADOOP_CONF_DIR"):
        return Path(os.environ["HADOOP_CONF_DIR"])
    if os.environ.get("HADOOP_HOME"):
        return Path(os.environ["HADOOP_HOME"]) / "etc" / "hadoop"
    return None


def load_hadoop_conf(explicit_dir: str | None = None) -> dict[str, str]:
    """Merge core-site.xml then hdfs-site.xml from the configuration directory, if any."""
    conf_dir = find_conf_dir(explicit_dir)
    conf: dict[str, str] = {}
    if conf_dir is None:
        return conf
    for name in CONF_FILES:
        f = conf_dir / name
        if f.is_file():
            if f.stat().st_size > MAX_CONF_FILE:
                raise ConfigError(f"{f}: larger than {MAX_CONF_FILE} bytes")
            conf.update(parse_hadoop_xml(f.read_bytes(), str(f)))
    return conf


@dataclasses.dataclass(frozen=True)
class ClusterSettings:
    """Client-side cluster settings that decide how DataNodes are reached."""

    data_transfer_protection: str = ""  # dfs.data.transfer.protection: SASL on DataNode connections
    use_datanode_hostname: bool = False  # dfs.client.use.datanode.hostname: connect by name, not IP
    kerberos: bool = False  # hadoop.security.authentication=kerberos
    rpc_protection: str = ""  # hadoop.rpc.protection ("" = not configured)
    namenode_principal: str = ""  # dfs.namenode.kerberos.principal, maybe with _HOST
    fallback_to_simple: bool = False  # ipc.client.fallback-to-simple-auth-allowed
    cipher_suites: str = ""  # dfs.encrypt.data.transfer.cipher.suites: AES/CTR after a DataNode handshake
    short_circuit: bool = False  # dfs.client.read.shortcircuit: read local replicas from their files
    domain_socket_path: str = ""  # dfs.domain.socket.path: local DataNodes' sockets (_PORT = xfer port)
    key_provider_path: str = ""  # hadoop.security.key.provider.path: the KMS, if the NameNode names none
    ignore_namenode_kms: bool = False  # dfs.client.ignore.namenode.default.kms.uri: only our own setting

    @classmethod
    def from_conf(cls, conf: dict[str, str]) -> ClusterSettings:
        def flag(key: str) -> bool:
            return conf.get(key, "").strip().lower() == "true"

        authentication = conf.get("hadoop.security.authentication", "simple").strip().lower() or "simple"
        if authentication not in ("simple", "kerberos"):
            raise ConfigError(f"hadoop.security.authentication={authentication!r}: must be simple or kerberos")
        return cls(
            data_transfer_protection=conf.get("dfs.data.transfer.protection", "").strip(),
            use_datanode_hostname=flag("dfs.client.use.datanode.hostname"),
            kerberos=authentication == "kerberos",
            rpc_protection=conf.get("hadoop.rpc.protection", "").strip(),
            namenode_principal=conf.get("dfs.namenode.kerberos.principal", "").strip(),
            fallback_to_simple=flag("ipc.client.fallback-to-simple-auth-allowed"),
            cipher_suites=conf.get("dfs.encrypt.data.transfer.cipher.suites", "").strip(),
            short_circuit=flag("dfs.client.read.shortcircuit"),
            domain_socket_path=conf.get("dfs.domain.socket.path", "").strip(),
            key_provider_path=conf.get("hadoop.security.key.provider.path", "").strip(),
            ignore_namenode_kms=flag("dfs.client.ignore.namenode.default.kms.uri"),
        )


@dataclasses.dataclass(frozen=True)
class NameNodeTarget:
    """Where to find the NameNode(s), which HDFS path the URI names, and how to reach DataNodes."""

    label: str  # "host:port" or the nameservice id, for messages
    addresses: tuple[tuple[str, int], ...]
    path: str
    settings: ClusterSettings = dataclasses.field(default_factory=ClusterSettings)
    observer_reads: bool = False  # the nameservice's proxy provider is ObserverReadProxyProvider
    router: bool = False  # a federation Router (its proxy provider says so; else learnt from its answers)

    @property
    def ha(self) -> bool:
        return len(self.addresses) > 1


def parse_host_port(value: str, default_port: int = DEFAULT_PORT, what: str = "address") -> tuple[str, int]:
    value = value.strip()
    if value.startswith("["):  # [ipv6]:port
        host, _, rest = value[1:].partition("]")
        port_s = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        host, port_s = value.split(":")
    else:
        host, port_s = value, ""
    if not host:
        raise ConfigError(f"bad {what} {value!r}: no host")
    if not port_s:
        return host, default_port
    if not port_s.isdigit() or not 0 < int(port_s) < 65536:
        raise ConfigError(f"bad {what} {value!r}: port must be 1-65535")
    return host, int(port_s)


def _nameservice_addresses(ns: str, conf: dict[str, str]) -> tuple[tuple[str, int], ...] | None:
    nameservices = [s.strip() for s in conf.get("dfs.nameservices", "").split(",") if s.strip()]
    ids = [s.strip() for s in conf.get(f"dfs.ha.namenodes.{ns}", "").split(",") if s.strip()]
    if ids:
        addrs = []
        for nn in ids:
            key = f"dfs.namenode.rpc-address.{ns}.{nn}"
            if key not in conf:
                raise ConfigError(f"nameservice {ns}: NameNode {nn} has no {key}")
            addrs.append(parse_host_port(conf[key], what=key))
        return tuple(addrs)
    single = conf.get(f"dfs.namenode.rpc-address.{ns}")
    if single:
        return (parse_host_port(single, what=f"dfs.namenode.rpc-address.{ns}"),)
    if ns in nameservices:
        raise ConfigError(f"nameservice {ns} is listed in dfs.nameservices but has no NameNode addresses")
    return None


def resolve_uri(uri: str, conf: dict[str, str]) -> NameNodeTarget:
    """Resolve an hdfs:// URI (with an optional path) against the Hadoop configuration."""
    try:
        parts = urlsplit(uri.strip())
        netloc_port = parts.port  # validates the port syntax
    except ValueError as e:
        raise ConfigError(f"bad URI {uri!r}: {e}") from None
    if parts.scheme != "hdfs":
        raise ConfigError(f"bad URI {uri!r}: the scheme must be hdfs:// (or viewfs:// with a mount table)")
    if parts.query or parts.fragment:
        raise ConfigError(f"bad URI {uri!r}: query strings and fragments are not allowed")
    if parts.username or parts.password:
        raise ConfigError(f"bad URI {uri!r}: user info is not allowed; use -o user=NAME")
    path = unquote(parts.path) or "/"
    if not path.startswith("/") or "\x00" in path:
        raise ConfigError(f"bad URI {uri!r}: bad path")
    path = "/" + "/".join(p for p in path.split("/") if p)
    if ".." in path.split("/"):
        raise ConfigError(f"bad URI {uri!r}: '..' is not allowed in the path")

    if not parts.netloc:
        default_fs = conf.get("fs.defaultFS") or conf.get("fs.default.name")
        if not default_fs:
            raise ConfigError(f"{uri!r} names no NameNode and fs.defaultFS is not configured")
        base = resolve_uri(default_fs, conf)
        return dataclasses.replace(base, path=path)

    host = parts.hostname or ""
    if not host:
        raise ConfigError(f"bad URI {uri!r}: no host")
    if netloc_port is None:
        ns_addrs = _nameservice_addresses(host, conf)
        if ns_addrs is not None:
            provider = conf.get(f"dfs.client.failover.proxy.provider.{host}", "").strip()
            # Router*ProxyProvider: Hadoop's providers for Router-based federation.
            return NameNodeTarget(host, ns_addrs, path, ClusterSettings.from_conf(conf),
                                  observer_reads=provider.endswith(".ObserverReadProxyProvider"),
                                  router=".Router" in provider)
        port = DEFAULT_PORT
    else:
        if not 0 < netloc_port < 65536:
            raise ConfigError(f"bad URI {uri!r}: port must be 1-65535")
        port = netloc_port
    label = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return NameNodeTarget(label, ((host, port),), path, ClusterSettings.from_conf(conf))


@dataclasses.dataclass(frozen=True)
class ViewTarget:
    """A viewfs:// mount: its mount table, and the NameNode(s) of every namespace the table names."""

    label: str  # "viewfs://TABLE"
    table: MountTable
    namespaces: dict[str, NameNodeTarget]  # "hdfs://ns0" -> its NameNodes
    path: str  # the mount root inside the view
    settings: ClusterSettings


def resolve_source(uri: str, conf: dict[str, str]) -> NameNodeTarget | ViewTarget:
    """Resolve what a mount names: an hdfs:// URI, or a viewfs:// mount table."""
    if uri.strip().lower().startswith("viewfs:"):
        name, path = view_name(uri, conf)
        table = MountTable.from_conf(name, conf)
        namespaces = {t: resolve_uri(t, conf) for t in table.targets()}
        return ViewTarget(f"viewfs://{name}", table, namespaces, path, ClusterSettings.from_conf(conf))
    return resolve_uri(uri, conf)
