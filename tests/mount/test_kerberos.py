"""Secure clusters through the real mount: a real MiniKdc, a Kerberized MiniDFSCluster, real tools.

Credentials (keytab, ticket cache, delegation-token file), the three RPC protections (checked on
the wire), a secure HA failover, per-caller identity against an HDFS ACL, and every
bad-credential error, before and after mounting.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import keytab_options, kinit, local_user, no_ticket_env, random_bytes, wait_until
from tests.minidfs import ClusterOptions, MiniDfs

MiB = 1 << 20


def _put(cluster: MiniDfs, path: str, size: int, seed: int) -> bytes:
    return cluster.put_bytes(random_bytes(size, seed), path)


# ----- credentials ------------------------------------------------------------------------------


@pytest.mark.compat
def test_keytab_mount_reads_exact_bytes_as_the_principal(secure, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = secure(proxy_user="hfuse")
    data = _put(cluster, "/kt/data", 3 * MiB + 123, seed=1)
    cluster.chown("/kt/data", "alice", "alice")
    cluster.chmod("/kt/data", "600")  # only alice (and the superuser) may read it
    m = mount(cluster, *keytab_options(cluster), env=no_ticket_env(tmp_path))
    assert Path(m.path("/kt/data")).read_bytes() == data
    with open(m.path("/kt/data"), "rb") as f:
        f.seek(2 * MiB + 7)
        assert f.read(4096) == data[2 * MiB + 7 : 2 * MiB + 7 + 4096]
    assert "Auth successful for alice@EXAMPLE.COM (auth:KERBEROS)" in cluster.log_tail(100000)
    assert not (tmp_path / "no-such-cache").exists()  # the login lives in memory, never in the user's cache


def test_ticket_cache_mount_made_by_kinit(secure, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = secure(proxy_user="hfuse")
    data = _put(cluster, "/cc/data", 100_000, seed=2)
    cluster.chown("/cc/data", "alice", "alice")
    cluster.chmod("/cc/data", "600")
    ccache = f"FILE:{tmp_path}/krb5cc"
    kinit(cluster, ccache)
    m = mount(cluster, env={"KRB5CCNAME": ccache})
    assert Path(m.path("/cc/data")).read_bytes() == data


@pytest.mark.compat
@pytest.mark.parametrize("how", ["option", "environment"])
def test_delegation_token_file_mount(secure, mount, tmp_path: Path, how: str) -> None:  # type: ignore[no-untyped-def]
    cluster = secure(proxy_user="hfuse")
    data = _put(cluster, f"/tok/{how}", 70_000, seed=3)
    cluster.chown(f"/tok/{how}", "alice", "alice")
    cluster.chmod(f"/tok/{how}", "600")
    token = tmp_path / "alice.token"
    reply = cluster.command("delegation_token", user="alice", file=str(token))
    assert reply["kind"] == "HDFS_DELEGATION_TOKEN"
    env = no_ticket_env(tmp_path)
    options: list[str] = []
    if how == "option":
        options.append(f"token_file={token}")
    else:
        env["HADOOP_TOKEN_FILE_LOCATION"] = str(token)
    m = mount(cluster, *options, env=env)
    assert Path(m.path(f"/tok/{how}")).read_bytes() == data  # alice's own file: the token names alice
    assert "(auth:TOKEN)" in cluster.log_tail(100000)


# ----- RPC protection, checked on the wire -------------------------------------------------------


class _Recorder:
    """A TCP relay to the NameNode that keeps every byte the client sent."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.sent = bytearray()
        self.sockets: list[socket.socket] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:  # the NameNode is gone (the cluster stopped first): so is this client
                client.close()
                continue
            self.sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        try:
            while data := src.recv(65536):
                if record:
                    self.sent += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def drop_all(self) -> None:
        """Cut every relayed connection (the client must reconnect and authenticate again)."""
        sockets, self.sockets = self.sockets, []
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.server.close()
        self.drop_all()


