"""The report model: statuses, exit codes, and the contract's JSON."""

from __future__ import annotations

from datetime import UTC, datetime

import jsonschema
import pytest

from conftest import schema
from gpuprobe.report import (
    Action,
    CheckResult,
    Finding,
    NodeReport,
    PodRef,
    Severity,
    Status,
    exit_status,
    gpu_resource,
    worst,
)


def remap_pending() -> Finding:
    return Finding(
        "ROW_REMAP_PENDING",
        Severity.CRITICAL,
        "GPU 3 has 2 uncorrectable rows remapped; a GPU reset is pending",
        Action.RESET_GPU,
        "gpu:3:GPU-5f1c",
    )


def test_json_is_exactly_the_contract_shape() -> None:
    check = CheckResult("gpus", "1 of 8 GPUs needs a reset", [remap_pending()], {"n": 8}, 0.041)
    report = NodeReport("gpu-node-17", datetime(2026, 11, 29, 21, 0, tzinfo=UTC), [check])
    assert report.to_dict() == {
        "node": "gpu-node-17",
        "time": "2026-11-29T21:00:00Z",
        "status": "CRITICAL",
        "checks": [
            {
                "name": "gpus",
                "status": "CRITICAL",
                "summary": "1 of 8 GPUs needs a reset",
                "duration_seconds": 0.041,
                "findings": [
                    {
                        "code": "ROW_REMAP_PENDING",
                        "severity": "CRITICAL",
                        "message": (
                            "GPU 3 has 2 uncorrectable rows remapped; a GPU reset is pending"
                        ),
                        "action": "RESET_GPU",
                        "resource": "gpu:3:GPU-5f1c",
                    }
                ],
                "data": {"n": 8},
            }
        ],
    }
    jsonschema.validate(report.to_dict(), schema("report.schema.json"))


def test_round_trip_through_json_keeps_everything() -> None:
    check = CheckResult("gpus", "s", [remap_pending()], {"a": [1, 2]}, 0.5, floor=Status.UNKNOWN)
    report = NodeReport("n", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), [check])
    again = NodeReport.from_dict(report.to_dict())
    assert again.to_dict() == report.to_dict()


def test_a_finding_names_its_pods_only_when_it_has_some() -> None:
    pods = (PodRef("training", "llama-7b-0", "trainer"), PodRef("infer", "vllm-5d8f"))
    finding = Finding("XID", Severity.CRITICAL, "m", Action.RESET_GPU, "gpu:3:GPU-5f1c", pods)
    assert finding.to_dict()["pods"] == [
        {"namespace": "training", "pod": "llama-7b-0", "container": "trainer"},
        {"namespace": "infer", "pod": "vllm-5d8f", "container": ""},
    ]
    assert "pods" not in remap_pending().to_dict()
    assert Finding.from_dict(finding.to_dict()) == finding
    check = CheckResult("xid", "s", [finding, remap_pending()])
    report = NodeReport("n", datetime(2026, 1, 2, tzinfo=UTC), [check])
    jsonschema.validate(report.to_dict(), schema("report.schema.json"))
    assert str(pods[0]) == "training/llama-7b-0 (container trainer)"
    assert str(pods[1]) == "infer/vllm-5d8f"


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([], Status.OK),
        ([Status.OK, Status.UNKNOWN], Status.UNKNOWN),
        ([Status.UNKNOWN, Status.WARNING], Status.WARNING),
        ([Status.WARNING, Status.CRITICAL, Status.UNKNOWN], Status.CRITICAL),
    ],
)
def test_worst_orders_critical_warning_unknown_ok(statuses: list[Status], expected: Status) -> None:
    assert worst(statuses) is expected


@pytest.mark.parametrize(
    ("status", "code"),
    [(Status.CRITICAL, 2), (Status.WARNING, 1), (Status.UNKNOWN, 3), (Status.OK, 0)],
)
def test_exit_status_follows_the_contract(status: Status, code: int) -> None:
    assert exit_status(status) == code


def test_status_follows_findings_and_floor() -> None:
    result = CheckResult("x", "s")
    assert result.status is Status.OK
    result.floor = Status.UNKNOWN
    assert result.status is Status.UNKNOWN
    result.findings.append(Finding("A", Severity.WARNING, "m"))
    assert result.status is Status.WARNING


def test_metric_values_are_the_contracts() -> None:
    assert [s.metric_value for s in Status] == [0, 1, 2, 3]


def test_gpu_resource_keeps_an_unknown_uuid_empty() -> None:
    assert gpu_resource(3, "GPU-1") == "gpu:3:GPU-1"
    assert gpu_resource(5, None) == "gpu:5:"
