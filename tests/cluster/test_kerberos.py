"""Secure clusters without a mount: a real MiniKdc and a Kerberized MiniDFSCluster; every
bad-credential error is one clear line, and concurrent calls keep a SASL layer in order."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import edited_conf, keytab_options, kinit, no_ticket_env
from tests.minidfs import MiniDfs
from tests.mounting import HDFSFUSE

MiB = 1 << 20


def _mount_fails(cluster: MiniDfs, *options: str, env: dict[str, str] | None = None,
                 command: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    mnt = tempfile.mkdtemp(prefix="hdfsfuse-mnt-")
    try:
        argv = [*(command or HDFSFUSE), "mount", cluster.uri, mnt, "-o",
                ",".join([f"hadoop_conf={cluster.conf_dir}", *options])]
        full_env = {**os.environ, **cluster.krb5_env(), **(env or {})}
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=full_env)
        assert r.returncode != 0, f"the mount should have failed: {r.stderr}"
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        return r
    finally:
        subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)
        os.rmdir(mnt)


# ----- credentials ------------------------------------------------------------------------------


# ----- RPC protection, checked on the wire -------------------------------------------------------


# ----- HA -----------------------------------------------------------------------------------------


# ----- per-caller identity ----------------------------------------------------------------------


# ----- errors -------------------------------------------------------------------------------------


def test_no_credentials_is_one_clear_line(secure, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = _mount_fails(secure(proxy_user="hfuse"), env=no_ticket_env(tmp_path))
    assert "no Kerberos ticket: run kinit" in r.stderr


def test_expired_ticket_is_one_clear_line(secure, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = secure(proxy_user="hfuse")
    ccache = f"FILE:{tmp_path}/short"
    kinit(cluster, ccache, lifetime="5s")
    time.sleep(6)
    r = _mount_fails(cluster, env={"KRB5CCNAME": ccache, "HADOOP_TOKEN_FILE_LOCATION": ""})
    assert "has expired" in r.stderr


def test_wrong_principal_for_the_keytab(secure, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = secure(proxy_user="hfuse")
    r = _mount_fails(cluster, f"keytab={cluster.kerberos['client_keytab']}", "principal=mallory@EXAMPLE.COM",
                     env=no_ticket_env(tmp_path))
    assert "keytab holds no key for this principal" in r.stderr


def test_wrong_realm(secure, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A principal in a realm the keytab has no key for, and a NameNode principal in a realm
    this host's krb5.conf does not know."""
    cluster = secure(proxy_user="hfuse")
    r = _mount_fails(cluster, f"keytab={cluster.kerberos['client_keytab']}", "principal=alice@ELSEWHERE.ORG",
                     env=no_ticket_env(tmp_path))
    assert "no key for this principal (alice@ELSEWHERE.ORG; it holds alice@EXAMPLE.COM)" in r.stderr
    conf_dir = edited_conf(cluster, tmp_path, "hdfs-site.xml", "hdfs/localhost@EXAMPLE.COM", "hdfs/_HOST@ELSEWHERE.ORG")
    r = _mount_fails(cluster, *keytab_options(cluster), f"hadoop_conf={conf_dir}", env=no_ticket_env(tmp_path))
    assert "hdfs/localhost@ELSEWHERE.ORG" in r.stderr and "no path to the server's realm" in r.stderr


def test_unreachable_kdc(secure, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = secure(proxy_user="hfuse")
    conf = Path(cluster.kerberos["krb5_conf"]).read_text()
    port = cluster.kerberos["kdc_port"]
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    broken = tmp_path / "krb5.conf"
    broken.write_text(conf.replace(f"localhost:{port}", f"localhost:{dead}").replace(str(port), str(dead)))
    env = {**no_ticket_env(tmp_path), "KRB5_CONFIG": str(broken)}
    r = _mount_fails(cluster, *keytab_options(cluster), env=env)
    assert "cannot reach the KDC" in r.stderr


def test_clock_skew(secure, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if shutil.which("faketime") is None:
        pytest.fail("faketime is not installed (.ci/install installs it)")
    cluster = secure(proxy_user="hfuse")
    # MIT corrects for the KDC's clock by default (kdc_timesync); hardened sites turn that off.
    strict = tmp_path / "krb5.conf"
    strict.write_text(Path(cluster.kerberos["krb5_conf"]).read_text().replace(
        "[libdefaults]", "[libdefaults]\n    kdc_timesync = 0", 1))
    env = {**no_ticket_env(tmp_path), "KRB5_CONFIG": str(strict), "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    r = _mount_fails(cluster, *keytab_options(cluster), env=env,
                     command=["faketime", "-f", "+20m", sys.executable, "-m", "hdfsfuse.cli"])
    assert "clock differs from the KDC's" in r.stderr


def test_wrong_service_principal(secure, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = secure(proxy_user="hfuse")
    conf_dir = edited_conf(cluster, tmp_path, "hdfs-site.xml", "hdfs/localhost@EXAMPLE.COM", "nn/_HOST@EXAMPLE.COM")
    r = _mount_fails(cluster, *keytab_options(cluster), f"hadoop_conf={conf_dir}", env=no_ticket_env(tmp_path))
    assert "nn/localhost@EXAMPLE.COM" in r.stderr and "unknown to the KDC" in r.stderr


def test_cluster_config_without_kerberos_says_so(secure, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = secure(proxy_user="hfuse")
    conf_dir = edited_conf(cluster, tmp_path, "core-site.xml", ">kerberos<", ">simple<")
    r = _mount_fails(cluster, f"hadoop_conf={conf_dir}", env=no_ticket_env(tmp_path))
    assert "requires Kerberos" in r.stderr and "hadoop.security.authentication=kerberos" in r.stderr


# ----- a long-lived mount ---------------------------------------------------------------------------


# ----- the harness contract, and a file being written ---------------------------------------------


@pytest.mark.parametrize("credential", ["keytab", "token"])
async def test_concurrent_calls_keep_a_layer_in_order(secure, tmp_path: Path, monkeypatch, credential: str) -> None:  # type: ignore[no-untyped-def]
    """Hundreds of RPCs in flight on one privacy connection: the wrapped frames must reach the
    NameNode in the order their sequence numbers and cipher state were used."""
    import trio

    from hdfsfuse.client import ClientOptions, HdfsClient
    from hdfsfuse.security.credentials import SecurityOptions

    cluster = secure(proxy_user="hfuse", rpc_protection="privacy")
    for i in range(20):
        cluster.put_bytes(b"x" * i, f"/many/f{i}")
    monkeypatch.setenv("KRB5_CONFIG", cluster.kerberos["krb5_conf"])
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path}/none")
    if credential == "keytab":
        sec = SecurityOptions(keytab=cluster.kerberos["client_keytab"], principal=cluster.kerberos["client_principal"])
    else:
        cluster.command("delegation_token", user="alice", file=str(tmp_path / "t"))
        sec = SecurityOptions(token_file=str(tmp_path / "t"))
    async with HdfsClient.connect(cluster.uri, conf_dir=cluster.conf_dir,
                                  options=ClientOptions(security=sec)) as client:
        sizes: dict[int, int] = {}

        async def stat(i: int) -> None:
            st = await client.namenode.get_file_info(f"/many/f{i % 20}")
            assert st is not None
            sizes[i] = st.length

        async with trio.open_nursery() as n:
            for i in range(300):
                n.start_soon(stat, i)
        assert sizes == {i: i % 20 for i in range(300)}
        assert client.namenode.connects == 1 and client.namenode._conns[0].qop == "auth-conf"
