"""Secure-cluster figures (issue 12), every contender in the same run:

    .venv/bin/python -m tests.bench.secure [--only rpc|transfer] [--reads N] [--rounds R] [--calls N]
                                           [--mode MODE]... [--pin]

RPC (issue 12):

- `start`: seconds from launching the launcher to its ready line, for a plain cluster and for a
  secure one (MiniKdc + Kerberos + HTTPS) under each RPC protection.
- `rtt`: one getFileInfo round trip through the library, per protection, on a connection that is
  already authenticated (each round a fresh process: login, warm-up calls, then timed calls).
- `w1`: random 4 KiB preads through the mount (default page-cache mode, caches dropped before
  each round) on a plain cluster against Kerberos clusters with `authentication` and with
  `privacy` RPC protection (both with block tokens, which the plain cluster lacks); reads/s and
  the daemon's CPU per read. Rounds are interleaved; the first 200 reads of each
  round are a warm-up kept out of the figures.

Data transfer (issue 13), through the mount (default page-cache mode), on a plain cluster and
on Kerberos clusters with dfs.data.transfer.protection=integrity, =privacy (DIGEST-MD5 auth-conf,
3des) and =privacy with dfs.encrypt.data.transfer and AES/CTR:

- `w1`: random 4 KiB preads (page-aligned, caches dropped), reads/s, the daemon's CPU per read,
  BytesRead amplification (the DataNodes' own counter) and wire amplification (nftables: every
  byte the DataNodes' transfer ports sent, IP/TCP headers and SASL framing included);
- `w3`: one sequential read of a 64 MiB file (in one block of Hadoop's default 128 MiB size;
  caches dropped, after `W3_WARMUPS` untimed reads per mode), MB/s, with the CPU milliseconds
  per MB spent by the daemon and by the cluster's JVM and the machine's busy cores meanwhile
  (the DataNode shares this machine's two cores: under SASL it encrypts and sends
  `io.file.buffer.size` packets, without sendfile), the TCP segments the DataNode sent per MB
  (nftables), and Java's stream read of the same file on the same cluster (`java_w3`), as the
  reference for what the DataNodes serve. Besides the ratio of medians, each round's own ratio
  to plain (`w3_vs_plain_by_round`) shows the spread.

Transfer rounds interleave the modes, each round starting with the next one, and every timed
pass waits for a quiet machine (`_wait_quiet`). Prints one JSON document. Wall-clock figures on
a noisy 2-core machine: read the ratios.

`--mode NAME` (repeatable) runs only those transfer modes, and plain. `--pin` gives
the clusters a CPU of their own, as DataNodes on other hosts would have: every thread of every
cluster JVM on the last CPU, the mounts' daemons, this process and the readers it starts on the
others.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.bench.run import _process_cpu, daemon_pid, drop_caches
from tests.minidfs import ClusterOptions, MiniDfs, ensure_built
from tests.mounting import Mount

MiB = 1 << 20
WARMUP = 200
# Sequential reads per mode before the timed W3 rounds, kept out of the figures. The JVM compiles
# the DataNode's AES/CTR path (CryptoOutputStream, the JCE's CTR intrinsic) only after some
# megabytes: measured on a 64 MiB file, the first AES round ran at 149 MB/s, the next five at
# 253-295; plain's first two rounds ran at 189 and 230, the next four at 303-325. Its sendfile
# path takes longer still: after two 64 MiB reads the plain DataNode spent 1.79-1.94 ms of CPU
# per MB, after six to eight 1.04-1.34.
W3_WARMUPS = 6
PROTECTIONS = ("authentication", "integrity", "privacy")

_RTT_WORKER = """
import json, statistics, sys, time, trio
from hdfsfuse.client import ClientOptions, HdfsClient
from hdfsfuse.security.credentials import SecurityOptions
uri, conf, keytab, principal, calls = sys.argv[1:6]
async def main():
    sec = SecurityOptions(keytab=keytab, principal=principal) if keytab else SecurityOptions()
    async with HdfsClient.connect(uri, conf_dir=conf, options=ClientOptions(security=sec)) as c:
        for _ in range(50):
            await c.namenode.get_file_info("/w1")
        samples = []
        for _ in range(int(calls)):
            t = time.perf_counter()
            await c.namenode.get_file_info("/w1")
            samples.append(time.perf_counter() - t)
        print(json.dumps({"median_ms": statistics.median(samples) * 1000}))
