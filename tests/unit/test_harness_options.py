"""The harness refuses bad options before any JVM starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("args", [["--block-token-lifetime", "1"], ["--block-tokens", "--block-token-lifetime", "0"]])
def test_block_token_lifetime_needs_tokens_and_minutes(args: list[str]) -> None:
    """Refused before any JVM starts (the real expiry is in test_data_transfer_security.py)."""
    proc = subprocess.run([sys.executable, "-m", "tests.minidfs", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--block-token-lifetime takes minutes (1 or more) and needs --block-tokens or --kerberos" in proc.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--hadoop-version", "3.3"], "--hadoop-version '3.3': a release number such as 3.3.6"),
    (["--hadoop-version", "3.3.6", "--router"], "--router clusters run Hadoop 3.4.2"),
])
def test_hadoop_version_is_a_release_number(args: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "tests.minidfs", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert message in proc.stderr
