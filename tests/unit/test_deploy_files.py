"""The systemd unit verifies (systemd-analyze)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MiB = 1 << 20


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    unit = tmp_path / "hdfsfuse@demo.service"
    shutil.copy(REPO / "systemd" / "hdfsfuse@.service", unit)
    r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = unit.read_text()
    for directive in ("Type=notify", "After=network-online.target", "Wants=network-online.target",
                      "Restart=on-failure", "ExecStartPre=-/usr/bin/fusermount3 -uz",
                      "ExecStopPost=-/usr/bin/fusermount3 -uz", "EnvironmentFile=/etc/hdfsfuse/%i.conf"):
        assert directive in text