@pytest.mark.parametrize("protection", ["authentication", "integrity", "privacy"])
@pytest.mark.parametrize("credential", ["keytab", "token"])
def test_each_rpc_protection_on_the_wire(secure, mount, tmp_path: Path, protection: str, credential: str) -> None:  # type: ignore[no-untyped-def]
    """Names the client sends travel in clear text only under `authentication`."""
    cluster = secure(proxy_user="hfuse", rpc_protection=protection)
    marker = f"wire-marker-{protection}-{credential}"
    data = _put(cluster, f"/prot/{marker}", 200_000, seed=4)
    host, port = cluster.namenodes[0]["rpc"].rsplit(":", 1)
    relay = _Recorder((host, int(port)))
    try:
        env = no_ticket_env(tmp_path)
        if credential == "keytab":
            options = keytab_options(cluster)
        else:
            token = tmp_path / "t"
            cluster.command("delegation_token", user="alice", file=str(token))
            options = [f"token_file={token}"]
            # The token names the NameNode's own address; the relay is a different port (of the
            # same length: ephemeral ports have five digits, so the Writable lengths still hold).
            real, relayed = f"127.0.0.1:{port}".encode(), f"127.0.0.1:{relay.port}".encode()
            assert len(real) == len(relayed)
            token.write_bytes(token.read_bytes().replace(real, relayed))
        m = mount(cluster, *options, env=env, uri=f"hdfs://127.0.0.1:{relay.port}")
        assert Path(m.path(f"/prot/{marker}")).read_bytes() == data
        in_clear = marker.encode() in relay.sent
        assert in_clear == (protection != "privacy"), f"{protection}: marker in clear text = {in_clear}"
        if protection != "authentication":
            # Every frame after the handshake is a SASL WRAP frame (callId -33).
            assert b"\x10\x05\x1a" in relay.sent  # RpcSaslProto{state=WRAP (field 2), token=...}
    finally:
        relay.close()


# ----- HA -----------------------------------------------------------------------------------------


