"""Storage options of the fsspec filesystem: the mount options by the same names, checked by the
same parser, with the same one-line errors. Pure code."""

from __future__ import annotations

import dataclasses

from hdfsfuse.conf.mount_options import MountOptions, parse_items
from hdfsfuse.errors import ConfigError

# What a library reader uses; every other mount option is about the kernel or the mount.
LIBRARY_OPTIONS = (
    "hadoop_conf", "user", "keytab", "principal", "token_file", "kms_ca_file",
    "connect_timeout", "read_timeout", "total_timeout", "namenode_timeout", "request_timeout",
    "hedge_after", "cache_dir", "cache_size", "short_circuit", "readahead_max",
)
MOUNT_ONLY = frozenset(f.name for f in dataclasses.fields(MountOptions)) - set(LIBRARY_OPTIONS) - {"passthrough"}


def _text(name: str, value: object) -> str:
    """A Python value as the mount option's text."""
    if name == "short_circuit" and isinstance(value, bool):
        return "auto" if value else "off"
    if name == "hedge_after" and value is False:
        return "off"
    if isinstance(value, bool):
        raise ConfigError(f"option {name}: {value!r} is not a valid value")
    if isinstance(value, float) and value.is_integer() and name in ("cache_size", "readahead_max"):
        value = int(value)
    return str(value)


def parse_storage_options(options: dict[str, object]) -> MountOptions:
    """Check storage options as mount options (None: the default). Raises ConfigError."""
    items = []
    for name, value in options.items():
        if name in MOUNT_ONLY:
            raise ConfigError(f"option {name} applies to mounts only, not to the fsspec filesystem")
        if name not in LIBRARY_OPTIONS:
            raise ConfigError(f"unknown storage option {name!r} (the filesystem takes {', '.join(LIBRARY_OPTIONS)})")
        if value is None:
            continue
        items.append(f"{name}={_text(name, value)}")
    return parse_items(items)
