"""The README's first command works end to end (its --check form)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_demo_check(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "tests.demo", "--check", "--mountpoint", str(tmp_path / "mnt")],
                       capture_output=True, text=True, cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "MISMATCH" not in r.stdout
    assert r.stdout.count("ok  /demo/") == 7 and "5000 rows" in r.stdout
    assert "unmounted" in r.stdout
