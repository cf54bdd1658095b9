"""Encrypted files (encryption zones) through the library, on a real cluster with a real KMS:
exact bytes at any offset, rolled keys, snapshots and erasure coding inside zones, exact reads on
the wire, the KMS going away and coming back, key ACLs, and ciphertext only in the block cache."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import trio

from hdfsfuse import errors
from tests.clients import client_for
from tests.conftest import random_bytes
from tests.minidfs import MiniDfs, MiniDfsError

MiB = 1 << 20


def _zone_file(cluster: MiniDfs, path: str, size: int, seed: int) -> bytes:
    return cluster.put_bytes(random_bytes(size, seed=seed), path)


async def test_encrypted_files_read_exact_at_any_offset(kms_cluster: MiniDfs) -> None:
    data = _zone_file(kms_cluster, "/ez/exact", 2 * MiB + 622_674, seed=490)  # 3 blocks of 1 MiB
    rnd = random.Random(491)
    ranges = [(0, 5000), (1, 5000), (15, 17), (16, 1), (4095, 4098), (MiB - 1, 2), (MiB - 7, 20_000),
              (2 * MiB - 3, MiB), (len(data) - 33, 100), (len(data) - 1, 1)]
    ranges += [(rnd.randrange(len(data)), rnd.randrange(1, 70_000)) for _ in range(40)]
    async with client_for(kms_cluster) as client:
        file = await client.open("/ez/exact")
        assert file.encryption is not None and file.encryption.key_version == "ezkey@0"
        for offset, length in ranges:
            assert await client.read_range(file, offset, length) == data[offset : offset + length], (offset, length)
        assert await client.read_range(file, 0, len(data)) == data  # sequential, across both block ends
        raw = await client.read_range("/.reserved/raw/ez/exact", 0, len(data))  # what the DataNodes hold
        assert len(raw) == len(data) and raw[:4096] != data[:4096]
        assert client.stats.kms_key_requests == 1


async def test_a_rolled_keys_old_version_reads_beside_the_new(kms_cluster: MiniDfs) -> None:
    kms_cluster.create_key("rollkey")
    kms_cluster.create_encryption_zone("/ez-roll", "rollkey")
    old = _zone_file(kms_cluster, "/ez-roll/old", 300_000, seed=492)
    assert kms_cluster.roll_key("rollkey") == "rollkey@1"
    new = _zone_file(kms_cluster, "/ez-roll/new", 300_000, seed=493)
    async with client_for(kms_cluster) as client:
        files = [await client.open("/ez-roll/old"), await client.open("/ez-roll/new")]
        assert [f.encryption.key_version for f in files if f.encryption] == ["rollkey@0", "rollkey@1"]
        for file, data in zip(files, (old, new), strict=True):
            assert await client.read_range(file, 12_345, 200_000) == data[12_345:212_345]


async def test_a_snapshot_inside_a_zone_reads_the_old_file(kms_cluster: MiniDfs) -> None:
    kms_cluster.create_encryption_zone("/ez-snap", "ezkey")
    data = _zone_file(kms_cluster, "/ez-snap/f", 700_000, seed=494)
    kms_cluster.allow_snapshot("/ez-snap")
    kms_cluster.create_snapshot("/ez-snap", "s1")
    kms_cluster.put_bytes(random_bytes(900_000, seed=495), "/ez-snap/f")  # replaced: a new EDEK and IV
    async with client_for(kms_cluster) as client:
        assert await client.read_range("/ez-snap/.snapshot/s1/f", 0, 800_000) == data
        assert await client.read_range("/ez-snap/f", 1000, 10) == random_bytes(900_000, seed=495)[1000:1010]


async def test_an_erasure_coded_directory_inside_a_zone(kms_cluster: MiniDfs) -> None:
    kms_cluster.create_encryption_zone("/ez-ec", "ezkey")
    kms_cluster.set_ec_policy("/ez-ec/xor", "XOR-2-1-1024k")
    data = _zone_file(kms_cluster, "/ez-ec/xor/f", 5 * MiB + 12_345, seed=496)
    async with client_for(kms_cluster) as client:
        file = await client.open("/ez-ec/xor/f")
        assert file.ec_policy is not None and file.encryption is not None
        for offset, length in [(0, 100), (MiB - 5, 10), (2 * MiB + 3, MiB + 7), (len(data) - 10, 10)]:
            assert await client.read_range(file, offset, length) == data[offset : offset + length]
        assert await client.read_range(file, 0, len(data)) == data


async def _bytes_read(cluster: MiniDfs, path: str, offsets: list[int]) -> int:
    async with client_for(cluster) as client:
        file = await client.open(path)
        before = await trio.to_thread.run_sync(cluster.metrics_total)
        ops = client.stats.dtp_read_ops
        for offset in offsets:
            await client.read_range(file, offset, 4096)
        after = await trio.to_thread.run_sync(cluster.metrics_after, before, client.stats.dtp_read_ops - ops)
    return after["BytesRead"] - before["BytesRead"]


async def test_small_reads_in_a_zone_ask_the_datanodes_for_exactly_what_a_plain_file_costs(
        kms_cluster: MiniDfs) -> None:
    data = random_bytes(3 * MiB, seed=497)
    kms_cluster.put_bytes(data, "/ez/amp")
    kms_cluster.put_bytes(data, "/plain-amp")
    offsets = [4096 * random.Random(498 + i).randrange(3 * MiB // 4096) for i in range(50)]
    encrypted = await _bytes_read(kms_cluster, "/ez/amp", offsets)
    plain = await _bytes_read(kms_cluster, "/plain-amp", offsets)
    assert encrypted == plain
    assert encrypted / (50 * 4096) <= 1.02  # the data and its checksums (4 bytes per 512)


async def test_open_files_keep_reading_while_the_kms_is_down(kms_cluster: MiniDfs) -> None:
    first = _zone_file(kms_cluster, "/ez/down-1", 200_000, seed=499)
    second = _zone_file(kms_cluster, "/ez/down-2", 200_000, seed=500)
    async with client_for(kms_cluster, user="carol") as client:
        opened = await client.open("/ez/down-1")
        kms_cluster.stop_kms()
        try:
            assert await client.read_range(opened, 5, 100_000) == first[5:100_005]
            with pytest.raises(errors.KeyUnavailable) as e:
                await client.open("/ez/down-2")
            message = str(e.value)  # one line: the file, the key version, the KMS, the user
            assert "/ez/down-2" in message and "ezkey@0" in message and kms_cluster.ready["kms"] in message
            assert "carol" in message and "Connection refused" in message and "\n" not in message
            assert e.value.errno == 5  # EIO
        finally:
            kms_cluster.start_kms()
        assert await client.read_range(await client.open("/ez/down-2"), 0, 200_000) == second
        assert client.stats.kms_key_failures == 1


async def test_a_key_acl_decides_per_user(kms_cluster: MiniDfs) -> None:
    kms_cluster.create_key("aclkey")
    kms_cluster.create_encryption_zone("/ez-acl", "aclkey")
    data = _zone_file(kms_cluster, "/ez-acl/f", 100_000, seed=501)
    kms_cluster.set_key_acl("aclkey", "DECRYPT_EEK", "alice")
    try:
        async with client_for(kms_cluster, user="bob") as bob:
            with pytest.raises(errors.AccessDenied) as e:
                await bob.open("/ez-acl/f")
            assert "bob" in str(e.value) and "aclkey@0" in str(e.value) and "DECRYPT_EEK" in str(e.value)
        async with client_for(kms_cluster, user="alice") as alice:
            assert await alice.read_range("/ez-acl/f", 0, 100_000) == data
    finally:
        kms_cluster.set_key_acl("aclkey", "DECRYPT_EEK", "*")


async def test_the_block_cache_holds_only_ciphertext(kms_cluster: MiniDfs, tmp_path: Path) -> None:
    data = _zone_file(kms_cluster, "/ez/cached", 2 * MiB + 5000, seed=502)
    cache = tmp_path / "cache"
    async with client_for(kms_cluster, cache_dir=str(cache)) as client:
        file = await client.open("/ez/cached")
        assert await client.read_range(file, 0, len(data)) == data
        raw = await client.read_range("/.reserved/raw/ez/cached", 0, len(data))
        await trio.sleep(0)
    stored = b"".join(p.read_bytes() for p in cache.rglob("*") if p.is_file())
    rnd = random.Random(503)
    samples = [rnd.randrange(len(data) - 32) for _ in range(300)]
    assert any(raw[i : i + 32] in stored for i in samples)  # the cache did keep these blocks
    assert not any(data[i : i + 32] in stored for i in samples)


def test_the_harness_refuses_an_acl_for_an_unknown_key_with_a_clear_error(kms_cluster: MiniDfs) -> None:
    with pytest.raises(MiniDfsError, match="key no-such-key: the KMS refused to generate an EEK"):
        kms_cluster.set_key_acl("no-such-key", "DECRYPT_EEK", "alice")
