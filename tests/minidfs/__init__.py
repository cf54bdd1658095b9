"""The real-HDFS test harness: builds and drives our MiniDFSCluster launcher.

Owns: building the Java launcher with Maven (once, under a file lock), starting it as a
subprocess, reading its ready line, and the JSON-lines control protocol (one method per
command). Also owns the wire-byte referee: nftables counters on the DataNodes' xfer ports.

Does I/O: subprocesses (mvn, java, nft) and pipes. Test data is always written by the Java
client (`put`), never by hdfsfuse.
"""

from __future__ import annotations

import collections
import dataclasses
import fcntl
import itertools
import json
import os
import re
import selectors
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.minidfs.kms import Kms, KmsError

LAUNCHER_DIR = Path(__file__).resolve().parent
_MAIN_CLASS = "hdfsfuse.minidfs.Main"
_SOURCES = [LAUNCHER_DIR / "pom.xml", *LAUNCHER_DIR.glob("src/main/**/*.*")]

MiB = 1024 * 1024


class MiniDfsError(RuntimeError):
    """The launcher refused a command or failed to start."""


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return "java"


DEFAULT_HADOOP_VERSION = "3.5.0"  # the launcher's pom.xml
ROUTER_HADOOP_VERSION = "3.4.2"  # Maven serves hadoop-hdfs-rbf only up to this release
HADOOP_VERSION_ENV = "HDFSFUSE_HADOOP_VERSION"  # every cluster of a test run on this release
_VERSION = re.compile(r"\d+\.\d+\.\d+")


def default_hadoop_version() -> str | None:
    """The release clusters run unless they name one: $HDFSFUSE_HADOOP_VERSION, else the pom's."""
    return os.environ.get(HADOOP_VERSION_ENV) or None


def ensure_built(router: bool = False, hadoop_version: str | None = None, *, kms: bool = False) -> str:
    """Build the launcher if its sources changed; return the java classpath.

    `router`: the second build, on Hadoop 3.4.2 with Router-based federation (Maven profile
    "router", in target-router/), for --router clusters; Maven serves hadoop-hdfs-rbf only up to
    3.4.2, and one JVM never mixes 3.4 and 3.5 jars. `hadoop_version`: the launcher built against
    that Hadoop release instead of the pom's, in target-hadoop-VERSION/ (each build kept). `kms`:
    the KMS's own JVM (profile "kms", Hadoop 3.4.2 with hadoop-kms, in target-kms/; see tests.minidfs.kms).
    """
    if kms:
        return _build("kms", LAUNCHER_DIR / "target-kms", ["-P", "kms"], "KmsMain")
    if hadoop_version is not None and not _VERSION.fullmatch(hadoop_version):
        raise MiniDfsError(f"--hadoop-version {hadoop_version!r}: a release number such as 3.3.6")
    if hadoop_version == DEFAULT_HADOOP_VERSION or (router and hadoop_version == ROUTER_HADOOP_VERSION):
        hadoop_version = None
    if router and hadoop_version is not None:
        raise MiniDfsError(f"--router clusters run Hadoop {ROUTER_HADOOP_VERSION} (hadoop-hdfs-rbf); "
                           f"--hadoop-version {hadoop_version} does not apply")
    name = "target-router" if router else f"target-hadoop-{hadoop_version}" if hadoop_version else "target"
    target = LAUNCHER_DIR / name
    version_args = [f"-Dhadoop.version={hadoop_version}", f"-Dlauncher.build.dir={target}"] if hadoop_version else []
    on = f" on Hadoop {hadoop_version}" if hadoop_version else ""
    return _build(f"the MiniDFS launcher{on}", target, [*(["-P", "router"] if router else []), *version_args], "Main")


