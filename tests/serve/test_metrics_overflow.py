"""A value the metrics cannot express (an integer beyond a double, 10^400) costs its own sample
and a log line, never the report's other series, nor GetReport's message (it raised
OverflowError every round, and the agent never turned ready)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuprobe import wire
from gpuprobe.daemon.store import AgentState
from gpuprobe.report import CheckResult, NodeReport
from gpuprobe.serve.metrics import ReportCollector

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HUGE = 10**400


def huge_report() -> NodeReport:
    gpus = [
        {"index": 0, "uuid": "GPU-a", "temperature_celsius": 41, "power_watts": HUGE},
        {"index": 1, "uuid": "GPU-b", "temperature_celsius": 43, "power_watts": 312.5},
    ]
    return NodeReport(
        "gpu-node-17",
        T,
        [
            CheckResult("driver", "580.95.05", data={"driver_version": "580.95.05"}),
            CheckResult(
                "gpus",
                "2 GPUs",
                data={"gpus_seen_by_nvml": 2, "gpus": gpus},
            ),
            CheckResult("xid", "1 XID", data={"xids": [{"gpu": 0, "xid": 79, "count": HUGE}]}),
        ],
    )


def test_an_inexpressible_value_is_dropped_from_its_series_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    collector = ReportCollector("gpu-node-17")
    registry.register(collector)
    with caplog.at_level(logging.WARNING, logger="gpuprobe.serve"):
        collector.update(AgentState(huge_report(), {"gpus": T}, version=1, change=1))
    text = generate_latest(registry).decode()
    found = {
        (s.name, s.labels.get("gpu")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert found[("gpuprobe_gpu_power_watts", "1")] == 312.5
    assert ("gpuprobe_gpu_power_watts", "0") not in found  # the one sample dropped
    assert found[("gpuprobe_gpu_temperature_celsius", "0")] == 41.0
    assert found[("gpuprobe_gpu_temperature_celsius", "1")] == 43.0
    assert found[("gpuprobe_driver_info", None)] == 1.0
    assert found[("gpuprobe_node_status", None)] == 0.0
    assert ("gpuprobe_gpu_xid_errors_total", "0") not in found
    dropped = [r for r in caplog.records if r.getMessage() == "metric value dropped"]
    assert len(dropped) == 2  # the power and the XID count
    assert {getattr(r, "reason", None) for r in dropped} == {"beyond a float"}
    assert all(str(getattr(r, "value", "")).startswith("1000000000") for r in dropped)


def test_a_renderer_that_fails_costs_only_its_families(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuprobe.serve import metrics

    def broken(snapshot: AgentState, report: NodeReport) -> list[object]:
        raise OverflowError("int too large to convert to float")

    monkeypatch.setattr(metrics, "RENDERERS", (broken, *metrics.RENDERERS))
    with caplog.at_level(logging.ERROR, logger="gpuprobe.serve"):
        families = metrics.render(AgentState(huge_report(), {}, version=1, change=1), "n")
    names = {f.name for f in families}
    assert {"gpuprobe_node_status", "gpuprobe_gpu_temperature_celsius"} <= names
    (record,) = [r for r in caplog.records if r.getMessage() == "metrics dropped"]
    assert getattr(record, "renderer", None) == "broken"


def test_getreport_carries_an_inexpressible_integer_as_its_text() -> None:
    message = wire.report_to_proto(huge_report(), {})
    gpus = message.checks[1].data["gpus"]
    assert gpus[0]["power_watts"] == str(HUGE)
    assert gpus[1]["power_watts"] == 312.5
    assert gpus[0]["temperature_celsius"] == 41.0
