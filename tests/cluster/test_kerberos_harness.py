"""The secure harness: its JSON-lines contract on a real MiniKdc and Kerberized cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

MiB = 1 << 20


# ----- credentials ------------------------------------------------------------------------------


# ----- RPC protection, checked on the wire -------------------------------------------------------


# ----- HA -----------------------------------------------------------------------------------------


# ----- per-caller identity ----------------------------------------------------------------------


# ----- errors -------------------------------------------------------------------------------------


# ----- a long-lived mount ---------------------------------------------------------------------------


# ----- the harness contract, and a file being written ---------------------------------------------


def test_harness_contract_over_json_lines(tmp_path: Path) -> None:
    """`python -m tests.minidfs --kerberos ...` driven over raw JSON lines, as other checks drive it."""
    from hdfsfuse.security.tokens import parse_delegation_identifier, parse_token_storage

    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.minidfs", "--kerberos", "--datanodes", "1", "--rpc-protection", "integrity",
         "--proxy-user", "hfuse", "--ticket-lifetime", "600"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.stdin is not None and proc.stdout is not None

    def ask(**cmd: object) -> dict[str, object]:
        proc.stdin.write(json.dumps(cmd) + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    try:
        ready = json.loads(proc.stdout.readline())
        k = ready["kerberos"]
        assert k["realm"] == "EXAMPLE.COM" and k["client_principal"] == "alice@EXAMPLE.COM"
        assert Path(k["krb5_conf"]).is_file() and Path(k["client_keytab"]).is_file()
        assert ask(cmd="add_principal", name="bob") == {
            "ok": True, "principal": "bob@EXAMPLE.COM", "keytab": ask(cmd="add_principal", name="bob")["keytab"]}
        ask(cmd="mkdir", path="/c", mode="755")
        for fmt in ("writable", "protobuf"):
            token_file = tmp_path / f"bob.{fmt}"
            reply = ask(cmd="delegation_token", user="bob", file=str(token_file), format=fmt)
            assert reply["ok"] and reply["service"] == ready["namenodes"][0]["rpc"]
            (token,) = parse_token_storage(token_file.read_bytes())  # written by Java's Credentials
            assert token.kind == "HDFS_DELEGATION_TOKEN" and token.service == reply["service"]
            assert parse_delegation_identifier(token.identifier).owner == "bob@EXAMPLE.COM"
        assert ask(cmd="set_acl", path="/c", spec="user:bob:---") == {"ok": True}
        assert ask(cmd="remove_acl", path="/c") == {"ok": True}
        assert "error" in ask(cmd="delegation_token", user="nobody", file=str(tmp_path / "x"))
    finally:
        proc.stdin.close()
        proc.wait(timeout=120)


