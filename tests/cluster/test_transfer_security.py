"""SASL on DataNode connections through the library: an unknown data-encryption key is fetched again."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.conftest import random_bytes

MiB = 1 << 20
LAYERS = {"authentication": "auth", "integrity": "auth-int", "privacy": "auth-conf/3des"}


async def test_unknown_encryption_key_is_fetched_again(secure, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A DataNode that no longer knows the data-encryption key (expired, or its block key
    rolled) answers ERROR_UNKNOWN_KEY: the client fetches a new key and the read goes on."""
    from hdfsfuse.client import ClientOptions, HdfsClient
    from hdfsfuse.security.credentials import SecurityOptions

    cluster = secure(data_transfer_protection="privacy", encrypt_data_transfer=True)
    data = cluster.put_bytes(random_bytes(200_000, seed=4), "/key/f")
    k = cluster.kerberos
    monkeypatch.setenv("KRB5_CONFIG", k["krb5_conf"])
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path}/none")
    sec = SecurityOptions(keytab=k["client_keytab"], principal=k["client_principal"])
    async with HdfsClient.connect(cluster.uri, conf_dir=cluster.conf_dir, options=ClientOptions(security=sec)) as c:
        f = await c.open("/key/f")
        assert bytes(await c.read_range(f, 0, 1000)) == data[:1000]
        assert c.stats.encryption_key_fetches == 1
        assert f.dn_security is not None and f.dn_security._key is not None
        f.dn_security._key.keyId ^= 0x5A5A5A5A  # a key id the DataNodes never issued
        c.context.pool.close()  # the next read needs a new connection, hence a handshake
        assert bytes(await c.read_range(f, 5000, 1000)) == data[5000:6000]
        assert c.stats.encryption_key_fetches == 2
        await trio.lowlevel.checkpoint()