trio.run(main)
"""


def _start(label: str, options: ClusterOptions) -> tuple[MiniDfs, float]:
    t = time.monotonic()
    cluster = MiniDfs(options).start()
    elapsed = time.monotonic() - t
    print(f"{label}: ready in {elapsed:.1f}s", file=sys.stderr)
    return cluster, elapsed


def _keytab(cluster: MiniDfs) -> tuple[str, str]:
    if "kerberos" not in cluster.ready:
        return "", ""
    return cluster.kerberos["client_keytab"], cluster.kerberos["client_principal"]


def _rtt(cluster: MiniDfs, calls: int) -> float:
    keytab, principal = _keytab(cluster)
    env = {**os.environ, **cluster.krb5_env(), "KRB5CCNAME": "FILE:/nonexistent"}
    out = subprocess.run([sys.executable, "-c", _RTT_WORKER, cluster.uri, cluster.conf_dir, keytab, principal,
                          str(calls)], capture_output=True, text=True, check=True, env=env).stdout
    return float(json.loads(out.strip().splitlines()[-1])["median_ms"])


def _w1_round(mount: Mount, reads: int, size: int, seed: int, aligned: bool = False) -> dict[str, float]:
    drop_caches()
    rng = random.Random(seed)
    offsets = [rng.randrange(0, size - 4096) for _ in range(reads)]
    if aligned:
        offsets = [off // 4096 * 4096 for off in offsets]
    pid = daemon_pid(mount)
    fd = os.open(mount.path("/w1"), os.O_RDONLY)
    try:
        for off in offsets[:WARMUP]:
            os.pread(fd, 4096, off)
        cpu = _process_cpu(pid)
        t = time.perf_counter()
        for off in offsets[WARMUP:]:
            if len(os.pread(fd, 4096, off)) != 4096:
                raise RuntimeError("short read")
        elapsed = time.perf_counter() - t
        cpu = _process_cpu(pid) - cpu
    finally:
        os.close(fd)
    n = reads - WARMUP
    return {"reads_per_s": n / elapsed, "daemon_cpu_us_per_read": cpu / n * 1e6}


# Hadoop's default dfs.blocksize, as in the other benchmarks (the harness's own default, 1 MiB,
# suits tests that want many blocks): the 64 MiB file is one block, read as one replica's file.
# With 1 MiB blocks every MiB is a READ_BLOCK of its own, which costs an encrypting DataNode more
# than a plain one: measured in one run (9 interleaved rounds), AES/CTR W3 0.72x plain with 1 MiB
# blocks (cluster JVM 4.92 against 3.28 ms/MB) and 0.83x with 128 MiB blocks (2.98 against 2.24).
BLOCK_SIZE = 128 * MiB

TRANSFER_MODES = {
    "plain": ClusterOptions(datanodes=1, block_size=BLOCK_SIZE),
    "integrity": ClusterOptions(datanodes=1, block_size=BLOCK_SIZE, kerberos=True,
                                data_transfer_protection="integrity"),
    "privacy (DIGEST 3des)": ClusterOptions(datanodes=1, block_size=BLOCK_SIZE, kerberos=True,
                                            data_transfer_protection="privacy"),
    "privacy + AES/CTR": ClusterOptions(datanodes=1, block_size=BLOCK_SIZE, kerberos=True,
                                        data_transfer_protection="privacy", encrypt_data_transfer=True),
    # The same DataNode with 128 KiB buffers: io.file.buffer.size, as production clusters commonly
    # set it (the packet size once SASL rules out sendfile; 4 KiB by default), and
    # hadoop.security.crypto.buffer.size, the pieces its CryptoOutputStream encrypts and writes to
    # the socket (8 KiB by default). The packet size alone changed nothing measurable (0.785 against
    # 0.762 of plain, and 0.694 against 0.733 in two runs): the stream still left in 8 KiB writes.
    "privacy + AES/CTR, 128 KiB buffers": ClusterOptions(
        datanodes=1, block_size=BLOCK_SIZE, kerberos=True, data_transfer_protection="privacy",
        encrypt_data_transfer=True, io_file_buffer_size=128 * 1024, crypto_buffer_size=128 * 1024),
}


def _java_w3(cluster: MiniDfs) -> float:
    """Java's sequential read of the same file (stream read, 1 MiB buffers), MB/s: what the
    DataNode can serve in this mode to the reference client."""
    drop_caches()
    args = ["java", "-Xmx1g", "-cp", ensure_built(), "hdfsfuse.minidfs.Bench", "--conf-dir", cluster.conf_dir,
            "--uri", cluster.uri, "--mode", "seq", "--path", "/w1"]
    if "kerberos" in cluster.ready:
        k = cluster.kerberos
        args += ["--keytab", k["client_keytab"], "--principal", k["client_principal"], "--krb5-conf", k["krb5_conf"]]
    out = subprocess.run(args, input="go\n", capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return result["bytes"] / result["seconds"] / 1e6


def _w3_round(mount: Mount, cluster: MiniDfs, size: int) -> dict[str, float]:
    """MB/s, the CPU milliseconds per MB the daemon and the cluster's JVM each spent, and the
    TCP segments per MB the DataNode sent."""
    drop_caches()
    daemon, jvm = daemon_pid(mount), cluster.pid
    cpu_daemon, cpu_jvm = _process_cpu(daemon), _process_cpu(jvm)
    machine = _machine_ticks()
    n = 0
    with cluster.wire() as wire:
        t = time.perf_counter()
        with open(mount.path("/w1"), "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                n += len(chunk)
        elapsed = time.perf_counter() - t
    busy = _busy_cores_since(machine)
    if n != size:
        raise RuntimeError("short sequential read")
    mb = size / 1e6
    return {"mb_per_s": mb / elapsed, "daemon_cpu_ms_per_mb": (_process_cpu(daemon) - cpu_daemon) * 1e3 / mb,
            "cluster_cpu_ms_per_mb": (_process_cpu(jvm) - cpu_jvm) * 1e3 / mb, "segments_per_mb": wire.packets / mb,
            "machine_busy_cores": busy}


def _wait_quiet(busy: float = 0.3, window: float = 0.3, limit: float = 10.0) -> None:
    """Wait until the machine's CPUs were busy less than `busy` cores over `window` seconds (at
    most `limit` seconds in all), so a timed pass does not share the cores with what ran before
    it (a DataNode still sending, a JVM collecting the garbage of the last pass)."""
    give_up = time.monotonic() + limit
    while time.monotonic() < give_up:
        before = _machine_ticks()
        time.sleep(window)
        if _busy_cores_since(before) < busy:
            return


def _busy_cores_since(before: tuple[int, int]) -> float:
    """How many of the machine's CPUs were busy, on average, since `_machine_ticks()` gave `before`."""
    total, idle = (after - b for after, b in zip(_machine_ticks(), before, strict=True))
    return (os.cpu_count() or 1) * (1 - idle / total) if total else 0.0


