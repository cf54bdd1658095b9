"""Mount options: parse `-o a,b=c,...` into a validated `MountOptions`. Pure code, no I/O.

Options that only mount(8) understands (`_netdev`, `nofail`, `defaults`, `auto`, `x-*`, ...)
are dropped here so libfuse never sees them; an unknown option is a clear error.
"""

from __future__ import annotations

import dataclasses
import logging
import re

from hdfsfuse.errors import ConfigError

KiB = 1024
MiB = 1024 * KiB

# mount(8)/mount.fuse3 options that mean nothing to us: dropped silently.
_DROPPED = {
    "defaults", "auto", "noauto", "user", "nouser", "users", "owner", "group", "_netdev", "nofail", "rw",
    "dev", "nodev", "suid", "nosuid", "relatime", "norelatime", "strictatime", "lazytime", "async", "sync",
    "dirsync", "loud", "silent",
}
_DROPPED_PREFIXES = ("x-", "comment=", "context=", "fscontext=", "defcontext=", "rootcontext=", "helper=")
# Passed to libfuse as given.
_PASSTHROUGH = {"exec", "noexec", "atime", "noatime"}

LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


@dataclasses.dataclass
class MountOptions:
    """Every option hdfsfuse accepts after -o, with its default."""

    allow_other: bool = False
    default_permissions: bool = False
    uid: int | None = None  # owner for HDFS users with no local account (default: the mounting user)
    gid: int | None = None
    user: str | None = None  # the HDFS user name (default: $HADOOP_USER_NAME, else the login name)
    hadoop_conf: str | None = None
    keytab: str | None = None  # with principal: log in from this keytab (a Kerberos cluster)
    principal: str | None = None
    token_file: str | None = None  # a delegation-token file (default: $HADOOP_TOKEN_FILE_LOCATION)
    kms_ca_file: str | None = None  # CA certificates an https KMS is checked against (default: the system's)
    identity: str = "mount"  # mount | caller | ticket_cache: whose HDFS identity a request runs as
    entry_timeout: float = 5.0
    attr_timeout: float = 5.0
    negative_timeout: float = 2.0
    direct_io: bool = False
    readahead_max: int = 16 * MiB  # per open file (per data unit of an erasure-coded one)
    readahead_total: int = 128 * MiB  # all open files together
    read_ahead_kb: int = 1024  # the kernel's readahead for this mount (bdi), set when root
    max_background: int = 64  # the kernel's async request limit for this connection, set when root
    connect_timeout: float = 5.0
    read_timeout: float = 10.0
    total_timeout: float = 30.0  # one block read across all replicas
    namenode_timeout: float = 30.0  # one NameNode call across retries and failover
    request_timeout: float = 60.0  # any FUSE request answers within this bound
    hedge_after: float | None = -1.0  # seconds before asking a second replica; -1 adaptive, None off
    listing_page_cap: int | None = None
    metadata_entries: int = 100_000  # names and file locations the mount keeps from listings and opens
    cache_dir: str | None = None  # a persistent block cache (off by default)
    cache_size: int = 10 * 1024 * MiB
    inotify: bool = False  # follow the NameNode's edit stream and invalidate what changed
    short_circuit: bool = True  # auto: read local replicas from their files when the Hadoop config enables it
    log_level: str = "info"
    log_file: str | None = None
    metrics_port: int | None = None
    fsname: str | None = None
    passthrough: list[str] = dataclasses.field(default_factory=list)

    def fuse_options(self, source: str) -> set[str]:
        """The option set handed to pyfuse3.init / libfuse."""
        opts = {"ro", "nosuid", "nodev", f"fsname={self.fsname or source}", "subtype=hdfsfuse"}
        if self.allow_other and self.identity == "mount":
            opts |= {"allow_other", "default_permissions"}
        elif self.allow_other:
            # Each request runs as its caller: the NameNode checks permissions and ACLs itself.
            opts.add("allow_other")
            if self.default_permissions:
                opts.add("default_permissions")
        elif self.default_permissions:
            opts.add("default_permissions")
        opts |= set(self.passthrough)
        return opts


def _size(value: str, name: str) -> int:
    m = re.fullmatch(r"(\d+)\s*([kKmMgG]?)i?[bB]?", value.strip())
    if not m:
        raise ConfigError(f"option {name}: {value!r} is not a size (e.g. 4M, 512k, 1048576)")
    mult = {"": 1, "k": KiB, "m": MiB, "g": 1024 * MiB}[m.group(2).lower()]
    return int(m.group(1)) * mult


def _seconds(value: str, name: str) -> float:
    try:
        v = float(value)
    except ValueError:
        raise ConfigError(f"option {name}: {value!r} is not a number of seconds") from None
    if not 0 <= v <= 86400 or v != v:
        raise ConfigError(f"option {name}: {value!r} must be between 0 and 86400 seconds")
    return v