def test_secure_ha_pair_fails_over(secure, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = secure(ha=True)
    data = _put(cluster, "/ha/before", 50_000, seed=5)
    m = mount(cluster, *keytab_options(cluster), env=no_ticket_env(tmp_path))
    assert Path(m.path("/ha/before")).read_bytes() == data
    cluster.command("failover")
    after = _put(cluster, "/ha/after", 60_000, seed=6)
    assert Path(m.path("/ha/after")).read_bytes() == after  # a new name: answered by the new active
    assert Path(m.path("/ha/before")).read_bytes() == data


# ----- per-caller identity ----------------------------------------------------------------------


def _read_as(user: str, path: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    argv = ["runuser", "-u", user, "--"]
    if env:
        argv += ["env", *(f"{k}={v}" for k, v in env.items())]
    return subprocess.run([*argv, "cat", path], capture_output=True)


def _acl_tree(cluster: MiniDfs, d: str) -> bytes:
    """A world-readable file that an HDFS ACL entry denies to hdfsfuse-bob."""
    cluster.mkdir(d, mode="755")
    data = _put(cluster, f"{d}/shared", 10_000, seed=7)
    cluster.chmod(f"{d}/shared", "644")
    cluster.command("set_acl", path=f"{d}/shared", spec="user:hdfsfuse-bob:---")
    return data


def test_identity_caller_enforces_hdfs_acls_per_user(secure, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = secure(proxy_user="hfuse")
    local_user("hdfsfuse-alice"), local_user("hdfsfuse-bob")
    data = _acl_tree(cluster, "/acl-caller")
    m = mount(cluster, "allow_other", "identity=caller", *keytab_options(cluster, "hfuse"),
              env=no_ticket_env(tmp_path))
    path = m.path("/acl-caller/shared")
    # alice reads first, so the page cache holds the bytes when bob asks.
    assert _read_as("hdfsfuse-alice", path).stdout == data
    denied = _read_as("hdfsfuse-bob", path)
    assert denied.returncode != 0 and b"Permission denied" in denied.stderr
    assert _read_as("hdfsfuse-alice", path).stdout == data
    assert "ugi=hdfsfuse-bob (auth:PROXY) via hfuse@EXAMPLE.COM" in cluster.log_tail(100000)
    # Without the ACL entry, bob reads it too: the denial was HDFS's, not the kernel's.
    cluster.command("remove_acl", path="/acl-caller/shared")
    assert _read_as("hdfsfuse-bob", path).stdout == data


def test_identity_caller_needs_a_principal_allowed_to_impersonate(secure, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = secure(proxy_user="hfuse")
    local_user("hdfsfuse-bob")
    _put(cluster, "/imp/open", 1000, seed=8)
    # alice is no proxy user: the NameNode refuses every impersonation, and says so.
    m = mount(cluster, "allow_other", "identity=caller", *keytab_options(cluster), env=no_ticket_env(tmp_path))
    denied = _read_as("hdfsfuse-bob", m.path("/imp/open"))
    assert denied.returncode != 0 and b"Permission denied" in denied.stderr
    wait_until(lambda: "is not allowed to impersonate hdfsfuse-bob" in m.log_text(), "the refusal is logged")


def test_identity_ticket_cache_uses_each_callers_own_tickets(secure, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = secure(proxy_user="hfuse")
    alice, bob = local_user("hdfsfuse-alice"), local_user("hdfsfuse-bob")
    carol = local_user("hdfsfuse-carol")
    data = _acl_tree(cluster, "/acl-cc")
    keytabs = Path(tempfile.mkdtemp(prefix="hdfsfuse-keytabs-"))
    keytabs.chmod(0o755)
    krb5_conf = keytabs / "krb5.conf"  # the cluster's own copy sits in a directory only root can enter
    shutil.copy(cluster.kerberos["krb5_conf"], krb5_conf)
    krb5_conf.chmod(0o644)
    for user in (alice, bob):
        made = cluster.command("add_principal", name=user.pw_name)
        keytab = keytabs / f"{user.pw_name}.keytab"
        shutil.copy(made["keytab"], keytab)
        os.chown(keytab, user.pw_uid, user.pw_gid)
        kinit(cluster, f"FILE:/tmp/krb5cc_{user.pw_uid}", user=user.pw_name, principal=made["principal"],
               keytab=str(keytab), krb5_conf=str(krb5_conf))
    try:
        m = mount(cluster, "allow_other", "identity=ticket_cache", *keytab_options(cluster),
                  env=no_ticket_env(tmp_path))
        path = m.path("/acl-cc/shared")
        assert _read_as("hdfsfuse-alice", path).stdout == data
        denied = _read_as("hdfsfuse-bob", path)
        assert denied.returncode != 0 and b"Permission denied" in denied.stderr
        # carol has no tickets of her own, and may not borrow alice's.
        assert _read_as("hdfsfuse-carol", path).returncode != 0
        borrowed = _read_as("hdfsfuse-carol", path, env={"KRB5CCNAME": f"FILE:/tmp/krb5cc_{alice.pw_uid}"})
        assert borrowed.returncode != 0 and b"Permission denied" in borrowed.stderr
        log = m.log_text()
        assert f"uid {carol.pw_uid} has no Kerberos ticket cache" in log
        assert f"belongs to uid {alice.pw_uid}, not the caller" in log
    finally:
        shutil.rmtree(keytabs)
        for user in (alice, bob):
            Path(f"/tmp/krb5cc_{user.pw_uid}").unlink(missing_ok=True)


# ----- errors -------------------------------------------------------------------------------------


def test_lost_ticket_after_mounting_is_eacces_with_one_line(secure, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = secure(datanodes=1)
    data = _put(cluster, "/lost/a", 1000, seed=9)
    ccache = tmp_path / "krb5cc"
    kinit(cluster, f"FILE:{ccache}")
    m = mount(cluster, "direct_io", env={"KRB5CCNAME": f"FILE:{ccache}"})
    assert Path(m.path("/lost/a")).read_bytes() == data
    ccache.unlink()  # kdestroy
    cluster.command("restart_namenode")  # the mount must authenticate again
    with pytest.raises(PermissionError):
        Path(m.path("/lost/b")).stat()
    wait_until(lambda: "no Kerberos ticket" in m.log_text(), "the cause is logged")
    # One line for the failed request: the lookup of /lost/b, or of /lost itself when the
    # kernel's entry for the directory timed out during the restart (it asks for that first).
    lines = [ln for ln in m.log_text().splitlines() if "EACCES" in ln]
    assert len(lines) == 1 and re.search(r"lookup /lost(/b)?: ", lines[0]), lines
    # A new kinit is picked up by the next connection: no remount.
    kinit(cluster, f"FILE:{ccache}")
    later = _put(cluster, "/lost/c", 2000, seed=10)
    assert Path(m.path("/lost/c")).read_bytes() == later


# ----- a long-lived mount ---------------------------------------------------------------------------


@pytest.mark.slow
def test_mount_outlives_short_tickets_for_five_minutes(mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """60-second tickets: the mount renews its login, and reconnects authenticate with fresh tickets."""
    with MiniDfs(ClusterOptions(kerberos=True, datanodes=1, ticket_lifetime=60)) as cluster:
        files = {f"/long/f{i:02d}": _put(cluster, f"/long/f{i:02d}", 20_000 + i, seed=100 + i) for i in range(30)}
        host, port = cluster.namenodes[0]["rpc"].rsplit(":", 1)
        relay = _Recorder((host, int(port)))
        try:
            m = mount(cluster, "direct_io", "log_level=debug", *keytab_options(cluster),
                      env=no_ticket_env(tmp_path), uri=f"hdfs://127.0.0.1:{relay.port}")
            start = time.monotonic()
            drops = 0
            names = iter(files)
            while time.monotonic() - start < 300:
                name = next(names)
                assert Path(m.path(name)).read_bytes() == files[name]  # a new open: NameNode RPCs
                if drops < 10 and time.monotonic() - start > 30 * (drops + 1):
                    relay.drop_all()
                    drops += 1
                time.sleep(12)
            logins = cluster.log_tail(10**6).count("Auth successful for alice@EXAMPLE.COM (auth:KERBEROS)")
            assert drops >= 8 and logins > drops, (drops, logins)
            log = m.log_text()
            assert " ERROR " not in log and "renewal failed" not in log, log[-3000:]
            renewals = log.count("ticket valid for")
            assert renewals >= 5, renewals  # a fresh TGT about every 30 s
        finally:
            relay.close()


# ----- the harness contract, and a file being written ---------------------------------------------


def test_file_being_written_grows_under_privacy(secure, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The readable length of a block being written comes from the DataNode's IPC, authenticated
    with the block token (DIGEST-MD5) under the cluster's privacy protection."""
    cluster = secure(proxy_user="hfuse", rpc_protection="privacy")
    first, more = random_bytes(5000, seed=11), random_bytes(7000, seed=12)
    local = tmp_path / "chunk"
    local.write_bytes(first)
    cluster.command("append_open", path="/grow/log", local=str(local))
    m = mount(cluster, "direct_io", *keytab_options(cluster), env=no_ticket_env(tmp_path))
    with open(m.path("/grow/log"), "rb") as f:
        assert f.read() == first
        local.write_bytes(more)
        cluster.command("append_open", path="/grow/log", local=str(local))
        wait_until(lambda: os.fstat(f.fileno()).st_size == len(first) + len(more), "the new length shows")
        assert f.read() == more
    cluster.command("append_close", path="/grow/log")


