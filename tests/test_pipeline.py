"""The report pipeline: each post-pass runs once per report, and every sink gets that report,
in one-shot `check` and in the daemon alike."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from conftest import snapshot
from gpuprobe import pipeline
from gpuprobe.checks.attribution import attribute_report
from gpuprobe.checks.runner import Ran
from gpuprobe.cli import build_parser
from gpuprobe.cli import check as check_command
from gpuprobe.config import Config, KubernetesConfig, ServeConfig
from gpuprobe.daemon.store import AgentState, ReportStore
from gpuprobe.effects import once
from gpuprobe.effects.loop import EffectsLoop
from gpuprobe.effects.told import tell_report
from gpuprobe.report import CheckResult, Finding, NodeReport, Severity
from gpuprobe.serve.metrics import ReportCollector
from gpuprobe.serve.metrics_http import MetricsPage
from gpuprobe.serve.service import NodeDiagnosticsService
from kube_standin import KubeStandIn, running
from serving import in_process_agent, wait_for

T = datetime(2026, 11, 29, 21, 0, tzinfo=UTC)
# ECC errors on the GPU a training pod holds: attribution names the pod in the finding.
SNAPSHOT = "synthetic-k8s-ecc-on-training-gpu"
AFFECTS = "; affects pod ml-team/llama-pretrain-0 (container trainer)"
NODE = "gpu-node-17"  # the stand-in's node


class Counted:
    """A post-pass that records the reports it returned (the same objects), around
    attribution."""

    def __init__(self) -> None:
        self.returned: list[NodeReport] = []

    def __call__(self, report: NodeReport) -> NodeReport:
        out = attribute_report(report)
        self.returned.append(out)
        return out


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counted:
    post_pass = Counted()
    monkeypatch.setattr(pipeline, "POST_PASSES", (post_pass,))
    return post_pass


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[KubeStandIn]:
    with running(tmp_path) as stand_in:
        yield stand_in


def ecc_message(report: NodeReport) -> str:
    (ecc,) = [f for _, f in report.findings() if f.code == "ECC_UNCORRECTABLE"]
    return ecc.message


def test_the_post_passes_run_once_each_in_their_order(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def first(report: NodeReport) -> NodeReport:
        calls.append("first")
        return replace(report, checks=[*report.checks, CheckResult("first", "added")])

    def second(report: NodeReport) -> NodeReport:
        calls.append("second")
        after = CheckResult("second", f"after {report.checks[-1].name}")
        return replace(report, checks=[*report.checks, after])

    monkeypatch.setattr(pipeline, "POST_PASSES", (first, second))
    report = pipeline.assemble("node-a", T, [CheckResult("gpus", "ok")])
    assert calls == ["first", "second"]
    assert [(c.name, c.summary) for c in report.checks] == [
        ("gpus", "ok"),
        ("first", "added"),
        ("second", "after first"),
    ]
    assert (report.node, report.time) == ("node-a", T)


def test_the_post_passes_are_attribution_then_what_the_effects_did() -> None:
    assert (attribute_report, tell_report) == pipeline.POST_PASSES


def test_feed_gives_every_sink_the_item_in_order() -> None:
    seen: list[tuple[str, object]] = []
    item = object()
    pipeline.feed(item, [lambda x: seen.append(("a", x)), lambda x: seen.append(("b", x))])
    assert seen == [("a", item), ("b", item)]


def test_check_runs_each_post_pass_once_and_feeds_every_sink_the_report(
    counted: Counted,
    standin: KubeStandIn,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    published: list[NodeReport] = []

    def publish(report: NodeReport, config: KubernetesConfig, access: Any) -> None:
        published.append(report)

    monkeypatch.setattr(once, "publish_once", publish)
    kube = ["--publish", "--kubeconfig", str(standin.kubeconfig())]
    args = build_parser().parse_command_line(
        ["check", "--snapshot", snapshot(SNAPSHOT), "--only", "gpus,workloads", "--json", *kube]
    )
    assert check_command.run(args) == 2
    (assembled,) = counted.returned
    (report,) = published
    assert report is assembled
    assert ecc_message(report).endswith(AFFECTS)
    printed = capsys.readouterr().out
    assert printed == report.to_json() + "\n"
    assert json.loads(printed)["checks"][0]["name"] == "gpus"


def test_the_store_assembles_each_update_once_and_feeds_every_sink_that_state(
    counted: Counted,
) -> None:
    store = ReportStore("node-a", ["gpus", "workloads"])
    seen: dict[str, list[AgentState]] = {"one": [], "two": []}
    store.add_sink(seen["one"].append)
    store.add_sink(seen["two"].append)
    finding = Finding("ECC_UNCORRECTABLE", Severity.CRITICAL, "ECC", resource="gpu:0:GPU-0")
    store.update([Ran(CheckResult("gpus", "bad", [finding]), T)])
    holder = {"namespace": "ns", "pod": "p", "container": "c"}
    devices = [{"gpu": 0, "resource": "gpu:0:GPU-0", "holders": [holder]}]
    state = store.update([Ran(CheckResult("workloads", "held", data={"devices": devices}), T)])
    assert len(counted.returned) == 2  # one per update, never again by a sink
    assert seen["one"] == seen["two"]
    assert [s.report for s in seen["one"]] == [None, *counted.returned]  # None: on adding
    assert all(s.report is out for s, out in zip(seen["one"][1:], counted.returned, strict=True))
    assert seen["one"][-1] is state
    assert state.report is not None
    assert ecc_message(state.report) == "ECC; affects pod ns/p (container c)"


def test_the_agent_feeds_each_report_to_every_sink_once(
    counted: Counted, standin: KubeStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, list[NodeReport]] = {}

    def record(cls: type, method: str, report_of: Any) -> None:
        original = getattr(cls, method)
        seen[cls.__name__] = []

        def recording(self: object, arg: Any) -> None:
            report = report_of(arg)
            if report is not None:
                seen[cls.__name__].append(report)
            original(self, arg)

        monkeypatch.setattr(cls, method, recording)

    def of_state(state: AgentState) -> NodeReport | None:
        return state.report

    record(ReportCollector, "update", of_state)
    record(MetricsPage, "invalidate", of_state)
    record(NodeDiagnosticsService, "render", of_state)
    record(EffectsLoop, "offer", lambda report: report)
    config = Config(
        serve=ServeConfig(interval_seconds=3600),
        kubernetes=KubernetesConfig(start_jitter_seconds=0),
    )
    names = ["gpus", "workloads"]
    kubeconfig = str(standin.kubeconfig())
    with in_process_agent(SNAPSHOT, config, names, node_name=NODE, kubeconfig=kubeconfig):
        wait_for(lambda: standin.conditions(NODE))
    reports = seen["ReportCollector"]
    assert reports and all(ecc_message(r).endswith(AFFECTS) for r in reports)
    assert reports == counted.returned
    assert all(r is out for r, out in zip(reports, counted.returned, strict=True))
    for sink in ("MetricsPage", "NodeDiagnosticsService", "EffectsLoop"):
        assert seen[sink] == reports, sink
        assert all(a is b for a, b in zip(seen[sink], reports, strict=True)), sink