def _positive_seconds(value: str, name: str) -> float:
    v = _seconds(value, name)
    if v <= 0:
        raise ConfigError(f"option {name}: must be more than 0 seconds")
    return v


def _hedge_after(value: str) -> float | None:
    """`off`, `auto`, or milliseconds (0 to 60000) as seconds."""
    if value == "off":
        return None
    if value == "auto":
        return -1.0
    if not value.isdigit() or int(value) > 60_000:
        raise ConfigError(f"option hedge_after: {value!r} must be off, auto or milliseconds from 0 to 60000")
    return int(value) / 1000


def _id(value: str, name: str) -> int:
    if not value.isdigit() or int(value) >= 2**32 - 1:
        raise ConfigError(f"option {name}: {value!r} is not a numeric id")
    return int(value)


def _int(value: str, name: str, lo: int, hi: int) -> int:
    if not value.isdigit() or not lo <= int(value) <= hi:
        raise ConfigError(f"option {name}: {value!r} must be an integer from {lo} to {hi}")
    return int(value)


_FLAGS = {"allow_other", "default_permissions", "direct_io", "inotify"}
_SECONDS = {"entry_timeout", "attr_timeout", "negative_timeout"}
_POSITIVE_SECONDS = {"connect_timeout", "read_timeout", "total_timeout", "namenode_timeout", "request_timeout"}

HELP = """\
Mount options (-o a,b=c):
  ro                     always on; hdfsfuse is read-only
  allow_other            let every local user in; turns on default_permissions (HDFS mode bits)
  default_permissions    let the kernel check HDFS mode bits
  uid=N,gid=N            owner for HDFS users and groups with no local account (default: yours)
  user=NAME              HDFS user name (default: $HADOOP_USER_NAME, else your login name)
  hadoop_conf=DIR        directory with core-site.xml and hdfs-site.xml (default: $HADOOP_CONF_DIR)
  keytab=FILE,principal=NAME   Kerberos: log in from this keytab (kept in memory, renewed)
                         (default: your ticket cache, $KRB5CCNAME, then a delegation-token file)
  token_file=FILE        Hadoop delegation-token file (default: $HADOOP_TOKEN_FILE_LOCATION)
  identity=MODE          whose HDFS identity each request runs as, with allow_other: mount (the
                         default: everyone is the mount), caller (the mount's principal acts for
                         each local user: a proxy user), ticket_cache (each caller's own tickets)
  kms_ca_file=FILE       CA certificates (PEM) to check an https KMS against, instead of the
                         system's (encryption zones; the KMS is the NameNode's, else
                         hadoop.security.key.provider.path)
  entry_timeout=S        kernel name cache, seconds (default 5)
  attr_timeout=S         kernel attribute cache, seconds (default 5)
  negative_timeout=S     cache of missing names, seconds (default 2)
  direct_io              bypass the page cache: every read reaches HDFS exactly as asked
  readahead_max=SIZE     per-file readahead cap for sequential reads (default 16M; 0 turns it off);
                         an erasure-coded file gets it once per data unit
  readahead_total=SIZE   memory cap for all readahead buffers (default 128M)
  read_ahead_kb=N        kernel readahead for the mount, set when root (default 1024)
  max_background=N       kernel async request limit for the mount, set when root (default 64)
  connect_timeout=S      DataNode connect timeout (default 5)
  read_timeout=S         DataNode read timeout, per wait (default 10)
  total_timeout=S        bound for reading one block across all replicas (default 30)
  namenode_timeout=S     bound for one NameNode call across retries and failover (default 30)
  request_timeout=S      every FUSE request answers within this bound (default 60)
  hedge_after=MS         ask a second replica after MS milliseconds without an answer; `auto` (the
                         default) derives it from each DataNode's recent latency; `off` never hedges
  listing_page_cap=N     stop listing a directory after N pages of 1000 entries (default: no cap)
  metadata_entries=N     names (from listings and lookups) and block locations (of unchanged
                         files) the mount keeps, so opening a listed file asks the NameNode
                         nothing (default 100000 of each; 0 turns both off)
  cache_dir=DIR          keep the blocks read in a persistent local cache here (off by default);
                         entries are keyed by block id and generation stamp, so they never go
                         stale, and are verified on every read; mounts may share the directory
  cache_size=SIZE        the cache's bound on disk (default 10G, shrunk to fit the filesystem)
  inotify                follow the NameNode's edits (inotify; needs the HDFS superuser) and drop
                         the kernel's cached names and attributes of what changed, so a change
                         shows within a second even with long entry_timeout/attr_timeout
  short_circuit=MODE     auto (the default): read replicas on this host's DataNodes from their
                         files, verified, when dfs.client.read.shortcircuit and
                         dfs.domain.socket.path allow it; off: always over TCP
  log_level=LEVEL        debug, info, warning or error (default info)
  log_file=PATH          log here when running in the background (default: syslog)
  metrics_port=N         serve live stats as Prometheus text on 127.0.0.1:N
  fsname=NAME            name shown in /proc/mounts (default: the source URI)
  exec, noexec, atime, noatime   passed to the kernel
  mount(8)-only options (defaults, auto, noauto, user, _netdev, nofail, x-*, ...) are ignored.
"""