def _build(what: str, target: Path, maven_args: list[str], main: str) -> str:
    """Compile one of the launcher's builds into `target` if its sources changed; its classpath."""
    classes, classpath_file = target / "classes", target / "classpath.txt"
    lock_path = LAUNCHER_DIR / ".build.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        main_class = classes / "hdfsfuse" / "minidfs" / f"{main}.class"
        newest_source = max(p.stat().st_mtime for p in _SOURCES)
        fresh = (
            main_class.exists()
            and classpath_file.exists()
            and main_class.stat().st_mtime >= newest_source
            and classpath_file.stat().st_mtime >= newest_source
        )
        if not fresh:
            cmd = [
                "mvn", "-B", "-q", "-f", str(LAUNCHER_DIR / "pom.xml"), *maven_args,
                "compile", "dependency:build-classpath",
                f"-Dmdep.outputFile={classpath_file}",
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise MiniDfsError(f"building {what} failed:\n" + proc.stdout[-4000:] + proc.stderr[-4000:])
            main_class.touch()
            classpath_file.touch()
    return f"{classes}:{classpath_file.read_text().strip()}"


KIT_ENV = "HDFSFUSE_LIBHADOOP_KIT"
_NATIVE_DIR = LAUNCHER_DIR / "target" / "native"


def libhadoop_kit() -> Path | None:
    """The libhadoop-kit folder: $HDFSFUSE_LIBHADOOP_KIT, else `shared/libhadoop-kit` beside an
    ancestor of this checkout (where the team's shared folder lives)."""
    configured = os.environ.get(KIT_ENV)
    candidates = [Path(configured)] if configured else [
        parent / "shared" / "libhadoop-kit" for parent in LAUNCHER_DIR.parents
    ]
    return next((c for c in candidates if (c / "build.sh").is_file()), None)


def short_circuit_unavailable() -> str | None:
    """Why a --short-circuit cluster cannot start here, or None when it can."""
    if libhadoop_kit() is None:
        return (f"no libhadoop-kit (set {KIT_ENV}, or keep the kit at shared/libhadoop-kit beside the checkout): "
                "the DataNodes need its libhadoop.so for domain sockets")
    missing = [tool for tool in ("gcc", "javac") if shutil.which(tool) is None]
    if missing:
        return f"building libhadoop.so from the kit needs {' and '.join(missing)}"
    return None


def ensure_native_library() -> Path:
    """Build libhadoop.so from the kit once (under the launcher's build lock); return its folder."""
    kit = libhadoop_kit()
    assert kit is not None
    with open(LAUNCHER_DIR / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        library = _NATIVE_DIR / "libhadoop.so"
        newest = max(p.stat().st_mtime for p in kit.rglob("*") if p.is_file())
        if not library.exists() or library.stat().st_mtime < newest:
            proc = subprocess.run(["sh", str(kit / "build.sh"), str(_NATIVE_DIR)], capture_output=True, text=True)
            if proc.returncode != 0:
                output = proc.stdout[-2000:] + proc.stderr[-4000:]
                raise MiniDfsError(f"building libhadoop.so from {kit} failed:\n{output}")
    return _NATIVE_DIR


def trusted_socket_base() -> Path:
    """A directory for DataNode sockets with no world- or group-writable ancestor: Hadoop's
    DomainSocket (and hdfsfuse) refuse a socket path under /tmp."""
    for base in (Path("/run/hdfsfuse-minidfs"), Path.home() / ".cache" / "hdfsfuse-minidfs"):
        try:
            base.mkdir(mode=0o755, parents=True, exist_ok=True)
            base.chmod(0o755)
            return base
        except OSError:
            continue
    raise MiniDfsError("no directory for DataNode domain sockets (/run/hdfsfuse-minidfs or ~/.cache)")


@dataclasses.dataclass
class ClusterOptions:
    datanodes: int = 3
    block_size: int = 1 * MiB
    replication: int | None = None
    checksum_type: str = "CRC32C"
    bytes_per_checksum: int = 512
    ha: bool = False
    observer: bool = False  # an HA pair plus an observer NameNode (implies ha)
    observer_tail_period: str | None = None  # e.g. "2s": an observer that lags on purpose
    block_tokens: bool = False
    block_token_lifetime: int | None = None  # minutes: block tokens and data-encryption keys (Hadoop: 600)
    permissions: bool = False
    datanode_hostname: str = "127.0.0.1"
    # A secure cluster: MiniKdc, Kerberos RPC, block tokens, HTTPS (see tests.minidfs.__main__).
    kerberos: bool = False
    rpc_protection: str = "authentication"
    data_transfer_protection: str | None = None
    encrypt_data_transfer: bool = False
    ticket_lifetime: int | None = None  # seconds; the KDC's maximum ticket lifetime
    proxy_user: str | None = None
    # The DataNodes' io.file.buffer.size: under SASL (no sendfile) it is their packet size. The
    # DataNode reads it once from a classpath core-site.xml, so it goes there.
    io_file_buffer_size: int | None = None
    # Their hadoop.security.crypto.buffer.size: under AES/CTR the DataNode encrypts and writes
    # its stream this many bytes at a time (CryptoOutputStream; 8 KiB by default). Also there.
    crypto_buffer_size: int | None = None
    # Short-circuit local reads: a domain socket per DataNode (needs libhadoop-kit; see
    # `short_circuit_unavailable`). The socket directory is passed in by MiniDfs.start.
    short_circuit: bool = False
    # Federation: this many nameservices ns0, ns1, ... (2 to 4; each an HA pair with `ha`).
    federation: int = 0
    # A Router-based federation front over two subclusters ns0 and ns1 (the Hadoop 3.4.2 build).
    router: bool = False
    # The Hadoop release the cluster runs (the launcher is built against it once, and kept);
    # None: $HDFSFUSE_HADOOP_VERSION, else the pom's (3.5.0).
    hadoop_version: str | None = dataclasses.field(default_factory=default_hadoop_version)
    # A Hadoop KMS in its own JVM (tests.minidfs.kms), the NameNode's key provider: encryption
    # zones whose files other clients can decrypt. With `kerberos` it authenticates with SPNEGO.
    kms: bool = False
    # The KMS serves https (kms://https@127.0.0.1:PORT/kms) with a certificate from a CA of the
    # harness's own, whose PEM file the ready line gives as "kms_ca_file".
    kms_https: bool = False

    def argv(self) -> list[str]:
        args = [
            "--datanodes", str(self.datanodes),
            "--block-size", str(self.block_size),
            "--replication", str(self.replication or min(3, self.datanodes)),
            "--checksum-type", self.checksum_type,
            "--bytes-per-checksum", str(self.bytes_per_checksum),
        ]
        args += ["--observer"] if self.observer else ["--ha"] if self.ha else []
        if self.observer_tail_period:
            args += ["--observer-tail-period", self.observer_tail_period]
        args += ["--block-tokens"] if self.block_tokens else []
        if self.block_token_lifetime:
            args += ["--block-token-lifetime", str(self.block_token_lifetime)]
        args += ["--permissions"] if self.permissions else []
        args += ["--datanode-hostname", self.datanode_hostname]
        args += ["--federation", str(self.federation)] if self.federation else []
        args += ["--router"] if self.router else []
        if self.kerberos:
            args += ["--kerberos", "--rpc-protection", self.rpc_protection]
            if self.data_transfer_protection:
                args += ["--data-transfer-protection", self.data_transfer_protection]
            args += ["--encrypt-data-transfer"] if self.encrypt_data_transfer else []
            if self.ticket_lifetime:
                args += ["--ticket-lifetime", str(self.ticket_lifetime)]
            if self.proxy_user:
                args += ["--proxy-user", self.proxy_user]
        return args


class MiniDfs:
    """One MiniDFSCluster in a JVM subprocess, driven by JSON lines."""

    def __init__(self, options: ClusterOptions | None = None, *, heap: str = "1g") -> None:
        self.options = options or ClusterOptions()
        self._heap = heap
        self._proc: subprocess.Popen[bytes] | None = None
        self._base_dir: Path | None = None
        self._socket_dir: Path | None = None
        self._buf = b""
        self._lock = threading.Lock()
        self.ready: dict[str, Any] = {}
        self.kms: Kms | None = None

    # ----- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = 180.0) -> MiniDfs:
        classpath = ensure_built(router=self.options.router,
                                 hadoop_version=None if self.options.router else self.options.hadoop_version)
        self._base_dir = Path(tempfile.mkdtemp(prefix="hdfsfuse-minidfs-"))
        self.log_path = self._base_dir / "launcher.log"
        # A per-cluster classpath directory: a secure cluster's ssl-client.xml / ssl-server.xml.
        resources = self._base_dir / "resources"
        resources.mkdir()
        props = {"io.file.buffer.size": self.options.io_file_buffer_size,
                 "hadoop.security.crypto.buffer.size": self.options.crypto_buffer_size}
        if any(props.values()):
            (resources / "core-site.xml").write_text("<configuration>" + "".join(
                f"<property><name>{k}</name><value>{int(v)}</value></property>" for k, v in props.items() if v
            ) + "</configuration>\n")
        jvm_flags: list[str] = []
        launcher_flags: list[str] = []
        if self.options.short_circuit:
            reason = short_circuit_unavailable()
            if reason is not None:
                raise MiniDfsError(f"--short-circuit: {reason}")
            jvm_flags.append(f"-Djava.library.path={ensure_native_library()}")
            self._socket_dir = Path(tempfile.mkdtemp(prefix="sc-", dir=trusted_socket_base()))
            self._socket_dir.chmod(0o755)
            launcher_flags += ["--domain-socket-dir", str(self._socket_dir)]
        if self.options.kms:
            self.kms = Kms(self._base_dir, java=_java(), classpath=ensure_built(kms=True),
                           host="localhost" if self.options.kerberos else "127.0.0.1", https=self.options.kms_https)
            launcher_flags += ["--kms-uri", self.kms.uri]
            if self.kms.https:  # the NameNode's KMS client (no ssl-client.xml: the JVM's trust store)
                jvm_flags += [f"-Djavax.net.ssl.trustStore={self.kms.trust_store}",
                              f"-Djavax.net.ssl.trustStorePassword={Kms.TLS_PASSWORD}",
                              "-Djavax.net.ssl.trustStoreType=PKCS12"]
            if not self.options.kerberos:
                self.kms.start()  # a Kerberos KMS needs the cluster's KDC: it starts after the cluster
        argv = [
            _java(), f"-Xmx{self._heap}", *jvm_flags, "-cp", f"{resources}:{classpath}", _MAIN_CLASS,
            "--base-dir", str(self._base_dir / "data"), "--resource-dir", str(resources),
            *self.options.argv(), *launcher_flags,
        ]
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                cwd=self._base_dir, start_new_session=True,
            )
        line = self._readline(timeout)
        if line is None:
            self.stop()
            raise MiniDfsError(f"MiniDFS did not become ready within {timeout:.0f}s:\n{self.log_tail()}")
        ready = json.loads(line)
        if not ready.get("ready"):
            self.stop()
            raise MiniDfsError(f"MiniDFS failed to start: {ready.get('error')}\n{self.log_tail()}")
        wanted = ROUTER_HADOOP_VERSION if self.options.router else self.options.hadoop_version
        if wanted and ready.get("hadoop_version") != wanted:
            self.stop()
            raise MiniDfsError(f"asked for Hadoop {wanted}, the cluster runs {ready.get('hadoop_version')}")
        self.ready = ready
        if self.kms is not None:
            if self.options.kerberos:
                self.kms.use_kerberos(krb5_conf=ready["kerberos"]["krb5_conf"],
                                      keytab=ready["kerberos"]["service_keytab"], principal="HTTP/localhost",
                                      proxy_user=self.options.proxy_user)
                try:
                    self.kms.start()
                except KmsError as e:
                    self.stop()
                    raise MiniDfsError(str(e)) from None
            ready["kms"] = self.kms.uri
            if self.kms.https:
                ready["kms_ca_file"] = self.kms.ca_file
        return self

    def stop(self) -> None:
        if self.kms is not None:
            self.kms.stop()
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                if proc.stdin:
                    proc.stdin.close()  # EOF: the launcher shuts the cluster down
                proc.wait(timeout=60)
            except (subprocess.TimeoutExpired, BrokenPipeError, OSError):
                proc.kill()
                proc.wait()
            if proc.stdout:
                proc.stdout.close()
        if self._base_dir is not None and not os.environ.get("HDFSFUSE_KEEP_MINIDFS"):
            shutil.rmtree(self._base_dir, ignore_errors=True)
            self._base_dir = None
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None

    def __enter__(self) -> MiniDfs:
        return self.start() if self._proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no launcher log)"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int:
        """The launcher JVM's process id (every NameNode and DataNode of the cluster runs in it)."""
        assert self._proc is not None, "the cluster is not running"
        return self._proc.pid

    # ----- facts from the ready line ---------------------------------------------------------

    @property
    def uri(self) -> str:
        return str(self.ready["uri"])

    @property
    def kerberos(self) -> dict[str, Any]:
        """realm, krb5_conf, client_principal, client_keytab (a secure cluster only)."""
        return dict(self.ready["kerberos"])

    def krb5_env(self) -> dict[str, str]:
        """Environment for a process that talks to this cluster's KDC."""
        return {"KRB5_CONFIG": self.kerberos["krb5_conf"]} if "kerberos" in self.ready else {}

    @property
    def nameservices(self) -> list[dict[str, Any]]:
        """A federated cluster's nameservices: [{"id": "ns0", "uri": "hdfs://ns0", "namenodes": [...]}]."""
        return list(self.ready["nameservices"])

    @property
    def router_uri(self) -> str:
        """hdfs://127.0.0.1:PORT of a --router cluster's Router."""
        return str(self.ready["router_uri"])

    def add_mount(self, src: str, ns: str, dst: str) -> None:
        """A Router mount-table entry: `src` in the Router's namespace is `dst` in nameservice `ns`."""
        self.command("add_mount", src=src, ns=ns, dst=dst)

    @property
    def conf_dir(self) -> str:
        return str(self.ready["conf_dir"])

    @property
    def namenodes(self) -> list[dict[str, str]]:
        return list(self.ready["namenodes"])

    @property
    def datanodes(self) -> list[dict[str, str]]:
        return list(self.ready["datanodes"])

    @property
    def domain_sockets(self) -> list[str]:
        """One UNIX socket path per DataNode, in `datanodes` order (a --short-circuit cluster)."""
        return list(self.ready["domain_sockets"])

    def replica_files(self) -> list[Path]:
        """Every DataNode's block and meta files (all replicas of every block)."""
        assert self._base_dir is not None, "the cluster is not running"
        return sorted((self._base_dir / "data").rglob("blk_*"))

    @property
    def xfer_ports(self) -> list[int]:
        return [int(dn["xfer"].rsplit(":", 1)[1]) for dn in self.datanodes]

    # ----- the control protocol ---------------------------------------------------------------

    def _readline(self, timeout: float) -> bytes | None:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not sel.select(remaining):
                    return None
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def command(self, cmd: str, timeout: float = 120.0, **fields: Any) -> dict[str, Any]:
        """Send one command; return its reply, or raise MiniDfsError on an error reply."""
        if cmd in ("stop_kms", "start_kms", "set_key_acl"):
            return self._kms_command(cmd, **fields)
        with self._lock:
            if not self.running:
                raise MiniDfsError(f"MiniDFS is not running:\n{self.log_tail()}")
            assert self._proc is not None and self._proc.stdin is not None
            self._proc.stdin.write(json.dumps({"cmd": cmd, **fields}).encode() + b"\n")
            self._proc.stdin.flush()
            line = self._readline(timeout)
        if line is None:
            raise MiniDfsError(f"no reply to {cmd!r} within {timeout:.0f}s:\n{self.log_tail()}")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise MiniDfsError(f"{cmd}: {reply['error']}")
        return reply

    def put(self, local: str | Path, path: str, *, block_size: int | None = None,
            replication: int | None = None, timeout: float = 120.0) -> int:
        fields: dict[str, Any] = {"local": str(local), "path": path}
        if block_size is not None:
            fields["block_size"] = block_size
        if replication is not None:
            fields["replication"] = replication
        return int(self.command("put", timeout=timeout, **fields)["length"])

    def put_bytes(self, data: bytes, path: str, **kw: Any) -> bytes:
        """Write `data` to HDFS with the Java client (via a local temp file); return it."""
        with tempfile.NamedTemporaryFile(prefix="hdfsfuse-put-") as f:
            f.write(data)
            f.flush()
            self.put(f.name, path, **kw)
        return data

    def mkdir(self, path: str, mode: str | None = None) -> None:
        self.command("mkdir", path=path, **({"mode": mode} if mode else {}))

    def chmod(self, path: str, mode: str) -> None:
        self.command("chmod", path=path, mode=mode)

    def chown(self, path: str, owner: str | None = None, group: str | None = None) -> None:
        fields = {k: v for k, v in (("owner", owner), ("group", group)) if v is not None}
        self.command("chown", path=path, **fields)

    def touch_many(self, path: str, count: int, size: int = 0, prefix: str = "f-", mtime: int | None = None) -> None:
        """Create `count` files `prefix00000`... of `size` bytes each (byte i % 256) in `path`
        (`mtime`: then set their modification time, ms since the epoch)."""
        fields = {} if mtime is None else {"mtime": mtime}
        self.command("touch_many", path=path, count=count, size=size, prefix=prefix, timeout=600, **fields)

    def set_times(self, path: str, mtime: int) -> None:
        """Set a file's modification time (ms since the epoch): a data set written long ago."""
        self.command("set_times", path=path, mtime=mtime)

    def age(self, path: str, seconds: float = 3600) -> None:
        """Make a file look written `seconds` ago (an open trusts kept statuses only of settled files)."""
        self.set_times(path, int((time.time() - seconds) * 1000))

    def symlink(self, target: str, path: str) -> None:
        self.command("symlink", target=target, path=path)

    def delete(self, path: str) -> bool:
        return bool(self.command("delete", path=path)["deleted"])

    def ls(self, path: str) -> list[dict[str, Any]]:
        return list(self.command("ls", path=path)["entries"])

    def stat(self, path: str) -> dict[str, Any]:
        return self.command("stat", path=path)

    def sha256(self, path: str) -> str:
        return str(self.command("sha256", path=path)["sha256"])

    def blocks(self, path: str) -> list[dict[str, Any]]:
        return list(self.command("blocks", path=path)["blocks"])

    def stop_datanode(self, xfer: str | None = None, *, path: str | None = None, block_index: int = 0,
                      internal_index: int | None = None) -> str:
        """Stop the DataNode at `xfer`, or the one holding internal block `internal_index` of
        striped group `block_index` of `path`; returns its address."""
        if xfer is not None:
            return str(self.command("stop_datanode", xfer=xfer)["xfer"])
        return str(self.command("stop_datanode", path=path, block_index=block_index,
                                internal_index=internal_index)["xfer"])

    def set_replication(self, path: str, replication: int, timeout: float = 60.0) -> list[str]:
        """Set a file's replication and wait until its (one) block has that many replicas; return them."""
        self.command("set_replication", path=path, replication=replication)
        deadline = time.monotonic() + timeout
        while True:
            xfers = list(self.blocks(path)[0]["xfer"])
            if len(xfers) == replication:
                return xfers
            if time.monotonic() > deadline:
                raise MiniDfsError(f"{path}: {len(xfers)} replicas after {timeout:g}s, not {replication}")
            time.sleep(0.5)
            self.command("set_replication", path=path, replication=replication)  # schedule what is missing

    def restart_datanode(self, xfer: str) -> None:
        self.command("restart_datanode", xfer=xfer)

    def corrupt_replica(self, path: str, block_index: int, xfer: str | None, offset: int,
                        length: int = 1, *, internal_index: int | None = None) -> dict[str, Any]:
        """Flip `length` bytes at `offset` of a replica's block file: block `block_index` of `path`
        on `xfer`, or internal block `internal_index` of that striped group (xfer: its holder)."""
        fields: dict[str, Any] = {} if xfer is None else {"xfer": xfer}
        if internal_index is not None:
            fields["internal_index"] = internal_index
        return self.command("corrupt_replica", path=path, block_index=block_index, offset=offset, length=length,
                            **fields)

    def setxattr(self, path: str, name: str, value: str) -> None:
        """Set an HDFS extended attribute (`user.k`, `trusted.k`, ...) on `path`."""
        self.command("setxattr", path=path, name=name, value=value)

    def create_encryption_zone(self, path: str, key: str) -> None:
        """Make directory `path` an encryption zone under `key` (created in the cluster's key store,
        the KMS on a `kms` cluster, if it does not exist)."""
        self.command("create_encryption_zone", path=path, key=key)

    def create_key(self, name: str, length: int | None = None) -> str:
        """A new key in the NameNode's key provider (128 bits unless `length`); its version name."""
        return str(self.command("create_key", name=name, **({"length": length} if length else {}))["version"])

    def roll_key(self, name: str) -> str:
        """A new version of key `name`, through the NameNode (whose next new files use it); its name."""
        return str(self.command("roll_key", name=name)["version"])

    def stop_kms(self) -> None:
        self.command("stop_kms")

    def start_kms(self) -> None:
        """Start the stopped KMS again, on the same port."""
        self.command("start_kms")

    def set_key_acl(self, key: str, op: str, users: str) -> None:
        """The KMS lets only `users` ("alice,bob", "*") do `op` (DECRYPT_EEK, ...) with `key`."""
        self.command("set_key_acl", key=key, op=op, users=users)

    def _kms_command(self, cmd: str, **fields: Any) -> dict[str, Any]:
        if self.kms is None:
            raise MiniDfsError(f"{cmd} needs a KMS (--kms)")
        try:
            if cmd == "stop_kms":
                self.kms.stop()
            elif cmd == "start_kms":
                self.kms.start()
            else:
                self.kms.set_key_acl(str(fields["key"]), str(fields["op"]), str(fields["users"]))
        except KmsError as e:
            raise MiniDfsError(str(e)) from None
        return {"ok": True}

    def set_ec_policy(self, path: str, policy: str) -> None:
        """Enable an erasure-coding policy if needed and set it on directory `path` (created)."""
        self.command("set_ec_policy", path=path, policy=policy)

    def add_ec_policy(self, codec: str, data: int, parity: int, cell_size: int) -> str:
        """Add (and enable) a custom erasure-coding policy; returns its name, e.g. RS-3-2-64k."""
        return str(self.command("add_ec_policy", codec=codec, data=data, parity=parity,
                                cell_size=cell_size)["name"])

    def process_invalidations(self) -> int:
        """Send the DataNodes the deletions of removed files' replicas now; returns how many
        blocks were scheduled (the launcher otherwise holds them for an hour)."""
        return int(self.command("process_invalidations")["blocks"])

    def set_short_circuit(self, xfer: str, enabled: bool) -> None:
        """Restart the DataNode at `xfer` with short-circuit reads on or off (off: it keeps its
        domain socket but refuses file descriptors)."""
        self.command("set_short_circuit", xfer=xfer, enabled=enabled, timeout=180)

    def corrupt_replicas(self, path: str) -> list[int]:
        """Per block of `path`, how many replicas the NameNode holds as corrupt."""
        return [int(n) for n in self.command("corrupt_replicas", path=path)["corrupt"]]

    def metrics(self) -> dict[str, dict[str, int]]:
        """Per DataNode xfer address: BytesRead, ReadBlockOpNumOps, BlocksRead."""
        return {d["xfer"]: d for d in self.command("metrics")["datanodes"]}

    def metrics_total(self) -> dict[str, int]:
        """Totals over all DataNodes, once two readings 30 ms apart agree (at most 2 s).

        A DataNode bumps BytesRead a moment before ReadBlockOpNumOps, so a single reading taken
        as a baseline can hold one op's bytes without the op itself.
        """
        deadline = time.monotonic() + 2.0
        last = self._metrics_once()
        while time.monotonic() < deadline:
            time.sleep(0.03)
            now = self._metrics_once()
            if now == last:
                break
            last = now
        return last

    def _metrics_once(self) -> dict[str, int]:
        totals = {"BytesRead": 0, "ReadBlockOpNumOps": 0, "BlocksRead": 0}
        for d in self.metrics().values():
            for k in totals:
                totals[k] += int(d[k])
        return totals

    def metrics_after(self, before: dict[str, int], read_ops: int, timeout: float = 15.0) -> dict[str, int]:
        """Totals once the DataNodes have finished accounting `read_ops` more READ_BLOCK ops.

        A DataNode updates its counters after it has read the client's status, so a client can
        finish a read before the counters move; ReadBlockOpNumOps is bumped last.
        """
        deadline = time.monotonic() + timeout
        while True:
            totals = self._metrics_once()
            if totals["ReadBlockOpNumOps"] >= before["ReadBlockOpNumOps"] + read_ops:
                return self.metrics_total()
            if time.monotonic() > deadline:
                raise MiniDfsError(f"DataNodes accounted {totals} within {timeout}s, wanted {read_ops} more ops")
            time.sleep(0.02)

    def nn_metrics(self) -> dict[str, int]:
        """The NameNode's counters of client operations (FileInfoOps, GetListingOps, ...)."""
        reply = self.command("nn_metrics")
        return {k: int(v) for k, v in reply.items() if k != "ok"}

    def rpc_counts(self) -> collections.Counter[str]:
        """The client RPCs every NameNode has answered, by method (GetListing, GetFileInfo, ...)."""
        counts: collections.Counter[str] = collections.Counter()
        for nn in self.command("nn_rpc_counts")["namenodes"]:
            counts.update({k: int(v) for k, v in nn.items() if k[:1].isupper()})
        return counts

    def restart_namenode(self, index: int | None = None) -> None:
        self.command("restart_namenode", **({"index": index} if index is not None else {}))

    def failover(self) -> str:
        return str(self.command("failover")["active"])

    def active_namenode(self) -> str:
        return str(self.command("active_namenode")["active"])

    def append_open(self, path: str, local: str | Path, hflush: bool = True) -> int:
        return int(self.command("append_open", path=path, local=str(local), hflush=hflush)["position"])

    def append_close(self, path: str) -> None:
        self.command("append_close", path=path)

    def append_bytes(self, data: bytes, path: str) -> bytes:
        """Append `data` to `path` with the Java client and close it again; return `data`."""
        with tempfile.NamedTemporaryFile(prefix="hdfsfuse-append-") as f:
            f.write(data)
            f.flush()
            self.append_open(path, f.name)
        self.append_close(path)
        return data

    def allow_snapshot(self, path: str) -> None:
        self.command("allow_snapshot", path=path)

    def create_snapshot(self, path: str, name: str) -> str:
        return str(self.command("create_snapshot", path=path, name=name)["path"])

    def delete_snapshot(self, path: str, name: str) -> None:
        self.command("delete_snapshot", path=path, name=name)

    def rename(self, src: str, dst: str) -> None:
        """Rename `src` to `dst`, replacing an existing destination file."""
        self.command("rename", src=src, dst=dst)

    def truncate(self, path: str, length: int) -> None:
        """Truncate `path` to `length` bytes and wait until the file is closed again."""
        self.command("truncate", path=path, length=length)

    # ----- the wire-byte referee ----------------------------------------------------------------

    @contextmanager
    def wire(self) -> Iterator[WireCounter]:
        """Count bytes the DataNodes send from their xfer ports while the block runs."""
        counter = WireCounter(self.xfer_ports)
        try:
            yield counter
        finally:
            counter.close()


