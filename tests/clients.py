"""Library clients and client configurations for the cluster tests."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from hdfsfuse.client import ClientOptions, HdfsClient
from tests.minidfs import MiniDfs


@asynccontextmanager
async def client_for(cluster: MiniDfs, conf_dir: str | None = None, **options: object) -> AsyncIterator[HdfsClient]:
    """A library client. Hedging is off unless asked for: these tests count DataNode ops exactly."""
    options.setdefault("hedge_after", None)
    async with HdfsClient.connect(cluster.uri, conf_dir=conf_dir or cluster.conf_dir,
                                  options=ClientOptions(**options)) as client:  # type: ignore[arg-type]
        yield client


def conf_with(cluster: MiniDfs, tmp_path: Path, name: str, value: str) -> str:
    """A copy of the cluster's client configuration with one more hdfs-site.xml property."""
    conf = tmp_path / "conf"
    shutil.copytree(cluster.conf_dir, conf)
    site = conf / "hdfs-site.xml"
    prop = f"<property><name>{name}</name><value>{value}</value></property>"
    site.write_text(site.read_text().replace("</configuration>", prop + "</configuration>"))
    return str(conf)
