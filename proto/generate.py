"""Regenerate hdfsfuse/proto/*_pb2.py from these .proto files.

    .venv/bin/python proto/generate.py [OUT_DIR]

OUT_DIR defaults to hdfsfuse/proto. Needs grpcio-tools (the test extra). A test regenerates
into a temporary directory and checks the committed modules are current.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
FILES = ["rpc.proto", "hdfs.proto", "datatransfer.proto", "csi.proto"]


def generate(out_dir: Path) -> None:
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    well_known = Path(protoc.__file__).parent / "_proto"  # google/protobuf/*.proto
    args = ["protoc", f"-I{PROTO_DIR}", f"-I{well_known}", f"--python_out={out_dir}", *FILES]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    # protoc writes `import rpc_pb2`; make the imports package-relative.
    for f in out_dir.glob("*_pb2.py"):
        text = re.sub(r"^import (\w+_pb2) as", r"from . import \1 as", f.read_text(), flags=re.M)
        f.write_text(text)
    init = out_dir / "__init__.py"
    init.write_text('"""Generated protobuf modules; regenerate with `python proto/generate.py`."""\n')


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else PROTO_DIR.parent / "hdfsfuse" / "proto")
