"""What a NodePublishVolume asks for, checked: the mount's source, options and credential files. Pure code.

The volume attributes (CSI volume context) are the contract: `source` is the URI, every other
attribute is a mount option by its mount-option name, checked by the mount's own parser. Keys
Kubernetes adds (`csi.storage.k8s.io/...`: pod name, namespace, ephemeral) are not options.
Credentials come only from the volume's Secret (CSI `secrets`), never from attributes naming files
on the node, since whoever writes a pod's inline volume would otherwise read the node's keytabs:

| Secret key | becomes |
|---|---|
| `keytab` | the keytab (its bytes in base64), `-o keytab=` |
| `principal` | `-o principal=` (or the attribute of that name) |
| `token_file` | a Hadoop token file (its bytes in base64), `-o token_file=` |
| `core-site.xml`, `hdfs-site.xml` | the Hadoop configuration, `-o hadoop_conf=` |
| `krb5.conf` | the Kerberos configuration (`KRB5_CONFIG` of the mount) |

The files are written by `mounts.Mounter` to a private tmpfs of the volume's own.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import os
import re

from hdfsfuse.conf.mount_options import parse_items
from hdfsfuse.errors import ConfigError

SOURCE = "source"
KUBERNETES_PREFIX = "csi.storage.k8s.io/"
# Attributes the driver owns: a node file named by a pod's author, or what the driver sets itself.
FROM_SECRET_ONLY = frozenset({"keytab", "token_file"})
DRIVER_OWNED = frozenset({"log_file", "allow_other", "fsname"})
SECRET_FILES = {"keytab": "keytab", "token_file": "tokens"}  # base64 -> file name
CONFIG_FILES = ("core-site.xml", "hdfs-site.xml")
KRB5_CONF = "krb5.conf"
SECRET_KEYS = frozenset({*SECRET_FILES, "principal", *CONFIG_FILES, KRB5_CONF})
SCHEMES = ("hdfs://", "viewfs://")


class InvalidVolume(ConfigError):
    """A publish request the driver refuses as given (gRPC INVALID_ARGUMENT)."""


@dataclasses.dataclass(frozen=True)
class PublishPlan:
    """One volume at one target path: what to mount and which files to write first."""

    volume_id: str
    target_path: str
    source: str
    options: tuple[str, ...]  # mount options as `name[=value]`, without the credential files' paths
    files: dict[str, bytes]  # name -> bytes, written to the volume's private directory
    fingerprint: str  # the same request again (same everything) has the same one

    def mount_options(self, secrets_dir: str) -> list[str]:
        """The options of `hdfsfuse mount`, the credential files at their paths in `secrets_dir`."""
        options = [*self.options, "allow_other", f"fsname=hdfsfuse:{re.sub(r'[^A-Za-z0-9._-]', '_', self.volume_id)}"]
        for key, name in SECRET_FILES.items():
            if name in self.files:
                options.append(f"{key}={os.path.join(secrets_dir, name)}")
        if any(name in self.files for name in CONFIG_FILES):
            options.append(f"hadoop_conf={os.path.join(secrets_dir, 'conf')}")
        return options

    def environment(self, secrets_dir: str) -> dict[str, str]:
        return {"KRB5_CONFIG": os.path.join(secrets_dir, KRB5_CONF)} if KRB5_CONF in self.files else {}


def file_path(name: str) -> str:
    """Where a plan's file goes inside the volume's private directory."""
    return os.path.join("conf", name) if name in CONFIG_FILES else name


def plan_publish(volume_id: str, target_path: str, context: dict[str, str], secrets: dict[str, str],
                 mount_group: str = "") -> PublishPlan:
    """Check a publish request's attributes and Secret. Raises InvalidVolume naming the cause
    (never a Secret's value)."""
    if not volume_id:
        raise InvalidVolume("the volume id is missing")
    if not target_path:
        raise InvalidVolume("the target path is missing")
    if not os.path.isabs(target_path):
        raise InvalidVolume(f"the target path {target_path!r} is not absolute")
    source = context.get(SOURCE, "")
    if not source:
        raise InvalidVolume("volume attribute 'source' is missing (the hdfs:// or viewfs:// URI to mount)")
    if not source.startswith(SCHEMES) or any(c in source for c in "\n\0"):
        raise InvalidVolume(f"volume attribute 'source': {source!r} is not an hdfs:// or viewfs:// URI")
    items = []
    for name, value in sorted(context.items()):
        if name == SOURCE or name.startswith(KUBERNETES_PREFIX):
            continue
        if name in FROM_SECRET_ONLY:
            raise InvalidVolume(f"volume attribute {name!r}: credentials come from the volume's Secret "
                                f"(key {name!r}), not from a file on the node")
        if name in DRIVER_OWNED or not re.fullmatch(r"[a-z_0-9]+", name):
            raise InvalidVolume(f"volume attribute {name!r} is not an option a volume can set")
        if any(c in value for c in ",\n\0"):
            raise InvalidVolume(f"volume attribute {name!r}: its value may not hold a comma or a newline")
        items.append(f"{name}={value}" if value != "" else name)
    if mount_group:
        if "gid" in context:
            raise InvalidVolume("volume attribute 'gid' and the pod's fsGroup both set the group: give one")
        items.append(f"gid={mount_group}")
    files = _secret_files(secrets)
    if "principal" in secrets:
        if "principal" in context:
            raise InvalidVolume("the principal is in both the volume attributes and its Secret: give one")
        items.append(f"principal={secrets['principal'].strip()}")
    if "hadoop_conf" in context and any(n in files for n in CONFIG_FILES):
        raise InvalidVolume("volume attribute 'hadoop_conf' and the Secret's Hadoop configuration files "
                            "both set the configuration: give one")
    if ("principal" in secrets or "principal" in context) and "keytab" not in files:
        raise InvalidVolume("the volume has a principal but its Secret has no key 'keytab'")
    check = [*items, "allow_other"]
    for key, name in SECRET_FILES.items():
        if name in files:
            check.append(f"{key}=/{name}")
    try:
        parse_items(check)
    except ConfigError as e:
        raise InvalidVolume(_as_attribute_error(str(e))) from None
    fingerprint = hashlib.sha256(json.dumps(
        [volume_id, target_path, source, items, {n: hashlib.sha256(b).hexdigest() for n, b in sorted(files.items())}],
    ).encode()).hexdigest()
    return PublishPlan(volume_id, target_path, source, tuple(items), files, fingerprint)


def _secret_files(secrets: dict[str, str]) -> dict[str, bytes]:
    unknown = sorted(set(secrets) - SECRET_KEYS)
    if unknown:
        raise InvalidVolume(f"the volume's Secret has key {unknown[0]!r}; it takes {', '.join(sorted(SECRET_KEYS))}")
    files = {}
    for key, name in SECRET_FILES.items():
        if key in secrets:
            try:
                data = base64.b64decode(secrets[key].strip(), validate=True)
            except (binascii.Error, ValueError):
                raise InvalidVolume(f"the volume's Secret key {key!r} is not base64 (of its file's bytes)") from None
            if not data:
                raise InvalidVolume(f"the volume's Secret key {key!r} is empty")
            files[name] = data
    for name in (*CONFIG_FILES, KRB5_CONF):
        if name in secrets:
            files[name] = secrets[name].encode()
    return files


def _as_attribute_error(message: str) -> str:
    """The mount parser's line, said of volume attributes ('option x' -> 'volume attribute x')."""
    return re.sub(r"^(unknown mount )?option ", "volume attribute ", message).replace(" (see hdfsfuse --help)", "")

