"""The Prometheus text of `hdfsfuse stats` (stats.prometheus, stats.prometheus_of): every counter of a
busy mount renders, labelled ones with their label, several mounts' under one HELP/TYPE each."""

from __future__ import annotations

import collections
import dataclasses
import re

from hdfsfuse.stats import Stats, prometheus, prometheus_of, snapshot


def busy_snapshot() -> dict[str, object]:
    stats = Stats()
    for field in dataclasses.fields(stats):  # every labelled counter holds an entry
        value = getattr(stats, field.name)
        if isinstance(value, collections.Counter):
            value["a"] += 1
    return snapshot(stats, collections.Counter({"getBlockLocations": 3}), 0, {"127.0.0.1:9866": 1.5},
                    collections.Counter({"active": 3}))


SAMPLE = re.compile(r'^hdfsfuse_[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? -?[0-9.e+-]+$')


def test_every_stat_of_a_busy_mount_renders() -> None:
    snap = busy_snapshot()
    text = prometheus(snap)
    for line in text.splitlines():
        assert line.startswith("# ") or SAMPLE.match(line), line
    assert 'hdfsfuse_local_disk_reads{how="a"} 1' in text
    assert 'hdfsfuse_namenode_rpcs{method="getBlockLocations"} 3' in text


def test_several_volumes_share_help_and_type_lines() -> None:
    snap = busy_snapshot()
    text = prometheus_of([({"volume_id": "v1"}, snap), ({"volume_id": 'v"2'}, snap)])
    assert text.count("# TYPE hdfsfuse_fuse_reads counter") == 1
    assert 'hdfsfuse_fuse_reads{volume_id="v1"} 0' in text
    assert 'hdfsfuse_fuse_reads{volume_id="v\\"2"} 0' in text
    assert 'hdfsfuse_namenode_rpcs{volume_id="v1",method="getBlockLocations"} 3' in text
    for line in text.splitlines():
        assert line.startswith("# ") or SAMPLE.match(line.replace('\\"', "")), line