def parse_options(option_strings: list[str]) -> MountOptions:
    """Parse the arguments of every -o (each a comma-separated list)."""
    return parse_items([item for group in option_strings for raw in group.split(",") if (item := raw.strip())])


def parse_items(items: list[str]) -> MountOptions:
    """Parse options one `name` or `name=value` each (a value may hold commas), and check them together."""
    opts = MountOptions()
    for item in items:
        _apply(opts, item)
    if (opts.keytab is None) != (opts.principal is None):
        raise ConfigError("options keytab and principal go together: -o keytab=FILE,principal=NAME")
    if opts.identity != "mount" and not opts.allow_other:
        raise ConfigError(f"option identity={opts.identity} needs allow_other (other users must reach the mount)")
    if opts.cache_dir is None and opts.cache_size != MountOptions.cache_size:
        raise ConfigError("option cache_size needs cache_dir=DIR")
    if opts.cache_dir is not None and opts.cache_size < MiB:
        raise ConfigError("option cache_size must be at least 1M")
    if opts.readahead_max > opts.readahead_total:
        if opts.readahead_max != MountOptions.readahead_max:
            raise ConfigError("option readahead_max must not exceed readahead_total")
        opts.readahead_max = opts.readahead_total  # a smaller budget lowers the default cap with it
    return opts


def _apply(opts: MountOptions, item: str) -> None:
    name, has_value, value = item.partition("=")
    if item == "ro":
        return
    if item in _DROPPED or item.startswith(_DROPPED_PREFIXES):
        return
    if item in _PASSTHROUGH:
        opts.passthrough.append(item)
        return
    if name in _FLAGS and not has_value:
        setattr(opts, name, True)
        return
    if not has_value:
        raise ConfigError(f"unknown mount option {item!r} (see hdfsfuse --help)")
    if name in _SECONDS:
        setattr(opts, name, _seconds(value, name))
    elif name in _POSITIVE_SECONDS:
        setattr(opts, name, _positive_seconds(value, name))
    elif name in ("uid", "gid"):
        setattr(opts, name, _id(value, name))
    elif name == "user":
        if not re.fullmatch(r"[A-Za-z0-9_.@$-][A-Za-z0-9_.@$/-]*", value):
            raise ConfigError(f"option user: {value!r} is not a valid user name")
        opts.user = value
    elif name == "hadoop_conf":
        opts.hadoop_conf = value
    elif name in ("keytab", "token_file", "kms_ca_file"):
        if not value:
            raise ConfigError(f"option {name} needs a file")
        setattr(opts, name, value)
    elif name == "principal":
        if not re.fullmatch(r"[A-Za-z0-9_.$-]+(/[A-Za-z0-9_.-]+)?(@[A-Za-z0-9_.-]+)?", value):
            raise ConfigError(f"option principal: {value!r} is not a Kerberos principal (name[/host][@REALM])")
        opts.principal = value
    elif name == "identity":
        if value not in ("mount", "caller", "ticket_cache"):
            raise ConfigError(f"option identity: {value!r} must be mount, caller or ticket_cache")
        opts.identity = value
    elif name in ("readahead_max", "readahead_total", "cache_size"):
        setattr(opts, name, _size(value, name))
    elif name == "cache_dir":
        if not value:
            raise ConfigError("option cache_dir needs a directory")
        opts.cache_dir = value
    elif name == "read_ahead_kb":
        opts.read_ahead_kb = _int(value, name, 0, 1 << 20)
    elif name == "max_background":
        opts.max_background = _int(value, name, 1, 65535)
    elif name == "listing_page_cap":
        opts.listing_page_cap = _int(value, name, 1, 1 << 30)
    elif name == "metadata_entries":
        opts.metadata_entries = _int(value, name, 0, 100_000_000)
    elif name == "log_level":
        if value.lower() not in LOG_LEVELS:
            raise ConfigError(f"option log_level: {value!r} must be one of {', '.join(LOG_LEVELS)}")
        opts.log_level = value.lower()
    elif name == "log_file":
        opts.log_file = value
    elif name == "metrics_port":
        opts.metrics_port = _int(value, name, 1, 65535)
    elif name == "fsname":
        opts.fsname = value
    elif name == "hedge_after":
        opts.hedge_after = _hedge_after(value)
    elif name == "short_circuit":
        if value not in ("auto", "off"):
            raise ConfigError(f"option short_circuit: {value!r} must be auto or off")
        opts.short_circuit = value == "auto"
    else:
        raise ConfigError(f"unknown mount option {item!r} (see hdfsfuse --help)")
