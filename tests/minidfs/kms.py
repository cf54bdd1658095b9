"""A Hadoop KMS for encryption-zone tests: MiniKMS 3.4.2 in its own JVM (see KmsMain.java).

Owns the KMS's conf dir (kms-site.xml, kms-acls.xml, the key store), its process, and its port,
which survives `stop` and `start` so the NameNode's `kms://` URI stays right. Keys and zones are
made through the NameNode (the launcher's create_key, roll_key, create_encryption_zone); ACLs are
this module's: `set_key_acl` rewrites kms-acls.xml and waits until the KMS has reloaded it.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from xml.sax.saxutils import escape

KEY_OPERATIONS = ("MANAGEMENT", "GENERATE_EEK", "DECRYPT_EEK", "READ")
_ACL_PROBE_USER = "hdfsfuse-acl-probe"  # a user no test grants anything to


class KmsError(RuntimeError):
    """The KMS failed to start, or did not take a change."""


def _properties(props: dict[str, str]) -> str:
    body = "".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n" for k, v in props.items()
    )
    return f"<configuration>\n{body}</configuration>\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Kms:
    """One KMS JVM, simple auth unless `use_kerberos` (SPNEGO) was called before `start`."""

    def __init__(self, base_dir: Path, *, java: str, classpath: str, host: str = "127.0.0.1",
                 https: bool = False) -> None:
        self.conf_dir = base_dir / "kms"
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        # https: a certificate for localhost and 127.0.0.1 from a CA of the harness's own
        # (`ca_file`, PEM; `trust_store`, PKCS12, for the cluster's JVM).
        self.https = https
        self.scheme = "https" if https else "http"
        (base_dir / "kms-tmp").mkdir(exist_ok=True)
        self._java, self._classpath = java, classpath
        self._kerberos: dict[str, str] | None = None
        self._proxy_user: str | None = None
        self._tmp = base_dir / "kms-tmp"
        self.port = _free_port()
        # A Kerberos KMS is HTTP/localhost: clients name it by the host in its URI.
        self.host = host
        self.log_path = base_dir / "kms.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._key_acls: dict[str, dict[str, str]] = {}
        self._write_site()
        self._write_acls()
        if https:
            self._make_certificates()

    TLS_PASSWORD = "hdfsfuse-test"

    @property
    def ca_file(self) -> str:
        return str(self.conf_dir / "ca.pem")

    @property
    def trust_store(self) -> str:
        return str(self.conf_dir / "trust.p12")

    def _make_certificates(self) -> None:
        d, password = self.conf_dir, self.TLS_PASSWORD

        def run(*argv: str) -> None:
            subprocess.run(argv, check=True, capture_output=True, cwd=d)

        run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "3", "-subj", "/CN=hdfsfuse test KMS CA")
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "kms.key", "-out", "kms.csr",
            "-subj", "/CN=localhost")
        (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        run("openssl", "x509", "-req", "-in", "kms.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "kms.pem", "-days", "3", "-extfile", "san.ext")
        run("openssl", "pkcs12", "-export", "-in", "kms.pem", "-inkey", "kms.key", "-certfile", "ca.pem",
            "-name", "kms", "-out", "kms.p12", "-passout", f"pass:{password}")
        keytool = str(Path(self._java).parent / "keytool")
        run(keytool, "-importkeystore", "-noprompt", "-srckeystore", "kms.p12", "-srcstoretype", "PKCS12",
            "-srcstorepass", password, "-destkeystore", "kms.jks", "-deststoretype", "JKS",
            "-deststorepass", password, "-destkeypass", password)
        run(keytool, "-importcert", "-noprompt", "-alias", "ca", "-file", "ca.pem", "-keystore", "trust.p12",
            "-storetype", "PKCS12", "-storepass", password)

    def use_kerberos(self, *, krb5_conf: str, keytab: str, principal: str, proxy_user: str | None = None) -> None:
        """Authenticate with SPNEGO as `principal` (HTTP/localhost) from the cluster's KDC (before
        `start`). `proxy_user`: a principal's short name the KMS lets act for any user (doAs)."""
        self._kerberos = {"krb5_conf": krb5_conf, "keytab": keytab, "principal": principal}
        self._proxy_user = proxy_user
        self._write_site()

    def _write_site(self) -> None:
        site = {
            "hadoop.kms.key.provider.uri": f"jceks://file@{self.conf_dir}/kms.keystore",
            "hadoop.kms.authentication.type": "simple",
        }
        if self._kerberos:
            site.update({
                "hadoop.kms.authentication.type": "kerberos",
                "hadoop.kms.authentication.kerberos.keytab": self._kerberos["keytab"],
                "hadoop.kms.authentication.kerberos.principal": self._kerberos["principal"],
                "hadoop.kms.authentication.kerberos.name.rules": "DEFAULT",
                "hadoop.security.authentication": "kerberos",
            })
            if self._proxy_user:
                site.update({f"hadoop.kms.proxyuser.{self._proxy_user}.{what}": "*"
                             for what in ("users", "groups", "hosts")})
        (self.conf_dir / "kms-site.xml").write_text(_properties(site))

    @property
    def http_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}/kms"

    @property
    def uri(self) -> str:
        """The key provider URI a NameNode or client takes: kms://http@127.0.0.1:PORT/kms
        (kms://https@... for an https KMS)."""
        return f"kms://{self.scheme}@{self.host}:{self.port}/kms"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 60.0) -> None:
        if self.running:
            return
        flags = [f"-Djava.security.krb5.conf={self._kerberos['krb5_conf']}"] if self._kerberos else []
        argv = [
            self._java, "-Xmx256m", "--add-opens", "java.base/java.lang=ALL-UNNAMED", *flags,
            f"-Dhadoop.tmp.dir={self._tmp}", "-cp", self._classpath, "hdfsfuse.minidfs.KmsMain",
            str(self.conf_dir), str(self.port),
            *([str(self.conf_dir / "kms.jks"), self.TLS_PASSWORD] if self.https else []),
        ]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                          start_new_session=True)
        line = self._ready_line(timeout)
        reply = json.loads(line) if line else {"error": f"no ready line within {timeout:.0f}s"}
        if "url" not in reply:
            self.stop()
            raise KmsError(f"the KMS did not start: {reply.get('error')}\n{self.log_tail()}")

    def _ready_line(self, timeout: float) -> bytes | None:
        assert self._proc is not None and self._proc.stdout is not None
        buf, deadline = b"", time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self._proc.stdout.fileno(), selectors.EVENT_READ)
            while b"\n" not in buf:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not sel.select(remaining):
                    return None
                chunk = os.read(self._proc.stdout.fileno(), 4096)
                if not chunk:
                    return None
                buf += chunk
        return buf.split(b"\n", 1)[0]

    def stop(self) -> None:
        """Stop the KMS; the port stays this KMS's for `start`."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=20)
        except (subprocess.TimeoutExpired, OSError):
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no KMS log)"

    # ----- key ACLs ----------------------------------------------------------------------------

    def set_key_acl(self, key: str, op: str, users: str, timeout: float = 30.0) -> None:
        """Key `key`'s ACL for `op` (one of KEY_OPERATIONS, or ALL) becomes `users` ("alice,bob",
        "*", or "alice,bob group1"); its other operations stay open to all (a key with any ACL
        entry of its own no longer falls back to the defaults). Returns once the KMS enforces it."""
        if op not in (*KEY_OPERATIONS, "ALL"):
            raise KmsError(f"key ACL operation {op!r}: one of {', '.join(KEY_OPERATIONS)}, ALL")
        acls = self._key_acls.setdefault(key, dict.fromkeys(KEY_OPERATIONS, "*"))
        for each in KEY_OPERATIONS if op == "ALL" else (op,):
            acls[each] = users
        self._write_acls()
        if self.running and op in ("DECRYPT_EEK", "ALL"):
            self._wait_enforced(key, denied=users.strip() != "*", timeout=timeout)

    def _write_acls(self) -> None:
        props = {f"hadoop.kms.acl.{op}": "*" for op in (
            "CREATE", "DELETE", "ROLLOVER", "GET", "GET_KEYS", "GET_METADATA", "SET_KEY_MATERIAL",
            "GENERATE_EEK", "DECRYPT_EEK")}
        props.update({f"default.key.acl.{op}": "*" for op in KEY_OPERATIONS})
        for key, acls in self._key_acls.items():
            props.update({f"key.acl.{key}.{op}": users for op, users in acls.items()})
        path = self.conf_dir / "kms-acls.xml"
        previous = path.stat().st_mtime if path.exists() else 0.0
        path.write_text(_properties(props))
        # The KMS reloads the file when its mtime changes (checked once a second): make sure it does.
        stamp = max(time.time(), previous + 1.0)
        os.utime(path, (stamp, stamp))

    def _wait_enforced(self, key: str, *, denied: bool, timeout: float) -> None:
        """Poll until the probe user's decrypt of one of `key`'s EEKs is refused (or allowed)."""
        if self._kerberos:
            time.sleep(3.0)  # no simple-auth probe on a Kerberos KMS: the reload takes 1-2 s
            return
        try:
            generated = self._request("GET", f"/v1/key/{urllib.parse.quote(key)}/_eek?eek_op=generate&num_keys=1",
                                      user="hdfs")
        except urllib.error.HTTPError as e:  # an unknown key, most often
            raise KmsError(f"key {key}: the KMS refused to generate an EEK ({e.code}: {_kms_message(e)})") from None
        eek = generated[0]
        body = {"name": key, "iv": eek["iv"], "material": eek["encryptedKeyVersion"]["material"]}
        version = urllib.parse.quote(eek["versionName"])
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._request("POST", f"/v1/keyversion/{version}/_eek?eek_op=decrypt", user=_ACL_PROBE_USER,
                              body=body)
                refused = False
            except urllib.error.HTTPError as e:
                if e.code != 403:
                    raise
                refused = True
            if refused == denied:
                return
            if time.monotonic() > deadline:
                raise KmsError(f"the KMS did not take the new ACL of key {key} within {timeout:.0f}s")
            time.sleep(0.25)

    def _request(self, method: str, path: str, *, user: str, body: object = None) -> object:
        sep = "&" if "?" in path else "?"
        url = f"{self.http_url}{path}{sep}user.name={urllib.parse.quote(user)}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        context = ssl.create_default_context(cafile=self.ca_file) if self.https else None
        with urllib.request.urlopen(request, timeout=30, context=context) as reply:
            return json.loads(reply.read() or b"null")


def _kms_message(e: urllib.error.HTTPError) -> str:
    """The KMS's own words in an error reply (its JSON RemoteException), else the HTTP reason."""
    try:
        return str(json.loads(e.read())["RemoteExceptionMessage"])
    except (ValueError, KeyError, TypeError, OSError):
        return str(e.reason)