_wire_ids = itertools.count()


@contextmanager
def slow_port(port: int, rate: str) -> Iterator[None]:
    """Rate-limit what one DataNode sends (its xfer port, on loopback): tc htb plus a u32 filter.

    This kernel has no netem; an htb class with a low rate, matched on the source port, slows
    that DataNode's replies only. Removed again on exit.
    """
    script = [
        "qdisc add dev lo root handle 1: htb default 1",
        "class add dev lo parent 1: classid 1:1 htb rate 100gbit",
        f"class add dev lo parent 1: classid 1:2 htb rate {rate} ceil {rate} burst 1600 cburst 1600",
        f"filter add dev lo parent 1: protocol ip prio 1 u32 match ip sport {port} 0xffff flowid 1:2",
    ]
    subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], capture_output=True)
    try:
        for line in script:
            subprocess.run(["tc", *line.split()], check=True, capture_output=True)
        yield
    finally:
        subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], capture_output=True)


class WireCounter:
    """nftables counters on the DataNodes' xfer ports, in the output hook (loopback included).

    `bytes`/`packets`: whole IP packets the DataNodes sent (`tcp sport {xfer ports}`): IP and
    TCP headers, DTP headers, checksums and data. `connects`: SYNs sent to those ports (new TCP
    connections). Values are live until `close()`, which freezes them.
    """

    def __init__(self, ports: list[int]) -> None:
        self.table = f"hdfsfuse_wire_{os.getpid()}_{next(_wire_ids)}"
        port_set = ", ".join(str(p) for p in ports)
        script = (
            f"add table inet {self.table}\n"
            f"add chain inet {self.table} out {{ type filter hook output priority 0; policy accept; }}\n"
            f"add rule inet {self.table} out tcp sport {{ {port_set} }} counter\n"
            f"add rule inet {self.table} out tcp dport {{ {port_set} }} tcp flags & (syn | ack) == syn counter\n"
        )
        subprocess.run(["nft", "-f", "-"], input=script.encode(), check=True, capture_output=True)
        self._frozen: tuple[int, int, int] | None = None

    def read(self) -> tuple[int, int, int]:
        """(bytes sent by DataNodes, packets sent by DataNodes, connections opened to them)."""
        if self._frozen is not None:
            return self._frozen
        out = subprocess.run(
            ["nft", "-j", "list", "chain", "inet", self.table, "out"],
            check=True, capture_output=True,
        ).stdout
        counters = [
            expr["counter"]
            for item in json.loads(out)["nftables"] if "rule" in item
            for expr in item["rule"]["expr"] if "counter" in expr
        ]
        if len(counters) != 2:
            raise MiniDfsError("nftables counter rules not found")
        return int(counters[0]["bytes"]), int(counters[0]["packets"]), int(counters[1]["packets"])

    @property
    def bytes(self) -> int:
        return self.read()[0]

    @property
    def packets(self) -> int:
        return self.read()[1]

    @property
    def connects(self) -> int:
        return self.read()[2]

    def close(self) -> None:
        if self._frozen is None:
            self._frozen = self.read()
            subprocess.run(["nft", "delete", "table", "inet", self.table], capture_output=True)