def _machine_ticks() -> tuple[int, int]:
    """All CPUs' ticks so far, and the idle ones among them (idle + iowait), from /proc/stat."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(ticks), ticks[3] + ticks[4]


def _pin(clusters: list[MiniDfs], mounts: list[Mount]) -> None:
    """Every cluster JVM thread on the last CPU; the daemons, this process and its children on the rest."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs two CPUs")
    client_cpus = ",".join(map(str, cpus[:-1]))
    for pid, where in [(c.pid, str(cpus[-1])) for c in clusters] + [(daemon_pid(m), client_cpus) for m in mounts]:
        subprocess.run(["taskset", "--all-tasks", "--pid", "--cpu-list", where, str(pid)], check=True,
                       stdout=subprocess.DEVNULL)
    os.sched_setaffinity(0, cpus[:-1])


def transfer(a: argparse.Namespace) -> dict[str, object]:
    clusters: dict[str, MiniDfs] = {}
    mounts: dict[str, Mount] = {}
    size = 64 * MiB
    modes = {name: options for name, options in TRANSFER_MODES.items()
             if a.chosen_modes is None or name == "plain" or name in a.chosen_modes}
    try:
        for name, options in modes.items():
            clusters[name], _ = _start(name, options)
        with tempfile.NamedTemporaryFile() as f:
            f.write(random.Random(1).randbytes(size))
            f.flush()
            for c in clusters.values():
                c.put(f.name, "/w1")
        with tempfile.TemporaryDirectory() as empty:
            for name, c in clusters.items():
                keytab, principal = _keytab(c)
                opts = [f"keytab={keytab}", f"principal={principal}"] if keytab else []
                mounts[name] = Mount(c, *opts, env={"KRB5CCNAME": f"FILE:{empty}/none"})
            if a.pin:
                _pin(list(clusters.values()), list(mounts.values()))
            w1: dict[str, list[dict[str, float]]] = {name: [] for name in mounts}
            w3: dict[str, list[dict[str, float]]] = {name: [] for name in mounts}
            java_w3: dict[str, list[dict[str, float]]] = {name: [] for name in mounts}
            for _ in range(W3_WARMUPS):  # untimed, every mode alike: the DataNodes' JIT (AES) warms up
                for name, m in mounts.items():
                    _w3_round(m, clusters[name], size)
            names = list(mounts)
            for r in range(a.rounds):
                # Each round starts with another mode, and every timed pass on a quiet machine: no
                # mode is always measured right after the same other one (the 3des DataNode's
                # seconds of cipher work, a Java client's exit and its cluster's garbage after it).
                order = names[r % len(names):] + names[:r % len(names)]
                for name in order:
                    m, c = mounts[name], clusters[name]
                    _wait_quiet()
                    before = c.metrics_total()
                    with c.wire() as wire:
                        result = _w1_round(m, a.reads, size, seed=r, aligned=True)
                    after = c.metrics_total()
                    app = a.reads * 4096
                    result["bytesread_amp"] = (after["BytesRead"] - before["BytesRead"]) / app
                    result["wire_amp"] = wire.bytes / app
                    w1[name].append(result)
                for name in order:
                    _wait_quiet()
                    w3[name].append(_w3_round(mounts[name], clusters[name], size))
                for name in order:
                    _wait_quiet()
                    java_w3[name].append(_java_w3(clusters[name]))
    finally:
        for m in mounts.values():
            m.unmount()
        for c in clusters.values():
            c.stop()
    w1_median = {name: {k: statistics.median(x[k] for x in rounds) for k in rounds[0]} for name, rounds in w1.items()}
    w3_median = {name: {k: statistics.median(x[k] for x in rounds) for k in rounds[0]} for name, rounds in w3.items()}
    java_median = {name: statistics.median(v) for name, v in java_w3.items()}
    plain_w1, plain_w3 = w1_median["plain"]["reads_per_s"], w3_median["plain"]["mb_per_s"]
    return {
        name: {
            "w1_reads_per_s": round(w1_median[name]["reads_per_s"], 1),
            "w1_vs_plain": round(w1_median[name]["reads_per_s"] / plain_w1, 3),
            "w1_daemon_cpu_us_per_read": round(w1_median[name]["daemon_cpu_us_per_read"], 1),
            "w1_bytesread_amp": round(w1_median[name]["bytesread_amp"], 4),
            "w1_wire_amp": round(w1_median[name]["wire_amp"], 4),
            "w3_mb_per_s": round(w3_median[name]["mb_per_s"], 1),
            "w3_vs_plain": round(w3_median[name]["mb_per_s"] / plain_w3, 3),
            # Each round's own ratio (the passes of one round ran one after the other): the spread.
            "w3_vs_plain_by_round": [round(mine["mb_per_s"] / plain["mb_per_s"], 3)
                                     for mine, plain in zip(w3[name], w3["plain"], strict=True)],
            "w3_daemon_cpu_ms_per_mb": round(w3_median[name]["daemon_cpu_ms_per_mb"], 2),
            "w3_cluster_cpu_ms_per_mb": round(w3_median[name]["cluster_cpu_ms_per_mb"], 2),
            "w3_machine_busy_cores": round(w3_median[name]["machine_busy_cores"], 2),
            "w3_segments_per_mb": round(w3_median[name]["segments_per_mb"], 1),
            "java_w3_mb_per_s": round(java_median[name], 1),
            "java_w3_vs_plain": round(java_median[name] / java_median["plain"], 3),
        }
        for name in modes
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["rpc", "transfer"])
    p.add_argument("--reads", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--mode", dest="chosen_modes", action="append", choices=list(TRANSFER_MODES),
                   help="a transfer mode to run (repeatable; plain always runs; default: all)")
    p.add_argument("--pin", action="store_true", help="the clusters on the last CPU, the mounts on the others")
    a = p.parse_args()
    report: dict[str, object] = {}
    if a.only != "transfer":
        report["rpc"] = rpc(a)
    if a.only != "rpc":
        report["transfer"] = transfer(a)
    print(json.dumps(report, indent=2))


