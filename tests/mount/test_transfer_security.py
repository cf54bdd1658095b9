"""SASL and encryption on DataNode connections, through the real mount on real secure clusters.

The matrix {authentication, integrity, privacy} x {dfs.encrypt.data.transfer off, on with AES}:
byte-exact sequential and random reads, exact BytesRead, the layer each handshake set up;
then a corrupt replica under privacy, an unknown data-encryption key, and a QOP mismatch.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest

from tests.conftest import edited_conf, random_bytes, wait_until
from tests.minidfs import MiniDfs

MiB = 1 << 20
LAYERS = {"authentication": "auth", "integrity": "auth-int", "privacy": "auth-conf/3des"}


def _keytab(cluster: MiniDfs) -> list[str]:
    k = cluster.kerberos
    return [f"keytab={k['client_keytab']}", f"principal={k['client_principal']}"]


def _env(tmp_path: Path) -> dict[str, str]:
    return {"KRB5CCNAME": f"FILE:{tmp_path}/none", "HADOOP_TOKEN_FILE_LOCATION": ""}


def _stats(mount) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return json.loads(os.getxattr(mount.dir, "user.hdfsfuse.stats"))


@pytest.mark.parametrize("encrypt", [False, True], ids=["sasl", "aes"])
@pytest.mark.parametrize("protection", ["authentication", "integrity", "privacy"])
def test_reads_are_exact_in_every_mode(secure, mount, tmp_path: Path, protection: str, encrypt: bool) -> None:  # type: ignore[no-untyped-def]
    cluster = secure(data_transfer_protection=protection, encrypt_data_transfer=encrypt)
    name = f"/m/{protection}-{encrypt}"
    data = cluster.put_bytes(random_bytes(3 * MiB + 1234, seed=hash(name) & 0xFFFF), name)
    seq = mount(cluster, *_keytab(cluster), env=_env(tmp_path))
    assert Path(seq.path(name)).read_bytes() == data  # sequential, in the default page-cache mode
    rnd = mount(cluster, "direct_io", *_keytab(cluster), env=_env(tmp_path))
    rng = random.Random(7)
    offsets = [rng.randrange(0, len(data) - 4096) // 4096 * 4096 for _ in range(40)]
    before = cluster.metrics_total()
    fd = os.open(rnd.path(name), os.O_RDONLY)
    try:
        for off in offsets:
            assert os.pread(fd, 4096, off) == data[off : off + 4096]
        odd = os.pread(fd, 1000, 1_000_001)  # unaligned: chunk alignment, still exact bytes
        assert odd == data[1_000_001:1_001_001]
    finally:
        os.close(fd)
    after = cluster.metrics_after(before, len(offsets) + 1)
    assert after["BytesRead"] - before["BytesRead"] <= 1.02 * (len(offsets) * 4096 + 1000) + 512
    layers = _stats(rnd)["datanode_sasl_handshakes"]
    expected = "AES/CTR" if encrypt else LAYERS[protection]
    assert set(layers) == {expected}, layers  # type: ignore[arg-type]
    assert _stats(rnd)["datanode_reuses"] > 0  # pooled connections kept their layer


def test_corrupt_replica_under_privacy_fails_over(secure, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = secure(data_transfer_protection="privacy")
    data = cluster.put_bytes(random_bytes(600_000, seed=3), "/corrupt/f", replication=2)
    bad = cluster.blocks("/corrupt/f")[0]["xfer"][0]
    cluster.corrupt_replica("/corrupt/f", 0, bad, offset=4096, length=8)
    m = mount(cluster, "direct_io", *_keytab(cluster), env=_env(tmp_path))
    # The NameNode lists equally near replicas in random order, so each open tries the corrupt
    # one first with even odds. Whichever comes first, the bytes are right.
    for _ in range(40):
        assert Path(m.path("/corrupt/f")).read_bytes() == data
        if _stats(m)["checksum_failures"]:
            break
    wait_until(lambda: _stats(m)["bad_block_reports"] >= 1, "the corrupt replica is reported")
    assert _stats(m)["checksum_failures"] >= 1


def test_protection_mismatch_is_one_clear_line(secure, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = secure(data_transfer_protection="privacy")
    cluster.put_bytes(b"x" * 5000, "/mismatch/f")
    conf_dir = edited_conf(cluster, tmp_path, "hdfs-site.xml", ">privacy<", ">integrity<")
    m = mount(cluster, "direct_io", f"hadoop_conf={conf_dir}", *_keytab(cluster), env=_env(tmp_path))
    with pytest.raises(OSError):
        Path(m.path("/mismatch/f")).read_bytes()
    wait_until(lambda: "/mismatch/f" in m.log_text(), "the failure is logged")
    lines = [ln for ln in m.log_text().splitlines() if " ERROR " in ln]
    # One line per failed request (the kernel may retry a failed page read), from the FUSE boundary.
    assert lines and all(" hdfsfuse.fuse.boundary: read /mismatch/f " in ln for ln in lines), lines
    assert "requires protection privacy, but dfs.data.transfer.protection here is integrity" in lines[0], lines[0]


def test_frames_larger_than_64k(secure, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """With io.file.buffer.size=128 KiB a DataNode packet, hence one DIGEST frame, carries 128 KiB:
    more than the 64 KiB the client advertised, which Hadoop's DataNode does not cap."""
    cluster = secure(data_transfer_protection="integrity", io_file_buffer_size=128 * 1024)
    data = cluster.put_bytes(random_bytes(2 * MiB + 99, seed=5), "/big-frames/f")
    m = mount(cluster, *_keytab(cluster), env=_env(tmp_path))
    assert Path(m.path("/big-frames/f")).read_bytes() == data
    assert set(_stats(m)["datanode_sasl_handshakes"]) == {"auth-int"}  # type: ignore[arg-type]


