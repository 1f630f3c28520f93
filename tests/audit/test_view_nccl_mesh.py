"""The cluster view's `nccl_mesh` item: whether `gpuprobe mesh --transport nccl` can run, as an
MPIJob or an Indexed Job, on which GPU nodes every GPU is free now, and which already hold an
image it runs (a node's `status.images` as the kubelet lists them: digest and tag names)."""

from __future__ import annotations

from typing import Any

from test_view_checklist import GKE_A3, NOW, agent, facts, node

from gpuprobe.audit.usage import Usage
from gpuprobe.audit.view.judge import judge
from gpuprobe.audit.view.read import Source
from gpuprobe.report import Status

PYTORCH = {
    "names": [
        "nvcr.io/nvidia/pytorch@sha256:2cf4a9bd2ef0a4e3f21e3b5d9b1c8e6f5a7d3c2b1a0f9e8d7c6b5a4f3e2d1c0b",
        "nvcr.io/nvidia/pytorch:25.01-py3",
    ],
    "sizeBytes": 9770213512,
}
NCCL_TESTS = {"names": ["ghcr.io/example/nccl-tests:2.23.4-cuda12.8"], "sizeBytes": 4123000211}
PAUSE = {"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320368}


def with_images(obj: dict[str, Any], *images: dict[str, Any]) -> dict[str, Any]:
    obj["status"]["images"] = list(images)
    return obj


def item(view: Any) -> Any:
    return next(i for i in view.items if i.name == "nccl_mesh")


def test_without_the_mpi_operator_it_runs_as_an_indexed_job_and_counts_free_gpus() -> None:
    found = facts(
        with_images(node("gke-a3-1", GKE_A3, "8"), PAUSE, PYTORCH),
        node("gke-a3-2", GKE_A3, "8"),
        node("gke-a3-3", GKE_A3, "8"),
        node("cpu-1", {}, "0"),
    )
    agents = [
        agent("gke-a3-1", Usage(unallocated=8)),
        agent("gke-a3-2", Usage(allocated=2, unallocated=6)),
    ]
    found_item = item(judge(found, agents, NOW))
    assert found_item.status == Status.OK
    assert found_item.summary == (
        "NCCL between nodes would run as an Indexed Job running gpuprobe's rank program in a "
        "PyTorch image (no MPI Operator); 1 of 3 GPU node(s) have every GPU free (gke-a3-1); "
        "free GPUs unknown on gke-a3-3 (no agent answered): a test now would wait for GPUs; a "
        "PyTorch image is already on 1 of the 3"
    )
    assert found_item.facts == {
        "runner": "job",
        "mpi_operator": False,
        "gpu_nodes": [
            {
                "node": "gke-a3-1",
                "allocatable": 8,
                "free": 8.0,
                "nccl_images": [],
                "pytorch_images": ["nvcr.io/nvidia/pytorch:25.01-py3"],
            },
            {
                "node": "gke-a3-2",
                "allocatable": 8,
                "free": 6.0,
                "nccl_images": [],
                "pytorch_images": [],
            },
            {
                "node": "gke-a3-3",
                "allocatable": 8,
                "free": None,
                "nccl_images": [],
                "pytorch_images": [],
            },
        ],
        "all_gpus_free": ["gke-a3-1"],
    }


def test_with_the_mpi_operator_it_runs_as_an_mpijob() -> None:
    found = facts(
        with_images(node("gke-a3-1", GKE_A3, "8"), NCCL_TESTS),
        with_images(node("gke-a3-2", GKE_A3, "8"), NCCL_TESTS, PYTORCH),
        groups={"": ["v1"], "kubeflow.org": ["v2beta1", "v1"]},
    )
    agents = [agent("gke-a3-1", Usage(unallocated=8)), agent("gke-a3-2", Usage(unallocated=8))]
    found_item = item(judge(found, agents, NOW))
    assert found_item.summary == (
        "NCCL between nodes would run as an MPIJob (the MPI Operator serves "
        "kubeflow.org/v2beta1) running nccl-tests; 2 of 2 GPU node(s) have every GPU free "
        "(gke-a3-1, gke-a3-2); a nccl-tests image is already on 2 of the 2"
    )
    assert found_item.facts["runner"] == "mpijob"
    assert found_item.facts["gpu_nodes"][1]["nccl_images"] == [
        "ghcr.io/example/nccl-tests:2.23.4-cuda12.8"
    ]


def test_the_training_operators_kubeflow_v1_alone_is_no_mpi_operator() -> None:
    found = facts(node("gke-a3-1", GKE_A3, "8"), groups={"": ["v1"], "kubeflow.org": ["v1"]})
    assert item(judge(found, [], NOW)).facts["mpi_operator"] is False


def test_without_discovery_it_is_unknown_never_a_guess() -> None:
    found = facts(node("gke-a3-1", GKE_A3, "8"))
    found.sources["discovery"] = Source("discovery", "failed", "timeout: the deadline passed")
    found_item = item(judge(found, [], NOW))
    assert found_item.status == Status.UNKNOWN
    assert found_item.summary == "not read: discovery: timeout: the deadline passed"