def rpc(a: argparse.Namespace) -> dict[str, object]:
    clusters: dict[str, MiniDfs] = {}
    start: dict[str, float] = {}
    try:
        clusters["simple"], start["simple"] = _start("simple", ClusterOptions(datanodes=1))
        for prot in PROTECTIONS:
            clusters[prot], start[prot] = _start(prot, ClusterOptions(datanodes=1, kerberos=True, rpc_protection=prot))
        size = 64 * MiB
        with tempfile.NamedTemporaryFile() as f:
            f.write(random.Random(1).randbytes(size))
            f.flush()
            for c in clusters.values():
                c.put(f.name, "/w1")
        rtt: dict[str, list[float]] = {name: [] for name in clusters}
        for _ in range(a.rounds):
            for name, c in clusters.items():
                rtt[name].append(_rtt(c, a.calls))
        mounts = {}
        with tempfile.TemporaryDirectory() as empty:
            for name in ("simple", "authentication", "privacy"):
                keytab, principal = _keytab(clusters[name])
                opts = [f"keytab={keytab}", f"principal={principal}"] if keytab else []
                mounts[name] = Mount(clusters[name], *opts, env={"KRB5CCNAME": f"FILE:{empty}/none"})
            try:
                w1: dict[str, list[dict[str, float]]] = {name: [] for name in mounts}
                for r in range(a.rounds):
                    for name, m in mounts.items():
                        w1[name].append(_w1_round(m, a.reads, size, seed=r))
            finally:
                for m in mounts.values():
                    m.unmount()
        w1_median = {name: {k: statistics.median(x[k] for x in rounds) for k in rounds[0]}
                     for name, rounds in w1.items()}
        return {
            "start_seconds": {k: round(v, 1) for k, v in start.items()},
            "getfileinfo_rtt_ms": {k: round(statistics.median(v), 3) for k, v in rtt.items()},
            "w1_mount": {k: {m: round(x, 1) for m, x in v.items()} for k, v in w1_median.items()},
            "w1_vs_simple": {name: round(w1_median[name]["reads_per_s"] / w1_median["simple"]["reads_per_s"], 3)
                             for name in ("authentication", "privacy")},
        }
    finally:
        for c in clusters.values():
            c.stop()


if __name__ == "__main__":
    main()
