"""The report survives the trip to the gpuprobe.v1 proto and back, field for field."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from conftest import snapshot
from gpuprobe import wire
from gpuprobe.checks.registry import CHECKS, summary_keys
from gpuprobe.config import Config
from gpuprobe.host import snapshot_host
from gpuprobe.pipeline import run_checks
from gpuprobe.report import Action, CheckResult, Finding, NodeReport, PodRef, Severity, Status
from gpuprobe.v1 import diagnostics_pb2 as pb
from helpers import config


@pytest.mark.parametrize(
    "name", ["synthetic-gpu-lost", "synthetic-driver-too-old", "kvm-epyc-nogpu"]
)
def test_snapshot_reports_round_trip(name: str) -> None:
    cfg = config(driver={"required_cuda": ["12.4"]})
    report = run_checks(snapshot_host(snapshot(name)), cfg, list(CHECKS))
    back = wire.report_from_proto(wire.report_to_proto(report))
    assert back.to_dict() == report.to_dict()


def test_fields_and_enums_are_spelled_as_the_proto_says() -> None:
    t = datetime(2026, 11, 29, 21, 0, 0, tzinfo=UTC)
    report = NodeReport(
        "gpu-node-17",
        t,
        [
            CheckResult(
                "gpus",
                "1 of 8 GPUs needs a reset",
                [
                    Finding(
                        "ROW_REMAP_PENDING",
                        Severity.CRITICAL,
                        "GPU 3 has 2 uncorrectable rows remapped",
                        Action.RESET_GPU,
                        "gpu:3:GPU-5f1c",
                    )
                ],
                {"gpus": [{"index": 3, "memory_total_bytes": 85520809984, "ratio": 0.5}]},
                duration_seconds=0.041,
            )
        ],
    )
    ran_at = datetime(2026, 11, 29, 20, 59, 58, tzinfo=UTC)
    message = wire.report_to_proto(report, {"gpus": ran_at}, agent_version="9.9")
    assert message.node == "gpu-node-17"
    assert message.time.seconds == int(t.timestamp())
    assert message.status == pb.STATUS_CRITICAL
    assert message.agent_version == "9.9"
    (check,) = message.checks
    assert (check.name, check.status, check.summary) == (
        "gpus",
        pb.STATUS_CRITICAL,
        "1 of 8 GPUs needs a reset",
    )
    assert check.duration_seconds == 0.041
    assert check.time.seconds == int(ran_at.timestamp())
    (finding,) = check.findings
    assert (finding.code, finding.severity, finding.action, finding.resource) == (
        "ROW_REMAP_PENDING",
        pb.SEVERITY_CRITICAL,
        pb.ACTION_RESET_GPU,
        "gpu:3:GPU-5f1c",
    )
    # Integral numbers come back as ints, fractions as floats.
    data = wire.struct_to_data(check.data)
    assert data == {"gpus": [{"index": 3, "memory_total_bytes": 85520809984, "ratio": 0.5}]}
    assert isinstance(data["gpus"][0]["index"], int)


def test_every_python_enum_value_has_a_proto_value() -> None:
    for status in Status:
        assert wire.status_from_proto(wire.status_to_proto(status)) is status
    for severity in Severity:
        f = Finding("X", severity, "m")
        assert wire.finding_from_proto(wire.finding_to_proto(f)).severity is severity
    for action in Action:
        f = Finding("X", Severity.WARNING, "m", action)
        assert wire.finding_from_proto(wire.finding_to_proto(f)).action is action


def test_unset_or_newer_enum_values_read_as_unknown_and_none() -> None:
    assert wire.status_from_proto(pb.STATUS_UNSPECIFIED) is Status.UNKNOWN
    assert wire.status_from_proto(99) is Status.UNKNOWN
    finding = wire.finding_from_proto(pb.Finding(code="X", severity=77, action=88))
    assert (finding.severity, finding.action) == (Severity.UNKNOWN, Action.NONE)


def test_data_with_tuples_and_non_text_keys_reads_as_the_json_report_writes_it() -> None:
    struct = wire.data_to_struct({"versions": ("12.4", "12.8"), "by_gpu": {0: True}})
    assert wire.struct_to_data(struct) == {
        "versions": ["12.4", "12.8"],
        "by_gpu": {"0": True},
    }


def test_default_config_report_has_a_time_for_each_check() -> None:
    report = run_checks(
        snapshot_host(snapshot("synthetic-h100-8gpu-healthy")), Config(), list(CHECKS)
    )
    times = {c.name: report.time for c in report.checks}
    message = wire.report_to_proto(report, times)
    assert [c.time.seconds for c in message.checks] == [int(report.time.timestamp())] * len(CHECKS)


def test_a_findings_pods_travel_as_pod_refs_and_come_back() -> None:
    pods = (PodRef("training", "llama-7b-0", "trainer"), PodRef("infer", "vllm-5d8f", ""))
    finding = Finding("XID", Severity.CRITICAL, "GPU 3: Xid 79", Action.RESET_GPU, "gpu:3:G", pods)
    message = wire.finding_to_proto(finding)
    assert [(p.namespace, p.pod, p.container) for p in message.pods] == [
        ("training", "llama-7b-0", "trainer"),
        ("infer", "vllm-5d8f", ""),
    ]
    again = wire.finding_from_proto(pb.Finding.FromString(message.SerializeToString()))
    assert again == finding
    # A finding from an agent before pods existed reads as one with none.
    old = pb.Finding(code="XID", message="m", resource="node")
    assert wire.finding_from_proto(old).pods == ()


def test_the_summary_facts_as_json_come_back_as_the_struct_does_and_are_preferred() -> None:
    report = NodeReport(
        "gpu-node-17",
        datetime(2026, 11, 29, 21, 0, 0, tzinfo=UTC),
        [CheckResult("driver", "ok", data={"driver_version": "550.54.15", "huge": 2**60})],
    )
    message = wire.summary_to_proto(report, keep=summary_keys())
    (check,) = message.checks
    assert check.data_json == '{"driver_version":"550.54.15"}'  # the summary's facts only
    assert wire.report_to_proto(report).checks[0].data_json == ""
    # where both are set the JSON is read (a test of which one: make them differ)
    check.data_json = '{"driver_version":"570.86.15","since":12}'
    back = wire.report_from_proto(message).check("driver")
    assert back is not None and back.data == {"driver_version": "570.86.15", "since": 12}
    # keys leave out the other top-level keys; a check no key asks for is not parsed
    picked = wire.report_from_proto(message, {"driver": {"since": None}})
    assert picked.checks[0].data == {"since": 12}
    check.data_json = "not parsed"
    assert wire.report_from_proto(message, {"gpus": None}).checks[0].data == {}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"gpus": [', "the gpus check's data_json is not JSON: Expecting value: line 1 column 11"),
        ("[8]", "the gpus check's data_json is not a JSON object: '[8]'"),
        ('{"a": 1} {', "the gpus check's data_json is not JSON: Extra data: line 1 column 10"),
        ('{"a": tru}', "the gpus check's data_json is not JSON: Expecting value: line 1 column 7"),
        (
            '{"a":' + "[" * 100_000 + "]" * 100_000 + "}",
            "the gpus check's data_json is nested deeper than Python's parser goes",
        ),
    ],
)
def test_data_json_that_is_not_an_object_is_an_unreadable_check(text: str, reason: str) -> None:
    message = pb.NodeReport(node="n", checks=[pb.CheckResult(name="gpus", data_json=text)])
    with pytest.raises(ValueError) as raised:
        wire.report_from_proto(message)
    assert str(raised.value).startswith(reason)


def test_data_json_may_have_space_around_and_inside_it() -> None:
    # another agent's JSON writer may indent; only gpuprobe's own is compact
    assert wire.json_to_data(' {\n  "gpus": [ {"index": 0} ],\n  "n": 2 }\n') == {
        "gpus": [{"index": 0}],
        "n": 2,
    }
