"""Regenerates the committed gRPC/protobuf Python code from proto/ (run after editing a .proto).

    python scripts/generate_proto.py [OUT_DIR]

Compiles every .proto of each package below with `--proto_path=proto`, so the generated
modules import each other by their path (`from gpuprobe.v1 import ..._pb2`), into `agent/`
(or under OUT_DIR, which the test that holds the committed code to the .proto files uses):

- `gpuprobe/v1`: gpuprobe's own API (package gpuprobe.v1);
- `gpuprobe/kubelet/podresources/v1`: the kubelet's PodResources API, which gpuprobe is a
  client of (package v1, as Kubernetes publishes it).

The output depends on the grpcio-tools version, which the test extras pin.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO = ROOT / "proto"
# Each generated package and the docstring of its __init__.py.
PACKAGES = {
    Path("gpuprobe") / "v1": "Generated gRPC and protobuf code for gpuprobe.v1",
    Path("gpuprobe") / "kubelet" / "podresources" / "v1": (
        "Generated client code for the kubelet's PodResources API v1"
    ),
}
# Packages between gpuprobe/ and a generated one, which only hold it.
HOLDERS = {
    Path("gpuprobe") / "kubelet": "The kubelet's APIs that gpuprobe is a client of",
    Path("gpuprobe") / "kubelet" / "podresources": "The kubelet's PodResources API",
}


def generate(out: Path) -> list[Path]:
    """Compile the protos into `out` (a source root); returns the files written."""
    written: list[Path] = []
    for package, doc in PACKAGES.items():
        written += _generate_package(out, package, doc)
    for package, doc in HOLDERS.items():
        init = out / package / "__init__.py"
        init.write_text(_init(doc), encoding="utf-8")
        written.append(init)
    return sorted(written)


def _generate_package(out: Path, package: Path, doc: str) -> list[Path]:
    target = out / package
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("*_pb2*.py*"):
        old.unlink()
    sources = sorted((PROTO / package).glob("*.proto"))
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
    (target / "__init__.py").write_text(_init(f"{doc} (scripts/generate_proto.py)"), "utf-8")
    return sorted(p for p in target.iterdir() if p.is_file())


def _init(doc: str) -> str:
    return f'"""{doc}."""\n'


def main() -> None:
    """Generate into agent/ or the directory given."""
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "agent"
    for path in generate(out):
        print(path)


if __name__ == "__main__":
    main()
