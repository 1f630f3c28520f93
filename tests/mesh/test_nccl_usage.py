"""What `gpuprobe mesh --transport nccl` says when it cannot run a test: flags that do not fit,
nodes the API does not know or that offer no GPU, a namespace that does not exist, a runner the
cluster lacks; and its text report. The real command against the API stand-in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_nccl_mesh import BUSBW, TORCH, healthy_ranks, mesh

from conftest import gpuprobe
from kube_control_plane import Ending, cluster
from kube_workloads import MESH_TOKEN, WorkloadStandIn


def usage_error(api: WorkloadStandIn | None, *args: str) -> str:
    """The one line of a run that ends in a usage error (exit 64, nothing on stdout), without
    the pointer at `--help` every usage error ends with."""
    access = ["--kubeconfig", str(api.kubeconfig(MESH_TOKEN))] if api else []
    out = gpuprobe("mesh", *access, *args)
    assert (out.returncode, out.stdout) == (64, ""), out.stdout + out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("gpuprobe: ")
    assert out.stderr.endswith(" (see gpuprobe mesh --help)\n"), out.stderr
    return out.stderr.removeprefix("gpuprobe: ").removesuffix(" (see gpuprobe mesh --help)\n")


@pytest.fixture
def api(tmp_path: Path) -> Any:
    with cluster(tmp_path, healthy_ranks, {"gpu-a": 8, "gpu-b": 8, "gpu-c": 8}) as (api, _):
        api.add_node("cpu-1", status={"allocatable": {"cpu": "64"}, "capacity": {"cpu": "64"}})
        yield api
        assert api.left_behind() == []


def test_the_flags_of_each_transport_stay_with_it(api: WorkloadStandIn) -> None:
    nccl = ["--transport", "nccl", "--nodes", "gpu-a,gpu-b"]
    assert usage_error(api, *nccl) == (
        "--transport nccl needs --nccl-image (the image the test runs)"
    )
    assert usage_error(api, *nccl, "--nccl-image", TORCH, "--targets", "10.0.0.7:50051") == (
        "--targets: the nccl transport finds the nodes through the Kubernetes API (--nodes, "
        "--kubeconfig), not the agents"
    )
    assert usage_error(None, "--nodes", "gpu-a,gpu-b", "--targets", "10.0.0.7:50051") == (
        "--nodes: only with --transport nccl"
    )
    assert usage_error(None, "--transport", "rdma", "--rdma-device", "mlx5_0") == (
        "--transport rdma needs --targets (the agents)"
    )


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--nodes", "gpu-a"], "--nodes names 1 node: a mesh measures between two at least"),
        (["--nodes", "gpu-a,nope"], "--nodes: the API server has no node 'nope'"),
        (
            ["--nodes", "gpu-a,gpu-b", "--nccl-runner", "mpijob"],
            "--nccl-runner mpijob: the API server does not serve kubeflow.org/v2beta1 mpijobs "
            "(the MPI Operator v2 is not installed)",
        ),
        (
            [],
            "0 GPU node(s) with a gpuprobe agent in namespace gpuprobe (none): a mesh tests two "
            "at least; name them with --nodes",
        ),
    ],
)
def test_a_request_the_cluster_cannot_serve_is_one_line(
    api: WorkloadStandIn, flags: list[str], line: str
) -> None:
    assert usage_error(api, "--transport", "nccl", "--nccl-image", TORCH, *flags) == line


def test_a_namespace_the_role_does_not_cover_is_the_api_servers_refusal(
    api: WorkloadStandIn,
) -> None:
    """The Role is the namespace gpuprobe's: elsewhere the API server refuses (it authorizes
    before it looks for the namespace)."""
    line = usage_error(
        api,
        "--transport",
        "nccl",
        "--nccl-image",
        TORCH,
        "--nodes",
        "gpu-a,gpu-b",
        "--namespace",
        "nope",
    )
    assert line.startswith("the API server did not create jobs.batch gpuprobe-nccl-")
    assert line.endswith(
        ' in namespace nope: 403: jobs.batch is forbidden: User "system:serviceaccount:'
        'gpuprobe:gpuprobe-mesh-nccl" cannot create resource "jobs" in API group "batch" in the '
        'namespace "nope"'
    )


@pytest.mark.parametrize(
    "flag",
    [
        "--toleration=gpu:NoRun",
        "--pod-resource=cpu=1",
        "--nodes=gpu-a,gpu-a",
        "--nccl-max-bytes=1M",
    ],
)
def test_a_malformed_nccl_flag_is_a_usage_error(flag: str) -> None:
    out = gpuprobe("mesh", "--transport", "nccl", "--nccl-image", TORCH, flag)
    assert out.returncode == 64 and out.stdout == ""
    assert out.stderr.startswith("gpuprobe: argument ")


def test_a_named_node_without_gpus_is_a_finding_not_a_test(api: WorkloadStandIn) -> None:
    out = mesh(api, "--nodes", "gpu-a,cpu-1", "--json", image=TORCH)
    assert out.returncode == 3, out.stdout + out.stderr
    assert json.loads(out.stdout) == {
        "status": "UNKNOWN",
        "links": [],
        "findings": [
            {
                "code": "BANDWIDTH_TEST_UNAVAILABLE",
                "severity": "UNKNOWN",
                "message": "cpu-1's NCCL bandwidth could not be tested: it offers the scheduler "
                "no nvidia.com/gpu (allocatable 0: its device plugin is not running, or its GPUs "
                "are gone)",
                "action": "NONE",
                "resource": "peer:cpu-1",
            },
            {
                "code": "BANDWIDTH_TEST_UNAVAILABLE",
                "severity": "UNKNOWN",
                "message": "gpu-a's NCCL bandwidth could not be tested: no other node named "
                "offers the scheduler a nvidia.com/gpu, and the all-reduce runs between two "
                "nodes at least",
                "action": "NONE",
                "resource": "peer:gpu-a",
            },
        ],
    }
    assert api.created == []


def test_the_text_report_shows_each_pairs_bus_bandwidth_in_gb_per_second(
    api: WorkloadStandIn,
) -> None:
    out = mesh(api, "--nodes", "gpu-a,gpu-b,gpu-c", image=TORCH)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout == (
        "nccl all-reduce bus bandwidth at the largest size, GB/s (each pair)\n"
        "         gpu-a   gpu-b   gpu-c\n"
        "gpu-a           338.82  338.82\n"
        "gpu-b   338.82          338.82\n"
        "gpu-c   338.82  338.82        \n"
        "\n"
        "status OK\n"
    )


def test_a_pair_below_the_floor_is_low(api: WorkloadStandIn) -> None:
    """338.82 GB/s is 2710.56 Gbit/s: a floor of 3000 Gbit/s makes the pair LOW, and with two
    nodes alone the blame stays unassigned."""
    out = mesh(api, "--nodes", "gpu-a,gpu-b", "--json", "--floor-gbps", "3000", image=TORCH)
    assert out.returncode == 1, out.stdout + out.stderr
    found = json.loads(out.stdout)
    assert found["links"][0]["verdict"] == "LOW"
    assert found["links"][0]["bytes_per_second"] == BUSBW
    assert [(f["code"], f["resource"]) for f in found["findings"]] == [
        ("LINK_BANDWIDTH_LOW", "peer:gpu-a")
    ]
    assert (
        "blame cannot be assigned between the two nodes and the path"
        in (found["findings"][0]["message"])
    )


def test_quick_mode_tests_the_pairs_of_its_matchings(tmp_path: Path) -> None:
    nodes = {f"gpu-{c}": 8 for c in "abcd"}
    with cluster(tmp_path, healthy_ranks, nodes) as (api, _):
        out = mesh(
            api,
            "--nodes",
            ",".join(nodes),
            "--mode",
            "quick",
            "--matchings",
            "1",
            "--json",
            image=TORCH,
        )
        assert api.left_behind() == []
    assert out.returncode == 0, out.stdout + out.stderr
    links = json.loads(out.stdout)["links"]
    assert len(links) == 2  # one matching of four nodes; nothing to re-test
    assert sorted(n for link in links for n in (link["source"], link["target"])) == sorted(nodes)


def test_wrong_values_are_named(tmp_path: Path) -> None:
    """A table whose #wrong column counts wrong elements. Hand-made: the published healthy
    output with its largest row's out-of-place #wrong set to 3 (no published 2-node output
    with wrong values was found); the layout is nccl-tests' own."""
    from test_nccl_mesh import TWO_NODES

    lines = TWO_NODES.splitlines(keepends=True)
    last = next(i for i, line in enumerate(lines) if line.lstrip().startswith("8589934592"))
    fields = lines[last].rstrip("\n")
    lines[last] = fields[: fields.rfind(" 0")] + " 3" + fields[fields.rfind(" 0") + 2 :] + "\n"

    def script(test: str, pods: list[dict[str, Any]]) -> Ending:
        return Ending(logs={"rank-0": "".join(lines), "rank-1": ""})

    with cluster(tmp_path, script, {"gpu-a": 8, "gpu-b": 8}) as (api, _):
        out = mesh(api, "--nodes", "gpu-a,gpu-b", "--json", image=TORCH)
    assert out.returncode == 2, out.stdout + out.stderr
    found = json.loads(out.stdout)
    assert found["links"][0]["wrong_values"] == 3
    assert found["findings"] == [
        {
            "code": "NCCL_WRONG_RESULTS",
            "severity": "CRITICAL",
            "message": "the NCCL all-reduce gpu-a ↔ gpu-b returned 3 wrong values: a GPU, "
            "NVLink or the path between the two corrupts data (a test of each with a third "
            "node tells which)",
            "action": "HARDWARE_INSPECTION",
            "resource": "peer:gpu-a",
        }
    ]
