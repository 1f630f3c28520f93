"""The committed generated code is exactly what scripts/generate_proto.py makes from proto/,
and the proto passes `buf lint` with the committed buf.yaml (STANDARD and COMMENTS rules)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from conftest import ROOT, require_tool

AGENT = ROOT / "agent"
# The generated packages, and the packages that only hold the kubelet's.
GENERATED = ["gpuprobe/v1", "gpuprobe/kubelet/podresources/v1"]
HOLDERS = ["gpuprobe/kubelet", "gpuprobe/kubelet/podresources"]


def test_generated_code_matches_the_proto(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "generate_proto.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    for package in GENERATED:
        fresh, committed = tmp_path / package, AGENT / package
        names = sorted(p.name for p in fresh.iterdir())
        assert names == sorted(p.name for p in committed.iterdir() if p.is_file())
        for name in names:
            assert (fresh / name).read_bytes() == (committed / name).read_bytes(), (
                f"agent/{package}/{name} is stale: run python scripts/generate_proto.py"
            )
    for package in HOLDERS:
        init = f"{package}/__init__.py"
        assert (tmp_path / init).read_bytes() == (AGENT / init).read_bytes(), init


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


def test_kubelet_podresources_api_is_the_published_one() -> None:
    # A real kubelet answers /v1.PodResourcesLister/List: the package, service, methods and
    # every field number must be Kubernetes' own (k8s.io/kubelet/pkg/apis/podresources/v1).
    from gpuprobe.kubelet.podresources.v1 import api_pb2

    assert api_pb2.DESCRIPTOR.package == "v1"
    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert [(m.name, m.input_type.name, m.output_type.name) for m in service.methods] == [
        ("List", "ListPodResourcesRequest", "ListPodResourcesResponse"),
        ("GetAllocatableResources", "AllocatableResourcesRequest", "AllocatableResourcesResponse"),
        ("Get", "GetPodResourcesRequest", "GetPodResourcesResponse"),
    ]
    fields = {
        name: [(f.name, f.number) for f in api_pb2.DESCRIPTOR.message_types_by_name[name].fields]
        for name in api_pb2.DESCRIPTOR.message_types_by_name
    }
    assert fields == {
        "AllocatableResourcesRequest": [],
        "AllocatableResourcesResponse": [("devices", 1), ("cpu_ids", 2), ("memory", 3)],
        "ListPodResourcesRequest": [],
        "ListPodResourcesResponse": [("pod_resources", 1)],
        "PodResources": [("name", 1), ("namespace", 2), ("containers", 3)],
        "ContainerResources": [
            ("name", 1),
            ("devices", 2),
            ("cpu_ids", 3),
            ("memory", 4),
            ("dynamic_resources", 5),
        ],
        "ContainerMemory": [("memory_type", 1), ("size", 2), ("topology", 3)],
        "ContainerDevices": [("resource_name", 1), ("device_ids", 2), ("topology", 3)],
        "TopologyInfo": [("nodes", 1)],
        "NUMANode": [("ID", 1)],
        "DynamicResource": [("claim_name", 2), ("claim_namespace", 3), ("claim_resources", 4)],
        "ClaimResource": [
            ("cdi_devices", 1),
            ("driver_name", 2),
            ("pool_name", 3),
            ("device_name", 4),
            ("share_id", 5),
        ],
        "CDIDevice": [("name", 1)],
        "GetPodResourcesRequest": [("pod_name", 1), ("pod_namespace", 2)],
        "GetPodResourcesResponse": [("pod_resources", 1)],
    }


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
