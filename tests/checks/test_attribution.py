"""The attribution step: every GPU and MIG finding names the pods its device affects."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuprobe.checks.attribution import attribute_findings, attribute_report
from gpuprobe.report import Action, CheckResult, Finding, NodeReport, PodRef, Severity

A = {"namespace": "ml", "pod": "whole-gpu-1", "container": "c"}
B = {"namespace": "ml", "pod": "mig-1-2", "container": "d"}
C = {"namespace": "dev", "pod": "stray", "container": ""}
DEVICES = [
    {"resource": "gpu:0:GPU-a", "gpu": 0, "holders": [A], "processes": [{"pid": 1, **C}]},
    {"resource": "gpu:1:GPU-b", "gpu": 1, "holders": [], "processes": [{"pid": 2}]},
    {"resource": "mig:1:2:0", "gpu": 1, "mig": {"gi": 2, "ci": 0}, "holders": [B]},
    {"resource": "mig:1:3:0", "gpu": 1, "mig": {"gi": 3, "ci": 0}, "holders": []},
]


def finding(resource: str) -> Finding:
    return Finding("X", Severity.CRITICAL, "bad", Action.RESET_GPU, resource)


def test_gpu_and_mig_findings_name_their_pods_and_others_are_left_alone() -> None:
    workloads = CheckResult("workloads", "s", [], {"devices": DEVICES})
    gpus = CheckResult(
        "gpus",
        "s",
        [finding("gpu:0:GPU-a"), finding("gpu:1:"), finding("mig:1:3:0"), finding("node")],
    )
    before = list(gpus.findings)
    out = attribute_findings([gpus, workloads])
    assert gpus.findings == before  # the stored result is not changed
    a, b, c = PodRef("ml", "whole-gpu-1", "c"), PodRef("ml", "mig-1-2", "d"), PodRef("dev", "stray")
    assert [f.pods for f in out[0].findings] == [(c, a), (b,), (), ()]
    assert out[0].findings[0].message == (
        "bad; affects pods dev/stray, ml/whole-gpu-1 (container c)"
    )
    assert out[1] is workloads


def test_a_mig_finding_names_the_holder_of_its_whole_gpu() -> None:
    devices = [
        {"resource": "gpu:1:GPU-b", "gpu": 1, "holders": [A]},
        {"resource": "mig:1:3:0", "gpu": 1, "mig": {"gi": 3}, "holders": []},
    ]
    out = attribute_findings(
        [
            CheckResult("mig", "s", [finding("mig:1:3:0")]),
            CheckResult("workloads", "s", [], {"devices": devices}),
        ]
    )
    assert out[0].findings[0].pods == (PodRef("ml", "whole-gpu-1", "c"),)


def test_without_workloads_or_pods_nothing_changes() -> None:
    gpus = CheckResult("gpus", "s", [finding("gpu:0:GPU-a")])
    assert attribute_findings([gpus]) == [gpus]
    empty = CheckResult("workloads", "s", [], {"devices": [{"resource": "gpu:0:", "gpu": 0}]})
    results = [gpus, empty]
    assert attribute_findings(results) is results


def test_a_notice_that_the_node_goes_names_every_gpu_pod() -> None:
    workloads = CheckResult("workloads", "s", [], {"devices": DEVICES})
    notice = Finding(
        "NODE_PREEMPTION_NOTICE", Severity.CRITICAL, "AWS announced it", Action.DRAIN_NODE
    )
    other = Finding(
        "GRACEFUL_SHUTDOWN_DISABLED",
        Severity.WARNING,
        "off",
        Action.FIX_CONFIG,
        "file:/var/lib/kubelet/config.yaml",
    )
    out = attribute_findings([CheckResult("lifecycle", "s", [notice, other]), workloads])
    a, b, c = PodRef("ml", "whole-gpu-1", "c"), PodRef("ml", "mig-1-2", "d"), PodRef("dev", "stray")
    assert [f.pods for f in out[0].findings] == [(c, b, a), ()]
    assert out[0].findings[0].message == (
        "AWS announced it; affects pods dev/stray, ml/mig-1-2 (container d), "
        "ml/whole-gpu-1 (container c)"
    )


def test_the_report_post_pass_attributes_its_checks_and_keeps_a_report_it_leaves_alone() -> None:
    gpus = CheckResult("gpus", "s", [finding("gpu:0:GPU-a")])
    workloads = CheckResult("workloads", "s", [], {"devices": DEVICES})
    report = NodeReport("node-a", datetime(2026, 11, 29, tzinfo=UTC), [gpus, workloads])
    out = attribute_report(report)
    assert (out.node, out.time) == (report.node, report.time)
    assert out.checks == attribute_findings([gpus, workloads])
    assert report.checks == [gpus, workloads]  # the report given is not changed
    alone = NodeReport("node-a", report.time, [gpus])
    assert attribute_report(alone) is alone
