"""The objects of one NCCL test, held to what the API server and the MPI Operator accept (the
stand-in's validation: Kubernetes' schemas, the API server's own rules, the MPIJob CRD's
schema, the operator's ValidateMPIJob), and the pods' states as the API shows them."""

from __future__ import annotations

import argparse
import copy
from typing import Any

import pytest

from gpuprobe.cli.mesh import pod_resource, toleration
from gpuprobe.mesh.nccl import workload
from gpuprobe.mesh.nccl.pods import pod_state
from gpuprobe.mesh.nccl.workload import Sweep, Toleration, Workload
from kube_standin import ApiFailure, validate
from kube_validation import (
    operator_validation,
    validate_config_map,
    validate_job,
    validate_mpijob,
    validate_pod_spec,
    validate_service,
)

W = Workload(
    name="gpuprobe-nccl-3fa9c1-12",
    namespace="gpuprobe",
    nodes=("gpu-node-17", "gpu-node-18"),
    gpus=8,
    image="ghcr.io/example/nccl-tests:2.23.4-cuda12.8",
    run="3fa9c1",
    tolerations=(Toleration("nvidia.com/gpu", None, "NoSchedule"),),
    resources=(("rdma/rdma_shared_device_a", "1"),),
)
OWNER = {"apiVersion": "batch/v1", "kind": "Job", "name": W.name, "uid": "4d6f-uid"}


def test_the_mpijob_is_what_the_crd_and_the_operator_accept() -> None:
    job = workload.mpi_job(W)
    stored = copy.deepcopy(job)
    validate_mpijob(stored)
    assert operator_validation(stored) == []
    # Every field the CRD defaults is given, but `runPolicy.suspend` (false): the test names
    # no field an older operator's CRD would not know.
    assert stored["spec"]["runPolicy"].pop("suspend") is False
    assert stored == job
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "1"}
    }
    assert worker["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert job["spec"]["runPolicy"]["activeDeadlineSeconds"] == 300 + workload.BACKSTOP_SECONDS


def test_the_indexed_job_service_and_configmap_are_what_the_api_server_accepts() -> None:
    job = workload.indexed_job(W)
    validate(job)
    assert validate_job(job) == []
    service = workload.rank_service(W, OWNER)
    validate(service)
    assert validate_service(service) == []
    program = workload.rank_program(W, OWNER, "print('rank')\n")
    validate(program)
    assert validate_config_map(program) == []


def test_a_node_field_selector_takes_one_value_per_term() -> None:
    """What the API server refuses (ValidateNodeFieldSelectorRequirement), and why the test
    binds its pods with one term per node."""
    spec = workload.indexed_job(W)["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert len(terms["nodeSelectorTerms"]) == 2
    merged = copy.deepcopy(spec)
    merged["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(W.nodes)}]}
        ]
    }
    assert validate_pod_spec(merged, "spec") == [
        "spec.affinity.nodeAffinity.nodeSelectorTerms[0].matchFields.values: Required value: "
        "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"
    ]


def test_a_misspelt_mpijob_field_is_refused_as_the_crd_refuses_it() -> None:
    job = workload.mpi_job(W)
    job["spec"]["slotPerWorker"] = 8
    with pytest.raises(ApiFailure) as refused:
        validate_mpijob(job)
    assert refused.value.code == 422
    job = workload.mpi_job(W)
    job["spec"]["mpiImplementation"] = "OpenMPI5"
    with pytest.raises(ApiFailure):
        validate_mpijob(job)


def test_the_longest_worker_hostname_is_a_dns_label() -> None:
    """The operator names workers `<job>-worker-<i>` (a DNS-1035 label, 63 at most)."""
    many = Workload(**{**W.__dict__, "nodes": tuple(f"n{i}" for i in range(2))})
    assert operator_validation(workload.mpi_job(many)) == []
    long = Workload(**{**W.__dict__, "name": "gpuprobe-nccl-" + "a" * 45})
    assert operator_validation(workload.mpi_job(long)) != []


def test_the_sweep_is_the_same_for_both_programs() -> None:
    w = Workload(**{**W.__dict__, "sweep": Sweep(max_bytes="4G")})
    launcher = workload.mpi_job(w)["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    rank = workload.indexed_job(w)["spec"]["template"]["spec"]["containers"][0]
    assert launcher["containers"][0]["command"][-8:-2] == ["-b", "8M", "-e", "4G", "-f", "2"]
    assert rank["command"][2:8] == ["-b", "8M", "-e", "4G", "-f", "2"]


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        ("nvidia.com/gpu:NoSchedule", Toleration("nvidia.com/gpu", None, "NoSchedule")),
        (
            "gpuprobe.io/unhealthy=XID:NoSchedule",
            Toleration("gpuprobe.io/unhealthy", "XID", "NoSchedule"),
        ),
        ("dedicated=training", Toleration("dedicated", "training", None)),
        ("dedicated", Toleration("dedicated", None, None)),
    ],
)
def test_a_toleration_is_read_as_the_operator_writes_it(text: str, wanted: Toleration) -> None:
    assert toleration(text) == wanted
    spec = {"containers": [{"name": "c", "image": "i"}], "tolerations": [wanted.to_dict()]}
    assert validate_pod_spec(spec, "spec") == []


