"""The fsspec filesystem (`hdfsfuse://`) against real clusters, through real pandas, pyarrow, dask
and polars: the same frames as from a local copy, exact bytes on the wire, EC, Kerberos and
viewfs, fork safety, Python's exceptions and the read-only refusals."""

from __future__ import annotations

import asyncio
import errno
import multiprocessing
import os
import pickle
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask.dataframe as dd
import fsspec
import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from hdfsfuse.fsspec import AsyncHdfsFileSystem, HdfsFileSystem
from hdfsfuse.fsspec.filesystem import Connection
from tests.conftest import random_bytes, view_conf
from tests.minidfs import MiniDfs

ROOT = "/t/fsspec"


def _fs(cluster: MiniDfs, **options: Any) -> HdfsFileSystem:
    """The issue's spelling: `fsspec.filesystem("hdfsfuse", host=H, port=P, hadoop_conf=DIR, ...)`."""
    host, port = cluster.uri.removeprefix("hdfs://").split(":")
    return fsspec.filesystem("hdfsfuse", host=host, port=int(port), hadoop_conf=cluster.conf_dir,
                             skip_instance_cache=True, **options)


def _url(cluster: MiniDfs, path: str) -> str:
    return cluster.uri.replace("hdfs://", "hdfsfuse://") + path


