"""Run a MiniDFSCluster standalone: `python -m tests.minidfs [options]`.

Prints the launcher's ready line on stdout, then passes JSON command lines from stdin to the
launcher and prints each reply. EOF on stdin (or Ctrl-C) shuts the cluster down.
"""

from __future__ import annotations

import argparse
import json
import sys

from tests.minidfs import ClusterOptions, MiniDfs, MiniDfsError


def parse_args(argv: list[str] | None = None) -> ClusterOptions:
    p = argparse.ArgumentParser(prog="python -m tests.minidfs", description=__doc__)
    p.add_argument("--datanodes", type=int, default=3)
    p.add_argument("--block-size", type=int, default=1024 * 1024)
    p.add_argument("--replication", type=int, default=None)
    p.add_argument("--checksum-type", choices=["CRC32C", "CRC32", "NULL"], default="CRC32C")
    p.add_argument("--bytes-per-checksum", type=int, default=512)
    p.add_argument("--ha", action="store_true", help="two NameNodes in one nameservice")
    p.add_argument("--block-tokens", action="store_true")
    p.add_argument("--permissions", action="store_true")
    a = p.parse_args(argv)
    return ClusterOptions(
        datanodes=a.datanodes, block_size=a.block_size, replication=a.replication,
        checksum_type=a.checksum_type, bytes_per_checksum=a.bytes_per_checksum,
        ha=a.ha, block_tokens=a.block_tokens, permissions=a.permissions,
    )


def main(argv: list[str] | None = None) -> int:
    cluster = MiniDfs(parse_args(argv))
    try:
        cluster.start()
    except MiniDfsError as e:
        print(json.dumps({"error": str(e)}), flush=True)
        return 1
    try:
        print(json.dumps(cluster.ready), flush=True)
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                cmd = json.loads(line)
                name = cmd.pop("cmd")
                reply = cluster.command(name, **cmd)
            except (MiniDfsError, ValueError, KeyError, TypeError) as e:
                reply = {"error": str(e)}
            print(json.dumps(reply), flush=True)
            if name == "shutdown":
                break
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
