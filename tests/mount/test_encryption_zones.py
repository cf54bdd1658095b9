"""Encrypted files through the real mount, read by real tools: exact bytes, the encryption xattr,
the KMS stopped and back, key ACLs per local user (identity=caller), ciphertext in the block cache."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from hdfsfuse.fuse.xattrs import STATS_XATTR
from tests.conftest import keytab_options, local_user, no_ticket_env, random_bytes
from tests.minidfs import MiniDfs

MiB = 1 << 20


def test_tools_read_encrypted_files_exactly(kms_cluster: MiniDfs, mount) -> None:  # type: ignore[no-untyped-def]
    data = kms_cluster.put_bytes(random_bytes(3 * MiB + 777, seed=520), "/ez/tools")
    m = mount(kms_cluster)
    path = m.path("/ez/tools")
    digest = subprocess.run(["sha256sum", path], capture_output=True, text=True, check=True).stdout.split()[0]
    assert digest == hashlib.sha256(data).hexdigest()
    rnd = random.Random(521)
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(60):
            offset, length = rnd.randrange(len(data)), rnd.randrange(1, 200_000)
            assert os.pread(fd, length, offset) == data[offset : offset + length], (offset, length)
    finally:
        os.close(fd)
    tail = subprocess.run(["dd", f"if={path}", "bs=1", "skip=3145700", "status=none"], capture_output=True,
                          check=True).stdout
    assert tail == data[3_145_700:]
    described = json.loads(os.getxattr(path, "user.hdfs.encryption"))
    assert described == {"key": "ezkey", "key_version": "ezkey@0", "suite": "AES/CTR/NoPadding"}
    assert "user.hdfs.encryption" in os.listxattr(path)
    with pytest.raises(OSError) as e:
        os.getxattr(m.path("/ez"), "user.hdfs.encryption")  # the zone's directory holds no file key
    assert e.value.errno == errno.ENODATA


def test_rolled_keys_snapshots_and_erasure_coding_in_zones_through_the_mount(kms_cluster: MiniDfs, mount) -> None:  # type: ignore[no-untyped-def]
    kms_cluster.create_key("mount-roll")
    kms_cluster.create_encryption_zone("/ezm", "mount-roll")
    old = kms_cluster.put_bytes(random_bytes(1_300_000, seed=542), "/ezm/old")
    kms_cluster.roll_key("mount-roll")
    new = kms_cluster.put_bytes(random_bytes(1_100_000, seed=543), "/ezm/new")
    kms_cluster.allow_snapshot("/ezm")
    kms_cluster.create_snapshot("/ezm", "s1")
    replaced = kms_cluster.put_bytes(random_bytes(700_000, seed=544), "/ezm/old")  # a new EDEK and IV
    kms_cluster.set_ec_policy("/ezm/xor", "XOR-2-1-1024k")
    striped = kms_cluster.put_bytes(random_bytes(4 * MiB + 321, seed=545), "/ezm/xor/f")
    m = mount(kms_cluster)
    versions = {name: json.loads(os.getxattr(m.path(f"/ezm/{name}"), "user.hdfs.encryption"))["key_version"]
                for name in ("new", ".snapshot/s1/old")}
    assert versions == {"new": "mount-roll@1", ".snapshot/s1/old": "mount-roll@0"}
    rnd = random.Random(546)
    for path, data in (("/ezm/.snapshot/s1/old", old), ("/ezm/new", new), ("/ezm/old", replaced),
                       ("/ezm/xor/f", striped)):
        with open(m.path(path), "rb") as f:
            assert f.read() == data, path
        fd = os.open(m.path(path), os.O_RDONLY)
        try:
            for _ in range(10):
                offset, length = rnd.randrange(len(data)), rnd.randrange(1, 300_000)
                assert os.pread(fd, length, offset) == data[offset : offset + length], (path, offset, length)
        finally:
            os.close(fd)


@pytest.mark.parametrize("mode", ["page cache", "direct_io"])
def test_sequential_reads_through_readahead_decrypt_each_part_at_its_offset(kms_cluster: MiniDfs, mount,  # type: ignore[no-untyped-def]
                                                                            mode: str) -> None:
    # Readahead buffers hold ciphertext; each read decrypts its own part of them. Reads of an odd
    # size (direct_io hands them to the daemon as they are) start at every offset modulo 16.
    data = kms_cluster.put_bytes(random_bytes(20 * MiB + 5, seed=530), f"/ez/sequential-{mode.replace(' ', '-')}")
    m = mount(kms_cluster, *(["direct_io"] if mode == "direct_io" else []))
    path = m.path(f"/ez/sequential-{mode.replace(' ', '-')}")
    got = bytearray()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(100_003):
            got += chunk
    assert bytes(got) == data
    stats = json.loads(os.getxattr(m.dir, STATS_XATTR))
    assert stats["cache_hits"].get("readahead", 0) > 10  # the reads were served from readahead buffers


def test_an_https_kms_with_its_ca_file_or_the_systems_and_one_no_ca_vouches_for(fresh_cluster, mount) -> None:  # type: ignore[no-untyped-def]
    cluster = fresh_cluster(kms=True, kms_https=True)
    assert cluster.ready["kms"].startswith("kms://https@")
    cluster.create_encryption_zone("/ez", "tls-key")
    data = cluster.put_bytes(random_bytes(500_000, seed=540), "/ez/f")
    ca_file = cluster.ready["kms_ca_file"]
    named = mount(cluster, f"kms_ca_file={ca_file}")
    assert open(named.path("/ez/f"), "rb").read() == data
    system = mount(cluster, env={"SSL_CERT_FILE": ca_file})  # the system's CAs: OpenSSL's default paths
    assert open(system.path("/ez/f"), "rb").read() == data
    untrusted = mount(cluster)
    with pytest.raises(OSError) as e:
        open(untrusted.path("/ez/f"), "rb")
    assert e.value.errno == errno.EIO
    [line] = [ln for ln in untrusted.log_text().splitlines() if "/ez/f" in ln and "tls-key" in ln]
    assert "TLS: self-signed certificate in certificate chain (trust its CA: -o kms_ca_file=FILE" in line, line


def test_new_opens_fail_clearly_while_the_kms_is_down_and_open_files_keep_reading(
        kms_cluster: MiniDfs, mount) -> None:  # type: ignore[no-untyped-def]
    first = kms_cluster.put_bytes(random_bytes(2 * MiB, seed=522), "/ez/kms-down-1")
    second = kms_cluster.put_bytes(random_bytes(MiB, seed=523), "/ez/kms-down-2")
    m = mount(kms_cluster, "direct_io")
    with open(m.path("/ez/kms-down-1"), "rb") as opened:
        assert opened.read(1000) == first[:1000]
        kms_cluster.stop_kms()
        try:
            opened.seek(MiB + 3)
            assert opened.read(MiB - 3) == first[MiB + 3 :]
            with pytest.raises(OSError) as e:
                open(m.path("/ez/kms-down-2"), "rb")
            assert e.value.errno == errno.EIO
        finally:
            kms_cluster.start_kms()
    with open(m.path("/ez/kms-down-2"), "rb") as again:
        assert again.read() == second
    lines = [line for line in m.log_text().splitlines() if "/ez/kms-down-2" in line]
    assert len(lines) == 1, lines  # one line: the file, the key version, the KMS, the user
    assert "ezkey@0" in lines[0] and kms_cluster.ready["kms"] in lines[0] and "Connection refused" in lines[0]


def _cat_as(user: str, path: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["runuser", "-u", user, "--", "cat", path], capture_output=True)


def _only_alice_reads(path: str, data: bytes) -> None:
    """The key ACL lets hdfsfuse-alice decrypt `path` and refuses hdfsfuse-bob (asked first)."""
    bob = _cat_as("hdfsfuse-bob", path)
    assert bob.returncode != 0 and b"Permission denied" in bob.stderr
    alice = _cat_as("hdfsfuse-alice", path)
    assert alice.returncode == 0 and alice.stdout == data


def test_a_key_acl_denies_one_local_user_while_another_reads(kms_cluster: MiniDfs, mount) -> None:  # type: ignore[no-untyped-def]
    local_user("hdfsfuse-alice")
    local_user("hdfsfuse-bob")
    kms_cluster.create_key("userkey")
    kms_cluster.create_encryption_zone("/ez-users", "userkey")
    data = kms_cluster.put_bytes(random_bytes(300_000, seed=524), "/ez-users/f")
    kms_cluster.chmod("/ez-users/f", "644")
    kms_cluster.set_key_acl("userkey", "DECRYPT_EEK", "hdfsfuse-alice")
    try:
        m = mount(kms_cluster, "allow_other", "identity=caller")
        _only_alice_reads(m.path("/ez-users/f"), data)
        assert _cat_as("hdfsfuse-bob", m.path("/ez-users/f")).returncode != 0  # alice's key is never handed to bob
        denied = [line for line in m.log_text().splitlines() if "hdfsfuse-bob" in line and "userkey@0" in line]
        assert denied and "DECRYPT_EEK" in denied[0]
    finally:
        kms_cluster.set_key_acl("userkey", "DECRYPT_EEK", "*")


def test_kerberos_identity_caller_asks_the_kms_as_each_caller(secure, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # The mount logs in as hfuse (a proxy user of the NameNode and the KMS); under identity=caller
    # the KMS is asked with doAs=<the local user>, so its key ACL decides per user.
    cluster = secure(kms=True, proxy_user="hfuse")
    local_user("hdfsfuse-alice")
    local_user("hdfsfuse-bob")
    cluster.create_key("callerkey")
    cluster.create_encryption_zone("/ez-callers", "callerkey")
    data = cluster.put_bytes(random_bytes(200_000, seed=541), "/ez-callers/f")
    cluster.chmod("/ez-callers/f", "644")
    cluster.set_key_acl("callerkey", "DECRYPT_EEK", "hdfsfuse-alice")
    m = mount(cluster, "allow_other", "identity=caller", *keytab_options(cluster, "hfuse"),
              env=no_ticket_env(tmp_path))
    _only_alice_reads(m.path("/ez-callers/f"), data)
    denied = [line for line in m.log_text().splitlines() if "hdfsfuse-bob" in line and "callerkey@0" in line]
    assert denied and "DECRYPT_EEK" in denied[0], m.log_text()[-3000:]


def test_nothing_in_the_block_cache_is_plaintext(kms_cluster: MiniDfs, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = kms_cluster.put_bytes(random_bytes(2 * MiB + 4321, seed=525), "/ez/cache-me")
    cache = tmp_path / "cache"
    m = mount(kms_cluster, f"cache_dir={cache}")
    with open(m.path("/ez/cache-me"), "rb") as f:
        assert f.read() == data
    m.unmount()
    stored = b"".join(p.read_bytes() for p in cache.rglob("*") if p.is_file())
    assert len(stored) >= len(data)  # every block was kept
    rnd = random.Random(526)
    assert not any(data[i : i + 32] in stored for i in (rnd.randrange(len(data) - 32) for _ in range(500)))
    m = mount(kms_cluster, f"cache_dir={cache}")  # and the cached ciphertext reads back as the file
    with open(m.path("/ez/cache-me"), "rb") as f:
        assert f.read() == data
    assert json.loads(os.getxattr(m.dir, "user.hdfsfuse.stats"))["block_cache_served_bytes"] >= len(data)


def test_a_kerberized_cluster_and_kms_with_a_keytab_and_with_a_token_file(
        secure, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = secure(kms=True)
    cluster.create_encryption_zone("/ez", "ezkey")
    data = cluster.put_bytes(random_bytes(MiB + 999, seed=527), "/ez/secure")
    k = cluster.kerberos
    tokens = cluster.command("delegation_token", user="alice", file=str(tmp_path / "tokens"))
    assert tokens["kinds"] == "HDFS_DELEGATION_TOKEN,kms-dt"  # the KMS's token beside the NameNode's
    no_ticket = {"KRB5CCNAME": f"FILE:{tmp_path}/no-such-cache"}
    for options in ([f"keytab={k['client_keytab']}", f"principal={k['client_principal']}"],
                    [f"token_file={tmp_path / 'tokens'}"]):
        m = mount(cluster, *options, env=no_ticket)
        with open(m.path("/ez/secure"), "rb") as f:
            assert f.read() == data, options
        stats = json.loads(os.getxattr(m.dir, "user.hdfsfuse.stats"))
        assert stats["kms_key_requests"] == 1 and stats["kms_key_failures"] == 0
        m.unmount()
