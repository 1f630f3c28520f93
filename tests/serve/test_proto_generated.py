"""The committed generated code is exactly what scripts/generate_proto.py makes from proto/,
and the proto passes `buf lint` with the committed buf.yaml (STANDARD and COMMENTS rules)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from conftest import ROOT, require_tool

GENERATED = ROOT / "agent" / "gpuprobe" / "v1"


def test_generated_code_matches_the_proto(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "generate_proto.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    fresh = tmp_path / "gpuprobe" / "v1"
    names = sorted(p.name for p in fresh.iterdir())
    assert names == sorted(p.name for p in GENERATED.iterdir() if p.is_file())
    for name in names:
        assert (fresh / name).read_bytes() == (GENERATED / name).read_bytes(), (
            f"agent/gpuprobe/v1/{name} is stale: run python scripts/generate_proto.py"
        )


def test_generated_modules_import_as_gpuprobe_v1() -> None:
    from gpuprobe.v1 import diagnostics_pb2, diagnostics_pb2_grpc

    service = diagnostics_pb2.DESCRIPTOR.services_by_name["NodeDiagnostics"]
    assert [m.name for m in service.methods] == [
        "GetReport",
        "RunChecks",
        "WatchReports",
        "ClearFindings",
        "MeasureBandwidth",
        "OpenBandwidthSink",
    ]
    assert diagnostics_pb2.DESCRIPTOR.package == "gpuprobe.v1"
    assert hasattr(diagnostics_pb2_grpc, "NodeDiagnosticsStub")


def test_buf_lint_passes() -> None:
    # Every service, rpc, message and field is documented, and the lint keeps it so.
    lint = yaml.safe_load((ROOT / "buf.yaml").read_text())["lint"]
    assert lint["use"] == ["STANDARD", "COMMENTS"]
    buf = require_tool("buf")
    out = subprocess.run([buf, "lint"], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_proto_is_compatible_with_main() -> None:
    # Compatible changes only (new fields, messages, enums, RPCs): `buf breaking` with the
    # committed buf.yaml's FILE rules against the main branch (a clone's origin/main).
    buf = require_tool("buf")
    refs = ("main", "origin/main")
    found = [
        ref
        for ref in refs
        if subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
            cwd=ROOT,
            capture_output=True,
            check=False,
        ).returncode
        == 0
    ]
    assert found, f"no {' or '.join(refs)} branch to compare the proto against"
    ref = "branch=main" if found[0] == "main" else "ref=origin/main"
    out = subprocess.run(
        [buf, "breaking", "proto", "--against", f".git#{ref},subdir=proto"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
