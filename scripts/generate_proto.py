"""Regenerates the committed gRPC/protobuf Python code from proto/ (run after editing a .proto).

    python scripts/generate_proto.py [OUT_DIR]

Compiles every `proto/gpuprobe/v1/*.proto` with `--proto_path=proto`, so the generated modules
import each other as `from gpuprobe.v1 import ..._pb2`, into `agent/gpuprobe/v1/` (or under
OUT_DIR, which the test that holds the committed code to the .proto files uses). The output
depends on the grpcio-tools version, which the test extras pin.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO = ROOT / "proto"
PACKAGE = Path("gpuprobe") / "v1"
INIT = '"""Generated gRPC and protobuf code for gpuprobe.v1 (scripts/generate_proto.py)."""\n'


def generate(out: Path) -> list[Path]:
    """Compile the protos into `out` (a source root); returns the files written."""
    target = out / PACKAGE
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("*_pb2*.py*"):
        old.unlink()
    sources = sorted((PROTO / PACKAGE).glob("*.proto"))
    well_known = resources.files("grpc_tools") / "_proto"
    args = [
        "grpc_tools.protoc",
        f"--proto_path={PROTO}",
        f"--proto_path={well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *(str(s.relative_to(PROTO)) for s in sources),
    ]
    # protoc resolves the relative source names against --proto_path.
    code = protoc.main(args)
    if code != 0:
        raise SystemExit(f"protoc failed with exit status {code}")
    (target / "__init__.py").write_text(INIT, encoding="utf-8")
    return sorted(p for p in target.iterdir() if p.is_file())


def main() -> None:
    """Generate into agent/ or the directory given."""
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "agent"
    for path in generate(out):
        print(path)


if __name__ == "__main__":
    main()
