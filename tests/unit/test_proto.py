"""The committed generated protobuf modules are current with proto/*.proto."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_generated_modules_are_current(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("proto_generate", REPO / "proto" / "generate.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.generate(tmp_path)
    committed = REPO / "hdfsfuse" / "proto"
    names = sorted(p.name for p in tmp_path.glob("*.py"))
    assert names == sorted(p.name for p in committed.glob("*.py"))
    for name in names:
        assert (tmp_path / name).read_text() == (committed / name).read_text(), (
            f"hdfsfuse/proto/{name} is stale: run `.venv/bin/python proto/generate.py`"
        )
