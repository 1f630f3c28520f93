"""Audit usage totals: GPUs allocated, busy, allocated-idle and unallocated now, GPU-hours
from the agents' idle accounting, idle GPU-hours by namespace, and their cost."""

from __future__ import annotations

import json

from conftest import gpuprobe, snapshot
from gpuprobe.audit.cluster import build
from gpuprobe.checks.registry import CHECKS
from gpuprobe.checks.runner import CheckRunner
from gpuprobe.client import Fetched
from gpuprobe.config import Config, ServeConfig
from gpuprobe.host import snapshot_host
from gpuprobe.pipeline import assemble, run_checks
from gpuprobe.report import NodeReport, now
from helpers import FakeClock
from serving import in_process_agent


def counted(name: str, node: str) -> NodeReport:
    """The node's report after two rounds an hour apart (its agent's accounting: one runner,
    which keeps the check's state between its rounds)."""
    host = snapshot_host(snapshot(name), node)
    host.clock = clock = FakeClock()
    runner = CheckRunner(host, Config(), CHECKS)
    runner.run(["workloads"])
    clock.advance(3600)
    started = now()
    return assemble(host.node_name, started, [r.result for r in runner.run(["workloads"])])


def test_totals_over_nodes_with_gpu_hours_by_namespace_and_cost() -> None:
    whole = counted("synthetic-k8s-utilization-samples", "a")
    mig = counted("synthetic-k8s-mig-mixed", "b")
    plain = run_checks(snapshot_host(snapshot("synthetic-h100-8gpu-healthy")), Config(), ["gpus"])
    fetched = [Fetched("10.0.0.1:50051", r) for r in (whole, mig, plain)]
    cluster = build(fetched, price_per_gpu_hour=2.5)
    report = cluster.to_dict()
    assert json.loads("".join(cluster.json_chunks())) == report  # the streamed --json too
    usage = report["usage"]
    # Now: node a 7 GPUs held (6 busy, GPU 6 idle), 1 free; node b's GPU 0 in quarters
    # (3 held, the 2g.20gb idle), GPUs 1-7 free.
    assert usage["gpus"] == {
        "allocated": 7.75,
        "busy": 6.5,
        "allocated_idle": 1.25,
        "unallocated": 8.25,
    }
    # An hour: on node a GPU 6 idle 45 of the 60 new samples (45 min), on node b the eval
    # pod's quarter of GPU 0 (15 min of GPU).
    assert usage["gpu_hours"] == {
        "allocated": 7.75,
        "busy": 6.75,
        "allocated_idle": 1.0,
        "unallocated": 8.25,
    }
    assert usage["idle_gpu_hours_by_namespace"] == {
        "research": 0.75,
        "ml-team": 0.25,
        "inference": 0.0,
    }
    assert usage["idle_cost"] == 2.5
    assert usage["idle_cost_by_namespace"] == {"research": 1.88, "ml-team": 0.62, "inference": 0.0}
    assert usage["unallocated_cost"] == 20.62
    assert [n["node"] for n in usage["nodes"]] == ["a", "b"]
    assert usage["nodes"][1]["gpus"]["allocated_idle"] == 0.25


def test_the_check_sums_its_usage_digest_and_an_agent_without_one_reads_the_same() -> None:
    """`workloads.data.usage` is what the summary view carries; an agent whose check sends
    no digest has it summed from its devices, to the same figures."""
    mig = counted("synthetic-k8s-mig-mixed", "b")
    result = mig.check("workloads")
    assert result is not None
    assert result.data["usage"] == {
        "gpus": {"allocated": 0.75, "busy": 0.5, "allocated_idle": 0.25, "unallocated": 7.25},
        "seconds": {"allocated": 2700.0, "busy": 1800.0, "unallocated": 26100.0},
        "idle_allocated_seconds": {"ml-team": 900.0, "inference": 0.0},
        "since": result.data["accounting"]["since"],
    }
    with_digest = build([Fetched("t", mig)]).to_dict()["usage"]
    del result.data["usage"]
    assert build([Fetched("t", mig)]).to_dict()["usage"] == with_digest


def test_no_workloads_check_means_no_usage() -> None:
    plain = run_checks(snapshot_host(snapshot("synthetic-h100-8gpu-healthy")), Config(), ["gpus"])
    assert "usage" not in build([Fetched("t", plain)]).to_dict()


def test_the_audit_command_prints_usage_and_takes_a_price() -> None:
    quiet = Config(serve=ServeConfig(interval_seconds=3600))
    with in_process_agent("synthetic-k8s-gpus-by-uuid", quiet) as agent:
        target = f"127.0.0.1:{agent.grpc_port}"
        out = gpuprobe("audit", "--targets", target, "--json", "--price-per-gpu-hour", "3")
        text = gpuprobe("audit", "--targets", target, "--price-per-gpu-hour", "3")
    usage = out.json()["usage"]
    assert usage["gpus"] == {
        "allocated": 7.0,
        "busy": 6.0,
        "allocated_idle": 1.0,
        "unallocated": 1.0,
    }
    assert usage["price_per_gpu_hour"] == 3.0 and usage["idle_cost"] == 0.0
    assert "usage   GPUs now: 7 allocated (6 busy, 1 idle), 1 unallocated" in text.stdout
    bad = gpuprobe("audit", "--targets", "127.0.0.1:1", "--price-per-gpu-hour", "-1")
    assert bad.returncode == 64 and "not a price of 0 or more: '-1'" in bad.stderr
    assert "Traceback" not in bad.stderr