def test_keys_and_tokens_that_really_expire_recover_through_the_mount(secure, mount, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Clusters whose block tokens and data-encryption keys live one minute
    (dfs.block.access.token.lifetime=1). A file opened before they expired reads exactly after:
    under AES the mount fetches a new data-encryption key by itself, and under SASL integrity (the
    block token is the handshake's credential) the refused token is fetched again. Nothing is
    counted as a failed replica."""
    clusters = {
        "aes": secure(data_transfer_protection="privacy", encrypt_data_transfer=True, block_token_lifetime=1),
        "integrity": secure(data_transfer_protection="integrity", block_token_lifetime=1),
    }
    opened = {}
    first_read = None
    for name, cluster in clusters.items():
        data = cluster.put_bytes(random_bytes(2 * MiB + 77, seed=len(name)), "/expiry/f")
        m = mount(cluster, "direct_io", *_keytab(cluster), env=_env(tmp_path))
        fd = os.open(m.path("/expiry/f"), os.O_RDONLY)
        opened[name] = (m, fd, data)
        first_read = first_read or time.monotonic()
        assert os.pread(fd, 4096, 8192) == data[8192:12288]
    aes_mount = opened["aes"][0]
    assert _stats(aes_mount)["encryption_key_fetches"] == 1
    # Tokens and the key were issued at or before the first read: a minute and a margin later,
    # both are past their expiry by the NameNode's and DataNodes' clocks (this host's).
    time.sleep(max(0.0, first_read + 65 - time.monotonic()))
    try:
        for name, (m, fd, data) in opened.items():
            assert os.pread(fd, 4096, MiB + 4096) == data[MiB + 4096 : MiB + 8192], name
            assert os.pread(fd, len(data), 0) == data, name  # sequential: readahead over new connections
            stats = _stats(m)
            assert stats["token_refreshes"] >= 1, (name, stats)
            assert stats["replica_failovers"] == 0, (name, stats)
        assert _stats(aes_mount)["encryption_key_fetches"] == 2
    finally:
        for _, fd, _ in opened.values():
            os.close(fd)
