"""A CSI publish request checked (hdfsfuse.csi.volumes): attributes are mount options, credentials
come only from the Secret, every refusal names its cause and never a Secret's value."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hdfsfuse.csi.volumes import InvalidVolume, plan_publish

SOURCE = {"source": "hdfs://nn.example:8020/data"}
KEYTAB = b"\x05\x02 a keytab's bytes \xff\x00"


def plan(context: dict[str, str] | None = None, secrets: dict[str, str] | None = None, group: str = ""):  # type: ignore[no-untyped-def]
    return plan_publish("vol-1", "/var/lib/kubelet/pods/p/volumes/v/mount", {**SOURCE, **(context or {})},
                        secrets or {}, group)


def refused(context: dict[str, str] | None = None, secrets: dict[str, str] | None = None, group: str = "") -> str:
    with pytest.raises(InvalidVolume) as e:
        plan(context, secrets, group)
    return str(e.value)


def test_attributes_become_mount_options_and_kubernetes_keys_do_not() -> None:
    p = plan({"readahead_max": "4M", "user": "etl", "csi.storage.k8s.io/pod.name": "loader-0",
              "csi.storage.k8s.io/ephemeral": "true", "direct_io": ""})
    assert p.source == SOURCE["source"]
    assert p.options == ("direct_io", "readahead_max=4M", "user=etl")
    options = p.mount_options("/s")
    assert "allow_other" in options  # pods run as other users than the driver
    assert "fsname=hdfsfuse:vol-1" in options
    assert p.files == {} and p.environment("/s") == {}


def test_a_volume_id_is_made_safe_for_the_mount_table() -> None:
    p = plan_publish("ns/vol 1,x", "/t", SOURCE, {})
    assert "fsname=hdfsfuse:ns_vol_1_x" in p.mount_options("/s")


@pytest.mark.parametrize(("context", "expected"), [
    ({"source": ""}, "volume attribute 'source' is missing"),
    ({"source": "s3://bucket/x"}, "'s3://bucket/x' is not an hdfs:// or viewfs:// URI"),
    ({"readahead_max": "lots"}, "volume attribute readahead_max: 'lots' is not a size"),
    ({"no_such_option": "1"}, "volume attribute 'no_such_option=1'"),
    ({"keytab": "/etc/krb5.keytab"}, "volume attribute 'keytab': credentials come from the volume's Secret"),
    ({"token_file": "/root/tokens"}, "volume attribute 'token_file': credentials come from the volume's Secret"),
    ({"log_file": "/etc/passwd"}, "volume attribute 'log_file' is not an option a volume can set"),
    ({"allow_other": ""}, "volume attribute 'allow_other' is not an option a volume can set"),
    ({"user": "a,b"}, "volume attribute 'user': its value may not hold a comma"),
    ({"identity": "caller", "cache_size": "1G"}, "volume attribute cache_size needs cache_dir=DIR"),
    ({"identity": "someone"}, "volume attribute identity: 'someone' must be mount, caller or ticket_cache"),
])
def test_bad_attributes_are_refused_by_name(context: dict[str, str], expected: str) -> None:
    assert expected in refused(context)


def test_ids_and_target_are_required() -> None:
    with pytest.raises(InvalidVolume, match="volume id is missing"):
        plan_publish("", "/t", SOURCE, {})
    with pytest.raises(InvalidVolume, match="target path is missing"):
        plan_publish("v", "", SOURCE, {})
    with pytest.raises(InvalidVolume, match="not absolute"):
        plan_publish("v", "relative/t", SOURCE, {})


def test_a_keytab_secret_becomes_a_file_and_options() -> None:
    p = plan(secrets={"keytab": base64.b64encode(KEYTAB).decode(), "principal": "etl@EXAMPLE.COM\n",
                      "krb5.conf": "[libdefaults]\n", "core-site.xml": "<configuration/>"})
    assert p.files == {"keytab": KEYTAB, "krb5.conf": b"[libdefaults]\n", "core-site.xml": b"<configuration/>"}
    options = p.mount_options("/run/s")
    assert "principal=etl@EXAMPLE.COM" in options
    assert "keytab=/run/s/keytab" in options
    assert "hadoop_conf=/run/s/conf" in options
    assert p.environment("/run/s") == {"KRB5_CONFIG": "/run/s/krb5.conf"}


def test_a_token_secret_becomes_the_token_file() -> None:
    p = plan(secrets={"token_file": base64.b64encode(b"HDTS\x00...").decode()})
    assert p.files == {"tokens": b"HDTS\x00..."}
    assert "token_file=/s/tokens" in p.mount_options("/s")


def test_secret_refusals_name_the_key_never_the_value() -> None:
    secret = "s3cr3t-value-never-shown"
    for secrets, expected in [
        ({"principal": "etl@EXAMPLE.COM"}, "has a principal but its Secret has no key 'keytab'"),
        ({"keytab": secret + "!"}, "Secret key 'keytab' is not base64"),
        ({"keytab": ""}, "Secret key 'keytab' is empty"),
        ({"password": secret}, "the volume's Secret has key 'password'"),
        ({"keytab": base64.b64encode(KEYTAB).decode(), "principal": "not a principal " + secret},
         "volume attribute principal: "),
    ]:
        message = refused(secrets=secrets)
        assert expected in message
        if "principal" not in expected:
            assert secret not in message


def test_settings_given_twice_are_refused() -> None:
    keytab = base64.b64encode(KEYTAB).decode()
    assert "principal is in both" in refused({"principal": "a@R"}, {"keytab": keytab, "principal": "a@R"})
    assert "'hadoop_conf' and the Secret's Hadoop configuration" in refused(
        {"hadoop_conf": "/etc/hadoop/conf"}, {"hdfs-site.xml": "<configuration/>"})
    assert "'gid' and the pod's fsGroup" in refused({"gid": "100"}, group="2000")


def test_the_pods_fs_group_becomes_the_group() -> None:
    assert "gid=2000" in plan(group="2000").options


def test_the_fingerprint_tells_the_same_request_from_another() -> None:
    keytab = base64.b64encode(KEYTAB).decode()
    same = plan({"user": "etl"}, {"keytab": keytab, "principal": "a@R"})
    assert same.fingerprint == plan({"user": "etl"}, {"keytab": keytab, "principal": "a@R"}).fingerprint
    assert same.fingerprint != plan({"user": "etl2"}, {"keytab": keytab, "principal": "a@R"}).fingerprint
    other_key = base64.b64encode(KEYTAB + b"x").decode()
    assert same.fingerprint != plan({"user": "etl"}, {"keytab": other_key, "principal": "a@R"}).fingerprint
    assert KEYTAB.hex() not in same.fingerprint and keytab not in repr(same.options)


@given(st.dictionaries(st.text(max_size=12), st.text(max_size=12), max_size=4),
       st.dictionaries(st.text(max_size=12), st.text(max_size=12), max_size=3))
def test_any_request_is_planned_or_refused_as_invalid(context: dict[str, str], secrets: dict[str, str]) -> None:
    try:
        plan(context, secrets)
    except InvalidVolume:
        pass
