"""The cluster report from fetched reports: node entries, unreachable targets, skew, totals,
status and exit status (with --fail-on)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from gpuprobe.audit.cluster import build, exit_code
from gpuprobe.audit.facts import Counts
from gpuprobe.client import Fetched
from gpuprobe.report import NodeReport, Status
from gpuprobe.targets import DnsFailure, TargetSpec
from gpuprobe.unreachable import Failure, Unreachable
from helpers import node_report

T = datetime(2026, 11, 29, 21, 0, 0, tzinfo=UTC)


def node(snapshot_name: str, name: str) -> NodeReport:
    return node_report(snapshot_name, name, time=T)


def test_nodes_unreachable_targets_skew_and_totals() -> None:
    fetched = [
        Fetched("10.0.0.1:50051", node("synthetic-h100-8gpu-healthy", "gpu-1"), "0.1.0"),
        Fetched("10.0.0.2:50051", node("synthetic-driver-too-old", "gpu-2"), "0.1.0"),
        Fetched("10.0.0.3:50051", node("synthetic-gpu-lost", "gpu-3"), "0.1.0"),
        Fetched(
            "10.0.0.4:50051",
            None,
            unreachable=Unreachable(Failure.TIMEOUT, "no answer within 5 s"),
        ),
        Fetched("10.0.0.5:50051", node("synthetic-h100-8gpu-healthy", "gpu-5"), ""),
    ]
    missing = DnsFailure(TargetSpec("gone.test", 50051, True), "gone.test has no address")
    cluster = build(fetched, [missing])
    assert cluster.status == Status.CRITICAL
    out = cluster.to_dict()
    assert [(n["target"], n["node"], n["reachable"], n["status"]) for n in out["nodes"]] == [
        ("10.0.0.1:50051", "gpu-1", True, "OK"),
        ("10.0.0.2:50051", "gpu-2", True, "OK"),
        ("10.0.0.3:50051", "gpu-3", True, "CRITICAL"),
        ("10.0.0.4:50051", None, False, "UNKNOWN"),
        ("10.0.0.5:50051", "gpu-5", True, "OK"),
        ("dns:gone.test:50051", None, False, "UNKNOWN"),
    ]
    assert out["nodes"][3] == {
        "target": "10.0.0.4:50051",
        "node": None,
        "reachable": False,
        "status": "UNKNOWN",
        "failure": "timeout",
        "reason": "no answer within 5 s",
        "findings": [],
        "facts": None,
        "counts": None,
        "agent_version": None,
        "time": None,
    }
    assert out["nodes"][5]["failure"] == "dns"
    assert out["nodes"][5]["reason"] == "gone.test has no address"
    lost = out["nodes"][2]
    assert lost["findings"] == [
        {
            "check": "gpus",
            "code": "GPU_LOST",
            "severity": "CRITICAL",
            "message": "GPU 5 is lost: NVML reports GpuIsLost (fallen off the bus or hung). "
            "Reboot the node; inspect the GPU if it happens again",
            "action": "REBOOT_NODE",
            "resource": "gpu:5:GPU-5f1c0005-8e2b-4c1d-9a7e-000000000005",
        }
    ]
    assert lost["counts"] == {
        "gpus": 8,
        "healthy_gpus": 7,
        "idle_gpus": 0,
        "mig_slices": 0,
        "time_slicing_units": 0,
    }
    assert (lost["agent_version"], lost["time"]) == ("0.1.0", "2026-11-29T21:00:00Z")
    assert out["nodes"][4]["agent_version"] is None
    assert out["skew"] == [
        {
            "field": "driver_version",
            "majority": "550.54.15",
            "nodes": 4,
            "outliers": {"535.104.05": ["gpu-2"]},
        },
        {
            "field": "cuda_driver_version",
            "majority": "12.4",
            "nodes": 4,
            "outliers": {"12.2": ["gpu-2"]},
        },
        {"field": "gpu_model", "majority": "NVIDIA H100 80GB HBM3", "nodes": 4, "outliers": {}},
        {"field": "gpu_count", "majority": "8", "nodes": 4, "outliers": {"7": ["gpu-3"]}},
        {"field": "mig_layout", "majority": "disabled", "nodes": 4, "outliers": {}},
        {"field": "toolkit_mode", "majority": "not installed", "nodes": 4, "outliers": {}},
    ]
    assert out["totals"] == {
        "nodes": 6,
        "reachable_nodes": 4,
        "unreachable_nodes": 2,
        "healthy_nodes": 3,
        "gpus": 32,
        "healthy_gpus": 31,
        "idle_gpus": 0,
        "mig_slices": 0,
        "time_slicing_units": 0,
    }
    assert cluster.exit_status() == 2


def test_no_target_at_all() -> None:
    cluster = build([])
    assert cluster.to_dict() == {
        "status": "OK",
        "nodes": [],
        "skew": [],
        "totals": {
            "nodes": 0,
            "reachable_nodes": 0,
            "unreachable_nodes": 0,
            "healthy_nodes": 0,
            **Counts().to_dict(),
        },
    }


def test_fail_on_fails_for_unreachable_targets() -> None:
    """A gate passes only on agents it heard from: under --fail-on an unreachable target (or
    a dns: name with no address) exits 3 when nothing reaches the level; a reachable node's
    own UNKNOWN stays below it."""
    healthy = Fetched("10.0.0.1:50051", node("synthetic-h100-8gpu-healthy", "gpu-1"), "0.1.0")
    lost = Fetched("10.0.0.3:50051", node("synthetic-gpu-lost", "gpu-3"), "0.1.0")
    down = Fetched("10.0.0.4:50051", None, unreachable=Unreachable(Failure.TIMEOUT, "no answer"))
    missing = DnsFailure(TargetSpec("gone.test", 50051, True), "gone.test has no address")
    for fail_on in (Status.WARNING, Status.CRITICAL):
        assert build([down]).exit_status(fail_on) == 3
        assert build([healthy, down]).exit_status(fail_on) == 3
        assert build([healthy], [missing]).exit_status(fail_on) == 3
        assert build([lost, down]).exit_status(fail_on) == 2  # CRITICAL reaches either level
        assert build([healthy]).exit_status(fail_on) == 0
    unknown = node("synthetic-h100-8gpu-healthy", "gpu-2")
    unknown.checks[0].floor = Status.UNKNOWN  # the check could not judge
    assert unknown.status == Status.UNKNOWN
    assert build([Fetched("10.0.0.2:50051", unknown, "0.1.0")]).exit_status(Status.WARNING) == 0


def test_only_unreachable_targets_is_unknown() -> None:
    cluster = build(
        [Fetched("10.0.0.4:50051", None, unreachable=Unreachable(Failure.REFUSED, "refused"))]
    )
    assert cluster.status == Status.UNKNOWN
    assert cluster.exit_status() == 3
    assert cluster.to_dict()["skew"] == []


@pytest.mark.parametrize(
    ("status", "fail_on", "code"),
    [
        (Status.CRITICAL, None, 2),
        (Status.WARNING, None, 1),
        (Status.UNKNOWN, None, 3),
        (Status.OK, None, 0),
        (Status.CRITICAL, Status.WARNING, 2),
        (Status.WARNING, Status.WARNING, 1),
        (Status.UNKNOWN, Status.WARNING, 0),
        (Status.OK, Status.WARNING, 0),
        (Status.CRITICAL, Status.CRITICAL, 2),
        (Status.WARNING, Status.CRITICAL, 0),
        (Status.UNKNOWN, Status.CRITICAL, 0),
        (Status.OK, Status.CRITICAL, 0),
    ],
)
def test_exit_status_and_fail_on(status: Status, fail_on: Status | None, code: int) -> None:
    assert exit_code(status, fail_on) == code


def test_the_streamed_json_is_the_report_with_a_node_on_each_line() -> None:
    fetched = [
        Fetched("10.0.0.1:50051", node("synthetic-h100-8gpu-healthy", "gpu-1"), "0.1.0"),
        Fetched("10.0.0.2:50051", node("synthetic-driver-too-old", "gpu-2"), "0.1.0"),
        Fetched("10.0.0.3:50051", None, unreachable=Unreachable(Failure.REFUSED, "refused")),
    ]
    cluster = build(fetched)
    text = "".join(cluster.json_chunks())
    assert json.loads(text) == cluster.to_dict()
    lines = text.splitlines()
    assert [json.loads(line.strip().rstrip(","))["target"] for line in lines[2:5]] == [
        "10.0.0.1:50051",
        "10.0.0.2:50051",
        "10.0.0.3:50051",
    ]
    empty = "".join(build([]).json_chunks())
    assert json.loads(empty) == build([]).to_dict()


def test_driver_versions_are_compared_within_a_vendor() -> None:
    """Issue 40: in a cluster of NVIDIA and AMD nodes the skew table held an NVIDIA driver's
    version against an AMD node's amdgpu version (an in-tree driver's is the kernel release):
    `driver_version` is compared per vendor there, as `driver_version:nvidia` and
    `driver_version:amd`. The snapshots' real reports, replayed."""
    from conftest import snapshot
    from gpuprobe.config import Config
    from gpuprobe.host import snapshot_host
    from gpuprobe.pipeline import run_checks

    def fetched(name: str, node: str) -> Fetched:
        report = run_checks(snapshot_host(snapshot(name), node), Config(), ["driver", "gpus"])
        return Fetched(target=f"{node}:50051", report=report)

    nvidia = [fetched("synthetic-h100-8gpu-healthy", f"h100-{i}") for i in range(2)]
    amd = [fetched("synthetic-amd-mi300x-8gpu-healthy", f"mi300x-{i}") for i in range(3)]
    cluster = build([*nvidia, *amd])
    fields = {s.field: s for s in cluster.skew}
    assert "driver_version" not in fields
    assert fields["driver_version:nvidia"].nodes == 2
    assert fields["driver_version:amd"].nodes == 3
    assert not fields["driver_version:nvidia"].outliers
    assert not fields["driver_version:amd"].outliers
    # One vendor alone: the field keeps its name.
    assert "driver_version" in {s.field for s in build(nvidia).skew}