@pytest.mark.parametrize("text", ["a:NoRun", ":NoSchedule", "bad key:NoSchedule", "k=v v"])
def test_a_toleration_that_is_none_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        toleration(text)


def test_a_pod_resource_is_an_extended_resource_and_a_count() -> None:
    assert pod_resource("rdma/rdma_shared_device_a=1") == ("rdma/rdma_shared_device_a", "1")
    for bad in ("cpu=1", "rdma/x=1.5", "rdma/x", "=1"):
        with pytest.raises(argparse.ArgumentTypeError):
            pod_resource(bad)


def pod(
    status: dict[str, Any], labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": "gpuprobe-nccl-3fa9c1-12-worker-1", "labels": labels or {}},
        "spec": {"hostname": "gpuprobe-nccl-3fa9c1-12-worker-1", **spec},
        "status": status,
    }


def test_a_pod_the_scheduler_could_not_place_carries_its_words() -> None:
    words = (
        "0/8 nodes are available: 3 Insufficient nvidia.com/gpu, 5 node(s) had untolerated taint "
        "{gpuprobe.io/unhealthy: XID}. preemption: 0/8 nodes are available: 3 No preemption "
        "victims found for incoming pod, 5 Preemption is not helpful for scheduling."
    )
    state = pod_state(
        pod(
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": words,
                    }
                ],
            },
            {
                "training.kubeflow.org/job-role": "worker",
                "training.kubeflow.org/replica-index": "1",
            },
        ),
        "worker",
    )
    assert (state.node, state.role, state.index, state.unschedulable) == (None, "worker", 1, words)
    assert not state.started and not state.failed


def test_a_container_that_waits_or_ended_is_read() -> None:
    waiting = pod_state(
        pod(
            {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "rank",
                        "state": {
                            "waiting": {
                                "reason": "ImagePullBackOff",
                                "message": (
                                    'Back-off pulling image "nvcr.io/nvidia/pytorch:25.01-py3"'
                                ),
                            }
                        },
                    }
                ],
            },
            nodeName="gpu-node-17",
        ),
        "rank",
    )
    assert (
        waiting.waiting
        == 'ImagePullBackOff: Back-off pulling image "nvcr.io/nvidia/pytorch:25.01-py3"'
    )
    assert waiting.node == "gpu-node-17" and not waiting.started
    ended = pod_state(
        pod(
            {
                "phase": "Failed",
                "containerStatuses": [
                    {
                        "name": "rank",
                        "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                    }
                ],
            },
            {"batch.kubernetes.io/job-completion-index": "0"},
            nodeName="gpu-node-17",
        ),
        "rank",
    )
    assert (ended.role, ended.index, ended.ended, ended.exit_code) == (
        "rank",
        0,
        "OOMKilled (exit 137)",
        137,
    )
    assert ended.failed and ended.started
