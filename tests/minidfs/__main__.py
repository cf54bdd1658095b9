"""Run a MiniDFSCluster standalone: `python -m tests.minidfs [options]`.

Prints the launcher's ready line on stdout, then passes JSON command lines from stdin to the
launcher and prints each reply. EOF on stdin (or Ctrl-C) shuts the cluster down.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from tests.minidfs import (
    DEFAULT_HADOOP_VERSION,
    HADOOP_VERSION_ENV,
    ClusterOptions,
    MiniDfs,
    MiniDfsError,
    default_hadoop_version,
)


def parse_args(argv: list[str] | None = None) -> ClusterOptions:
    p = argparse.ArgumentParser(prog="python -m tests.minidfs", description=__doc__)
    p.add_argument("--datanodes", type=int, default=3)
    p.add_argument("--block-size", type=int, default=1024 * 1024)
    p.add_argument("--replication", type=int, default=None)
    p.add_argument("--checksum-type", choices=["CRC32C", "CRC32", "NULL"], default="CRC32C")
    p.add_argument("--bytes-per-checksum", type=int, default=512)
    p.add_argument("--ha", action="store_true", help="two NameNodes in one nameservice")
    p.add_argument("--observer", action="store_true",
                   help="an HA pair plus one observer NameNode, with fast edit tailing (implies --ha)")
    p.add_argument("--block-tokens", action="store_true")
    p.add_argument("--block-token-lifetime", metavar="MINUTES", type=int, default=None,
                   help="block tokens and data-encryption keys expire after this (needs --block-tokens or --kerberos)")
    p.add_argument("--permissions", action="store_true")
    p.add_argument("--datanode-hostname", default="127.0.0.1")
    levels = "authentication|integrity|privacy"
    p.add_argument("--kerberos", action="store_true",
                   help="a MiniKdc and a secure cluster: Kerberos RPC, block tokens, HTTPS")
    p.add_argument("--rpc-protection", metavar=levels, default="authentication", type=_protection)
    p.add_argument("--data-transfer-protection", metavar=levels, default=None, type=_protection)
    p.add_argument("--encrypt-data-transfer", action="store_true")
    p.add_argument("--ticket-lifetime", metavar="SECONDS", type=int, default=None)
    p.add_argument("--proxy-user", metavar="NAME", default=None,
                   help="principal NAME may impersonate any user from 127.0.0.1")
    p.add_argument("--io-file-buffer-size", metavar="BYTES", type=int, default=None,
                   help="the DataNodes' io.file.buffer.size (their packet size under SASL)")
    p.add_argument("--crypto-buffer-size", metavar="BYTES", type=int, default=None,
                   help="the DataNodes' hadoop.security.crypto.buffer.size (their write size under AES/CTR)")
    p.add_argument("--short-circuit", action="store_true",
                   help="a domain socket per DataNode for short-circuit local reads (builds libhadoop-kit once)")
    p.add_argument("--federation", metavar="N", type=int, default=0,
                   help="N nameservices ns0..ns(N-1) (2 to 4), each an HA pair with --ha")
    p.add_argument("--router", action="store_true",
                   help="a Router-based federation front over two subclusters (the launcher's Hadoop 3.4.2 build)")
    p.add_argument("--kms", action="store_true",
                   help="a Hadoop KMS (own JVM, Hadoop 3.4.2) as the NameNode's key provider: encryption zones "
                        "any client can read; SPNEGO with --kerberos")
    p.add_argument("--kms-https", action="store_true",
                   help="with --kms: the KMS serves https; the ready line gives its CA as kms_ca_file")
    p.add_argument("--hadoop-version", metavar="X.Y.Z", default=None,
                   help="run this Hadoop release (the launcher is built against it once, with Maven, and kept); "
                        f"default ${HADOOP_VERSION_ENV}, else {DEFAULT_HADOOP_VERSION}")
    a = p.parse_args(argv)
    if a.hadoop_version and not re.fullmatch(r"\d+\.\d+\.\d+", a.hadoop_version):
        p.error(f"--hadoop-version {a.hadoop_version!r}: a release number such as 3.3.6")
    if a.hadoop_version and a.router and a.hadoop_version != "3.4.2":
        p.error("--router clusters run Hadoop 3.4.2 (the release that has hadoop-hdfs-rbf)")
    if a.federation and not 2 <= a.federation <= 4:
        p.error("--federation takes 2 to 4 nameservices")
    if (a.federation or a.router) and (a.observer or a.kerberos):
        p.error("--federation and --router do not combine with --observer or --kerberos")
    secure_only = [a.rpc_protection != "authentication", a.data_transfer_protection, a.encrypt_data_transfer,
                   a.ticket_lifetime, a.proxy_user]
    if any(secure_only) and not a.kerberos:
        p.error("security options need --kerberos")
    if a.block_token_lifetime is not None and (a.block_token_lifetime < 1 or not (a.block_tokens or a.kerberos)):
        p.error("--block-token-lifetime takes minutes (1 or more) and needs --block-tokens or --kerberos")
    return ClusterOptions(
        datanodes=a.datanodes, block_size=a.block_size, replication=a.replication,
        checksum_type=a.checksum_type, bytes_per_checksum=a.bytes_per_checksum,
        ha=a.ha or a.observer, observer=a.observer, block_tokens=a.block_tokens,
        block_token_lifetime=a.block_token_lifetime, permissions=a.permissions,
        datanode_hostname=a.datanode_hostname, kerberos=a.kerberos, rpc_protection=a.rpc_protection,
        data_transfer_protection=a.data_transfer_protection, encrypt_data_transfer=a.encrypt_data_transfer,
        ticket_lifetime=a.ticket_lifetime, proxy_user=a.proxy_user, io_file_buffer_size=a.io_file_buffer_size,
        crypto_buffer_size=a.crypto_buffer_size,
        short_circuit=a.short_circuit, federation=a.federation or (2 if a.router else 0), router=a.router,
        hadoop_version=a.hadoop_version or default_hadoop_version(), kms=a.kms or a.kms_https, kms_https=a.kms_https,
    )


def _protection(value: str) -> str:
    levels = [v.strip() for v in value.split(",")]
    if not levels or any(v not in ("authentication", "integrity", "privacy") for v in levels):
        raise argparse.ArgumentTypeError(f"{value!r}: a comma list of authentication, integrity, privacy")
    return ",".join(levels)


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
