"""The audit counts pods failing for GPU reasons by namespace and cause, and the images that
need a newer driver, across nodes (from each node's `pods` check)."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuprobe import report_view
from gpuprobe.audit.cluster import build
from gpuprobe.audit.render import render_cluster
from gpuprobe.checks.registry import summary_keys
from gpuprobe.client import Fetched
from helpers import node_report

T = datetime(2026, 11, 29, 21, 0, 0, tzinfo=UTC)


def test_failures_by_namespace_and_cause_and_images_needing_a_newer_driver() -> None:
    fetched = [
        Fetched(f"10.0.0.{i}:50051", node_report(name, f"gpu-{i}", time=T), "0.1.0")
        for i, name in enumerate(
            [
                "synthetic-pods-cuda12.8-geforce-550",
                "synthetic-pods-cuda12.8-geforce-550",
                "synthetic-pods-crio-require-clauses",
                "synthetic-pods-nvml-lost-everywhere",
                "synthetic-pods-cuda12.8-h100-forward-compat",
            ]
        )
    ]
    totals = build(fetched, []).to_dict()["totals"]
    assert totals["gpu_pod_failures"] == [
        {"namespace": "ml-team", "cause": "cuda-driver-too-old", "pods": 2},
        {"namespace": "ml-team", "cause": "nvml-unknown-error", "pods": 3},
    ]
    assert totals["images_needing_newer_driver"] == [
        {
            "image": "nvcr.io/nvidia/pytorch:25.01-py3",
            "cuda_required": "12.8",
            "containers": 2,
            "nodes": 2,
            "namespaces": ["ml-team"],
            "driver_needed": "570.26",
        },
        {
            "image": "registry.example.com/vision/detector:2.3-cu126",
            "cuda_required": "12.6",
            "containers": 1,
            "nodes": 1,
            "namespaces": ["vision"],
            "driver_needed": "560.28.03",
        },
    ]
    # The summary view a fleet audit asks for keeps what these totals read.
    viewed = [
        Fetched(f.target, report_view.summary(f.report, summary_keys()), f.agent_version)
        for f in fetched
        if f.report
    ]
    assert build(viewed, []).to_dict()["totals"] == totals
    text = render_cluster(build(fetched, []))
    assert text.endswith(
        "pods failing for GPU reasons (namespace, cause: pods)\n"
        "  ml-team  cuda-driver-too-old: 2\n"
        "  ml-team  nvml-unknown-error: 3\n"
        "\n"
        "images that need a newer driver (image, CUDA: containers on nodes)\n"
        "  nvcr.io/nvidia/pytorch:25.01-py3  CUDA 12.8: 2 on 2 (ml-team); needs driver >= 570.26\n"
        "  registry.example.com/vision/detector:2.3-cu126  CUDA 12.6: 1 on 1 (vision); needs "
        "driver >= 560.28.03\n"
    )


def test_a_cluster_without_failures_keeps_the_totals_as_they_were() -> None:
    fetched = [
        Fetched("10.0.0.1:50051", node_report("synthetic-h100-8gpu-healthy", "gpu-1", time=T), "")
    ]
    totals = build(fetched, []).to_dict()["totals"]
    assert "gpu_pod_failures" not in totals and "images_needing_newer_driver" not in totals