def _frame(rows: int, columns: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({f"c{i}": rng.standard_normal(rows) for i in range(columns)})
    frame["label"] = [f"row-{i % 97}" for i in range(rows)]
    return frame


@pytest.fixture(scope="module")
def tables(cluster: MiniDfs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A parquet file, a CSV and a two-file parquet data set, local and in HDFS (the Java client's)."""
    local = tmp_path_factory.mktemp("fsspec")
    cluster.delete(ROOT)
    frame = _frame(20_000, 6, seed=50)
    frame.to_parquet(local / "t.parquet", row_group_size=5_000)
    frame.to_csv(local / "t.csv", index=False)
    (local / "set").mkdir()
    for part in range(2):
        _frame(3_000, 4, seed=60 + part).to_parquet(local / "set" / f"part-{part}.parquet")
    for rel in ("t.parquet", "t.csv", "set/part-0.parquet", "set/part-1.parquet"):
        cluster.put(local / rel, f"{ROOT}/{rel}")
    yield {"local": local}


def test_pandas_pyarrow_dask_and_polars_read_what_a_local_copy_holds(cluster: MiniDfs, tables) -> None:  # type: ignore[no-untyped-def]
    local = tables["local"]
    options = {"hadoop_conf": cluster.conf_dir}
    pd.testing.assert_frame_equal(pd.read_parquet(_url(cluster, f"{ROOT}/t.parquet"), storage_options=options),
                                  pd.read_parquet(local / "t.parquet"))
    pd.testing.assert_frame_equal(pd.read_csv(_url(cluster, f"{ROOT}/t.csv"), storage_options=options),
                                  pd.read_csv(local / "t.csv"))
    fs = _fs(cluster)
    got = ds.dataset(f"{ROOT}/set", filesystem=fs, format="parquet").to_table(columns=["c1", "label"])
    want = ds.dataset(str(local / "set"), format="parquet").to_table(columns=["c1", "label"])
    assert got.sort_by("c1").equals(want.sort_by("c1"))
    frame = dd.read_parquet(_url(cluster, f"{ROOT}/set"), storage_options=options).compute(scheduler="processes")
    want_frame = dd.read_parquet(str(local / "set")).compute(scheduler="sync")
    pd.testing.assert_frame_equal(frame.sort_values("c0").reset_index(drop=True),
                                  want_frame.sort_values("c0").reset_index(drop=True))
    with fs.open(f"{ROOT}/t.parquet") as f:
        assert pl.read_parquet(f).equals(pl.read_parquet(local / "t.parquet"))
    # polars takes fsspec through a file object, or lazily through a pyarrow dataset
    lazy = pl.scan_pyarrow_dataset(ds.dataset(f"{ROOT}/t.parquet", filesystem=fs, format="parquet"))
    assert lazy.select("c2", "label").collect().equals(pl.read_parquet(local / "t.parquet", columns=["c2", "label"]))


def test_pyarrow_native_filesystem_over_the_handler(cluster: MiniDfs, tables) -> None:  # type: ignore[no-untyped-def]
    arrow_fs = pafs.PyFileSystem(pafs.FSSpecHandler(_fs(cluster)))
    assert pq.read_table(f"{ROOT}/t.parquet", filesystem=arrow_fs).equals(pq.read_table(tables["local"] / "t.parquet"))
    (info,) = arrow_fs.get_file_info([f"{ROOT}/t.csv"])
    assert info.size == (tables["local"] / "t.csv").stat().st_size


def _column_bytes(meta: pq.FileMetaData, name: str) -> int:
    index = meta.schema.names.index(name)
    return sum(meta.row_group(rg).column(index).total_compressed_size for rg in range(meta.num_row_groups))


def _wide_file(cluster: MiniDfs, local: Path, path: str, **put: Any) -> pq.FileMetaData:
    frame = _frame(150_000, 24, seed=70)  # 1.2 MB a column, uncompressed: the column's chunks are exact
    pq.write_table(pa.Table.from_pandas(frame), local, compression="none", row_group_size=50_000)
    cluster.put(local, path, **put)
    return pq.read_metadata(local)


def _one_column_read_costs(cluster: MiniDfs, fs: HdfsFileSystem, path: str, meta: pq.FileMetaData) -> float:
    """BytesRead of a one-column dataset read, over the column's chunks plus the footer."""
    stats = fs.connection.core().client.stats
    before, ops = cluster.metrics_total(), stats.dtp_read_ops
    table = ds.dataset(path, filesystem=fs, format="parquet").to_table(columns=["c7"])
    after = cluster.metrics_after(before, stats.dtp_read_ops - ops)
    assert table.num_rows == meta.num_rows
    footer = meta.serialized_size + 8
    return (after["BytesRead"] - before["BytesRead"]) / (_column_bytes(meta, "c7") + footer)


def test_one_column_of_a_wide_file_costs_its_chunks_and_the_footer(cluster: MiniDfs, tmp_path: Path) -> None:
    meta = _wide_file(cluster, tmp_path / "wide.parquet", f"{ROOT}/wide.parquet")
    fs = _fs(cluster)
    ratio = _one_column_read_costs(cluster, fs, f"{ROOT}/wide.parquet", meta)
    assert ratio <= 1.1, ratio


def test_random_reads_are_exact_on_the_wire(cluster: MiniDfs) -> None:
    data = cluster.put_bytes(random_bytes(3 * 1024 * 1024 + 77, seed=71), f"{ROOT}/random")
    fs = _fs(cluster)
    stats = fs.connection.core().client.stats
    offsets = random.Random(7).sample(range(len(data) - 4096), 40)
    before, ops = cluster.metrics_total(), stats.dtp_read_ops
    with fs.open(f"{ROOT}/random") as f:
        for off in offsets:
            f.seek(off)
            buf = bytearray(4096)
            assert f.readinto(buf) == 4096 and bytes(buf) == data[off : off + 4096]
    ranges = fs.cat_ranges([f"{ROOT}/random"] * 3, [0, 100_000, 2_000_000], [10, 100_500, 2_001_000])
    assert ranges == [data[:10], data[100_000:100_500], data[2_000_000:2_001_000]]
    after = cluster.metrics_after(before, stats.dtp_read_ops - ops)
    chunk_alignment = 512 * 2 * (40 + 3)  # each read rounds out to whole checksum chunks at both ends
    assert after["BytesRead"] - before["BytesRead"] <= 40 * 4096 + 1510 + chunk_alignment
    with fs.open(f"{ROOT}/random") as f:  # sequential: the readahead window grows, the bytes stay right
        assert b"".join(iter(lambda: f.read(10_000), b"")) == data


def test_an_open_right_after_info_asks_once_and_a_file_replaced_meanwhile_is_opened_afresh(cluster: MiniDfs) -> None:
    path = f"{ROOT}/described"
    first = cluster.put_bytes(random_bytes(70_000, seed=81), path)
    fs = _fs(cluster)
    assert fs.cat_file(path, 0, 10) == first[:10]  # connected, server defaults known
    fs.connection.core().recent.seconds = 600.0  # a loaded machine must not outlast the second in between
    before = cluster.rpc_counts()
    fs.info(path)
    with fs.open(path) as f:  # pyarrow's pattern: info, then open
        assert f.read() == first
    asked = cluster.rpc_counts() - before
    assert asked == {"GetFileLinkInfo": 1, "GetBlockLocations": 1}, asked  # by inode path: no getFileInfo
    assert len(fs.connection.core().client.located) == 0  # nothing reuses locations across opens here

    fs.info(path)
    cluster.delete(path)
    second = cluster.put_bytes(random_bytes(50_000, seed=82), path)  # a new file (fileId) at the path
    with fs.open(path) as f:
        assert f.read() == second
    fs.info(path)
    cluster.delete(path)
    with pytest.raises(FileNotFoundError):
        fs.open(path)


def test_info_right_after_a_listing_answers_from_it_unless_the_listings_cache_is_off(cluster: MiniDfs) -> None:
    folder = "/t/fsspec-listed"  # outside ROOT, whose files test_metadata counts
    cluster.delete(folder)
    first = cluster.put_bytes(random_bytes(30_000, seed=95), f"{folder}/a")
    fs = _fs(cluster)
    fs.connection.core().recent.seconds = 600.0  # a loaded machine must not outlast the second in between
    listed = {e["name"]: e for e in fs.ls(folder)}
    before = cluster.rpc_counts()
    assert fs.info(f"{folder}/a") == listed[f"{folder}/a"] and fs.info(folder)["type"] == "directory"
    assert fs.size(f"{folder}/a") == len(first) and fs.isfile(f"{folder}/a")
    assert cluster.rpc_counts() - before == {"GetFileLinkInfo": 1}  # the folder itself; the file: from the listing

    # Within the window, info describes the file as listed (as fsspec's listing caches do);
    # what is read is the file there now.
    cluster.delete(f"{folder}/a")
    second = cluster.put_bytes(random_bytes(20_000, seed=96), f"{folder}/a")
    assert fs.info(f"{folder}/a")["size"] == len(first)
    assert fs.cat_file(f"{folder}/a") == second
    fs.invalidate_cache(f"{folder}/a")
    assert fs.info(f"{folder}/a")["size"] == len(second)

    fresh = _fs(cluster, use_listings_cache=False)
    fresh.ls(folder)
    before = cluster.rpc_counts()
    assert fresh.info(f"{folder}/a")["size"] == len(second)
    assert cluster.rpc_counts() - before == {"GetFileLinkInfo": 1}


def test_a_read_in_blocks_read_before_starts_at_once_and_keeps_its_bytes_only_if_the_answer_names_them(
        cluster: MiniDfs) -> None:
    path = "/t/fsspec-early"  # outside ROOT, whose files test_metadata counts
    cluster.delete(path)
    first = cluster.put_bytes(random_bytes(2_500_000, seed=91), path)  # blocks of 1 MiB: 0, 1 and 2
    fs = _fs(cluster)
    core = fs.connection.core()
    assert fs.cat_file(path, 100, 200) == first[100:200]  # block 0 is known now
    assert fs.cat_file(path, 2_400_000, 2_400_100) == first[2_400_000:2_400_100]  # and block 2
    before = cluster.rpc_counts()
    assert fs.cat_file(path, 5_000, 9_096) == first[5_000:9_096]
    assert core.early_reads == {"kept": 1}
    assert cluster.rpc_counts() - before == {"GetBlockLocations": 1}  # the answer is still asked, every time
    assert fs.cat_file(path, 1_048_000, 1_049_000) == first[1_048_000:1_049_000]  # block 1: not known before
    assert core.early_reads == {"kept": 1}

    # Replaced by a file of the same length: its blocks have other ids. The old blocks are
    # still on the DataNodes, so the early read gets the old file's bytes, and drops them.
    cluster.delete(path)
    second = cluster.put_bytes(random_bytes(2_500_000, seed=92), path)
    assert fs.cat_file(path, 5_000, 9_096) == second[5_000:9_096]
    assert core.early_reads == {"kept": 1, "dropped": 1}
    assert fs.cat_file(path, 2_400_000, 2_400_100) == second[2_400_000:2_400_100]
    assert fs.cat_file(path, 2_400_000, 2_400_100) == second[2_400_000:2_400_100]
    assert core.early_reads == {"kept": 2, "dropped": 1}

    # Appended to: a new length, and its last block a new generation stamp.
    second += cluster.append_bytes(random_bytes(1_000, seed=93), path)
    assert fs.cat_file(path, 2_400_000, 2_501_000) == second[2_400_000:2_501_000]
    assert core.early_reads == {"kept": 2, "dropped": 2}
    assert fs.cat_file(path, 0, 100) == second[:100]  # a new length: block 0 is asked again
    assert core.early_reads == {"kept": 2, "dropped": 2}
    # Truncated inside block 0.
    cluster.truncate(path, 10_000)
    assert fs.cat_file(path, 5_000, 20_000) == second[5_000:10_000]
    assert core.early_reads == {"kept": 2, "dropped": 3}
    # Deleted: the answer says so, whatever the DataNodes still hold.
    cluster.delete(path)
    with pytest.raises(FileNotFoundError):
        fs.cat_file(path, 5_000, 6_000)
    assert core.seen.guess(path, 5_000, 1_000) is None


def test_metadata(cluster: MiniDfs, tables) -> None:  # type: ignore[no-untyped-def]
    fs = _fs(cluster)
    local = tables["local"]
    info = fs.info(_url(cluster, f"{ROOT}/t.csv"))
    assert info["type"] == "file" and info["size"] == (local / "t.csv").stat().st_size
    assert info["replication"] == 3 and info["block_size"] == 1024 * 1024 and info["ec_policy"] is None
    assert fs.ls(f"{ROOT}/set", detail=False) == [f"{ROOT}/set/part-0.parquet", f"{ROOT}/set/part-1.parquet"]
    assert sorted(fs.find(ROOT)) == sorted(f"{ROOT}/{r}" for r in ("t.parquet", "t.csv", "set/part-0.parquet",
                                                                    "set/part-1.parquet", "wide.parquet", "random")
                                           if fs.exists(f"{ROOT}/{r}"))
    assert fs.glob(f"{ROOT}/set/*.parquet") == fs.ls(f"{ROOT}/set", detail=False)
    assert fs.du(f"{ROOT}/set") == sum(p.stat().st_size for p in (local / "set").iterdir())
    assert fs.isdir(f"{ROOT}/set") and fs.isfile(f"{ROOT}/t.csv") and not fs.exists(f"{ROOT}/nope")
    # COMPOSITE_CRC: the same for the same bytes, whatever the block size; no data read
    copy = cluster.put_bytes((local / "t.csv").read_bytes(), f"{ROOT}/t-copy.csv", block_size=2 * 1024 * 1024)
    assert len(copy) == info["size"]
    assert fs.file_checksum(f"{ROOT}/t.csv") == fs.file_checksum(f"{ROOT}/t-copy.csv")
    assert fs.ukey(f"{ROOT}/t.csv") != fs.ukey(f"{ROOT}/set/part-0.parquet")
    assert fs.modified(f"{ROOT}/t.csv").timestamp() == info["mtime"]


def test_errors_are_pythons(cluster: MiniDfs, tables) -> None:  # type: ignore[no-untyped-def]
    fs = _fs(cluster)
    with pytest.raises(FileNotFoundError, match=r"read /t/fsspec/nope: .*\(ENOENT\)"):
        fs.cat_file(f"{ROOT}/nope")
    with pytest.raises(FileNotFoundError):
        fs.info(f"{ROOT}/nope")
    with pytest.raises(IsADirectoryError):
        fs.cat_file(f"{ROOT}/set")
    r = fs.cat_ranges([f"{ROOT}/nope", f"{ROOT}/t.csv"], [0, 0], [1, 1])
    assert isinstance(r[0], FileNotFoundError) and r[1] == (tables["local"] / "t.csv").read_bytes()[:1]
    with pytest.raises(FileNotFoundError):
        fs.cat_ranges([f"{ROOT}/nope"], [0], [1], on_error="raise")


def test_it_is_read_only(cluster: MiniDfs, tables) -> None:  # type: ignore[no-untyped-def]
    fs = _fs(cluster)
    calls = [lambda: fs.open(f"{ROOT}/new", "wb"), lambda: fs.pipe_file(f"{ROOT}/new", b"x"),
             lambda: fs.rm(f"{ROOT}/t.csv"), lambda: fs.mkdir(f"{ROOT}/d"), lambda: fs.makedirs(f"{ROOT}/d"),
             lambda: fs.mv(f"{ROOT}/t.csv", f"{ROOT}/u.csv"), lambda: fs.cp_file(f"{ROOT}/t.csv", f"{ROOT}/u"),
             lambda: fs.touch(f"{ROOT}/t.csv"), lambda: fs.put_file(str(tables["local"] / "t.csv"), f"{ROOT}/u"),
             lambda: fs.rmdir(f"{ROOT}/set")]
    for call in calls:
        with pytest.raises(PermissionError, match="read-only filesystem") as e:
            call()
        assert e.value.errno == errno.EROFS
    assert fs.exists(f"{ROOT}/t.csv") and not fs.exists(f"{ROOT}/new") and not fs.exists(f"{ROOT}/u.csv")


@pytest.mark.parametrize(("options", "message"), [
    ({"allow_other": True}, "option allow_other applies to mounts only"),
    ({"readahead_max": "lots"}, "option readahead_max: 'lots' is not a size"),
    ({"keytab": "/k"}, "options keytab and principal go together"),
    ({"cache_sise": "1G"}, "unknown storage option 'cache_sise'"),
    ({"hedge_after": "soon"}, "option hedge_after: 'soon' must be off, auto or milliseconds"),
])
def test_bad_storage_options_are_one_clear_error(cluster: MiniDfs, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _fs(cluster, **options)


def _read_in_child(fs: HdfsFileSystem, path: str, expected: bytes, out: Any) -> None:
    out.put((path, fs.cat_file(path) == expected, os.getpid()))


def test_a_filesystem_made_before_fork_serves_its_children(cluster: MiniDfs) -> None:
    fs = _fs(cluster)
    files = {f"{ROOT}/fork-{i}": cluster.put_bytes(random_bytes(200_000 + i, seed=80 + i), f"{ROOT}/fork-{i}")
             for i in range(4)}
    assert fs.cat_file(f"{ROOT}/fork-0") == files[f"{ROOT}/fork-0"]  # the parent's loop and sockets are up
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    children = [ctx.Process(target=_read_in_child, args=(fs, p, data, out)) for p, data in files.items()]
    for child in children:
        child.start()
    results = [out.get(timeout=120) for _ in children]
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    assert sorted((p, ok) for p, ok, _ in results) == sorted((p, True) for p in files)
    assert os.getpid() not in {pid for _, _, pid in results}
    assert fs.cat_file(f"{ROOT}/fork-3") == files[f"{ROOT}/fork-3"]  # the parent's own loop still serves it
    clone = pickle.loads(pickle.dumps(fs))  # options travel, connections do not
    assert clone is not fs and clone.cat_file(f"{ROOT}/fork-1") == files[f"{ROOT}/fork-1"]


def test_the_async_face(cluster: MiniDfs, monkeypatch: pytest.MonkeyPatch) -> None:
    data = cluster.put_bytes(random_bytes(100_000, seed=90), f"{ROOT}/async")
    starts: list[threading.Thread] = []
    ready = Connection._ready

    def recorded(self: Connection) -> Any:
        starts.append(threading.current_thread())
        return ready(self)

    monkeypatch.setattr(Connection, "_ready", recorded)

    async def run() -> None:
        fs = AsyncHdfsFileSystem(uri=cluster.uri, hadoop_conf=cluster.conf_dir, asynchronous=True,
                                 skip_instance_cache=True)
        assert (await fs._info(f"{ROOT}/async"))["size"] == len(data)
        # The client started (a login and a connection) in a worker thread, not in asyncio's.
        assert starts and threading.main_thread() not in starts
        assert await fs._cat_file(f"{ROOT}/async", 10, 20) == data[10:20]
        both = await asyncio.gather(fs._cat_file(f"{ROOT}/async"), fs._cat_ranges([f"{ROOT}/async"], [5], [9]))
        assert both == [data, [data[5:9]]]
        assert await fs._exists(f"{ROOT}/async") and not await fs._exists(f"{ROOT}/nope")
        with pytest.raises(FileNotFoundError):
            await fs._cat_file(f"{ROOT}/nope")
        fs.connection.close()

    asyncio.run(run())


def test_erasure_coded_files(rs32, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster, files = rs32
    fs = _fs(cluster)
    for path, data in files.items():
        assert fs.cat_file(path) == data
        assert fs.cat_file(path, 1000, 70_000) == data[1000:70_000]  # from the block groups read before
    assert fs.connection.core().early_reads == {"kept": len(files)}
    assert fs.info("/ec/odd")["ec_policy"].startswith("RS-3-2")
    meta = _wide_file(cluster, tmp_path / "wide.parquet", "/ec/wide.parquet")
    assert _one_column_read_costs(cluster, fs, "/ec/wide.parquet", meta) <= 1.1
    assert pd.read_parquet(_url(cluster, "/ec/wide.parquet"), storage_options={"hadoop_conf": cluster.conf_dir},
                           columns=["c7"]).equals(pd.read_parquet(tmp_path / "wide.parquet", columns=["c7"]))


def test_viewfs(federated: MiniDfs, tmp_path: Path) -> None:
    ns0, ns1 = (ns["uri"] for ns in federated.nameservices)
    conf = view_conf(federated, tmp_path, {"fs.viewfs.mounttable.lake.link./a": f"{ns0}/fa",
                                           "fs.viewfs.mounttable.lake.link./b": f"{ns1}/fb"})
    a = federated.put_bytes(random_bytes(300_000, seed=91), f"{ns0}/fa/x")
    b = federated.put_bytes(random_bytes(200_000, seed=92), f"{ns1}/fb/y")
    fs = fsspec.filesystem("hdfsfuse", uri="viewfs://lake", hadoop_conf=conf, skip_instance_cache=True)
    assert fs.cat_file("/a/x") == a and fs.cat_file("viewfs://lake/b/y", 7, 99) == b[7:99]
    assert fs.cat_file("/a/x", 5, 50_000) == a[5:50_000] and fs.connection.core().early_reads == {"kept": 1}
    assert fs.ls("/", detail=False) == ["/a", "/b"]
    with fs.open("viewfs://lake/b/y") as f:
        assert f.read() == b
    meta = _wide_file(federated, tmp_path / "wide.parquet", f"{ns1}/fb/wide.parquet")
    assert _one_column_read_costs(federated, fs, "/b/wide.parquet", meta) <= 1.1
    with fs.open("/b/wide.parquet") as f:
        assert pd.read_parquet(f, columns=["c7"]).equals(pd.read_parquet(tmp_path / "wide.parquet", columns=["c7"]))


def test_kerberos_with_a_keytab(secure, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cluster = secure()
    data = cluster.put_bytes(random_bytes(500_000, seed=93), "/krb/f")
    k = cluster.kerberos
    monkeypatch.setenv("KRB5_CONFIG", k["krb5_conf"])
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path}/no-such-cache")  # the keytab is the only credential
    fs = _fs(cluster, keytab=k["client_keytab"], principal=k["client_principal"])
    assert fs.cat_file("/krb/f") == data
    assert fs.cat_file("/krb/f", 100, 9_000) == data[100:9_000]  # its block and token kept: read at once
    assert fs.connection.core().early_reads == {"kept": 1}
    assert fs.cat_ranges(["/krb/f"], [1000], [2000]) == [data[1000:2000]]
    meta = _wide_file(cluster, tmp_path / "wide.parquet", "/krb/wide.parquet")
    assert _one_column_read_costs(cluster, fs, "/krb/wide.parquet", meta) <= 1.1
    with fs.open("/krb/wide.parquet") as f:
        assert pd.read_parquet(f, columns=["c7"]).equals(pd.read_parquet(tmp_path / "wide.parquet", columns=["c7"]))
    cluster.put_bytes(b"secret", "/krb/private")
    cluster.chmod("/krb/private", "600")  # the harness's superuser owns it
    with pytest.raises(PermissionError, match=r"read /krb/private: .*Permission denied.*\(EACCES\)"):
        fs.cat_file("/krb/private")
