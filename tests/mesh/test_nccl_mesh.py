"""`gpuprobe mesh --transport nccl` end to end: the real command, through the real client
library, against the API stand-in (tests/kube_workloads.py) with the NCCL mesh's RBAC rendered
from daemonset/mesh-nccl, while the test's control plane plays the MPI Operator, the Job
controller, the scheduler and the kubelets, handing the launcher (or rank 0) a published
2-node nccl-tests output (tests/fixtures/nccl/README.md)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, gpuprobe
from gpuprobe.mesh import nccl_rank
from kube_control_plane import INDEX, Ending, cluster, hostnames
from kube_standin import request_info
from kube_workloads import MESH_TOKEN, WorkloadStandIn, mesh_rules

FIXTURES = ROOT / "tests" / "fixtures" / "nccl"
TWO_NODES = (FIXTURES / "all_reduce_perf-2node-2x8xh100.txt").read_text()
FAILED = (FIXTURES / "nccl-tests-2node-failed-excerpt.txt").read_text()
IB_FAILED = (FIXTURES / "nccl-ib-completion-error-excerpt.txt").read_text()
MPIRUN_EXITED = (FIXTURES / "openmpi-process-exited.txt").read_text()
IMAGE = "ghcr.io/example/nccl-tests:2.23.4-cuda12.8"
TORCH = "nvcr.io/nvidia/pytorch:25.01-py3"
BUSBW = 338.82e9  # the fixture's out-of-place busbw at 8 GiB, in bytes/s
WORDS_2 = (
    "Test NCCL failure common.cu:961 'internal error - please report this issue to the NCCL "
    "developers / '"
)
WORDS_3 = "NCCL WARN socketProgress: Connection closed by remote peer 10.102.0.232<40318>"
IB_WORDS = (
    "NCCL WARN NET/IB : Got completion from peer 10.0.35.1<49189> with error 4, opcode 5327, "
    "len 5327, vendor err 81 (Send)"
)


def healthy_mpi(test: str, pods: list[dict[str, Any]]) -> Ending:
    return Ending(logs={"launcher": TWO_NODES})


def healthy_ranks(test: str, pods: list[dict[str, Any]]) -> Ending:
    return Ending(logs={"rank-0": TWO_NODES, "rank-1": ""})


def mesh(
    api: WorkloadStandIn, *args: str, image: str = IMAGE, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """The real command, with the NCCL mesh's own credentials."""
    out = gpuprobe(
        "mesh",
        "--transport",
        "nccl",
        "--kubeconfig",
        str(api.kubeconfig(MESH_TOKEN)),
        "--nccl-image",
        image,
        *args,
        timeout=timeout,
    )
    return subprocess.CompletedProcess([], out.returncode, out.stdout, out.stderr)


def report(out: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(out.stdout)
    return found


def test_an_mpijob_asks_every_gpu_of_each_named_node_and_the_launchers_table_gives_the_link(
    tmp_path: Path,
) -> None:
    with cluster(tmp_path, healthy_mpi, {"gpu-a": 8, "gpu-b": 8, "gpu-c": 8}, True) as (
        api,
        plane,
    ):
        out = mesh(api, "--nodes", "gpu-a,gpu-b", "--json", "--deadline", "30")
        assert out.returncode == 0, out.stdout + out.stderr
        assert report(out) == {
            "status": "OK",
            "links": [
                {
                    "source": "gpu-a",
                    "target": "gpu-b",
                    "transport": "nccl",
                    "bytes_per_second": BUSBW,
                    "verdict": "OK",
                    "wrong_values": 0,
                }
            ],
            "findings": [],
        }
        ((kind, name),) = api.created
        job = api.stored[(kind, name)]
        assert plane.errors == [] and plane.validation_refused == []
        assert api.left_behind() == []
    assert kind == "MPIJob" and job["apiVersion"] == "kubeflow.org/v2beta1"
    spec = job["spec"]
    assert spec["slotsPerWorker"] == 8
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert spec["runPolicy"]["cleanPodPolicy"] == "Running"
    worker = spec["mpiReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    (container,) = worker["template"]["spec"]["containers"]
    assert container["image"] == IMAGE
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
    terms = worker["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]}
        for n in ("gpu-a", "gpu-b")
    ]
    assert "tolerations" not in worker["template"]["spec"]  # none unless the operator says
    (launcher,) = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"]
    assert launcher["image"] == IMAGE
    assert launcher["command"][:5] == ["mpirun", "--allow-run-as-root", "-np", "16", "-bind-to"]
    assert launcher["command"][-9:] == [
        "all_reduce_perf",
        "-b",
        "8M",
        "-e",
        "8G",
        "-f",
        "2",
        "-g",
        "1",
    ]
    assert "resources" not in launcher  # the launcher asks for no GPU
    workers = sorted((p, n) for p, n in plane.bindings if "-worker-" in p)
    assert [n for _, n in workers] == ["gpu-a", "gpu-b"]  # one worker on each named node


def test_an_indexed_job_runs_one_rank_per_node_and_rank_zero_gives_the_link(
    tmp_path: Path,
) -> None:
    with cluster(tmp_path, healthy_ranks, {"gpu-a": 8, "gpu-b": 8}) as (api, plane):
        out = mesh(api, "--nodes", "gpu-b,gpu-a", "--json", image=TORCH)
        assert out.returncode == 0, out.stdout + out.stderr
        (link,) = report(out)["links"]
        assert (link["source"], link["target"], link["bytes_per_second"]) == (
            "gpu-b",
            "gpu-a",
            BUSBW,
        )
        assert [k for k, _ in api.created] == ["Job", "Service", "ConfigMap"]
        name = api.created[0][1]
        job = api.stored[("Job", name)]
        service = api.stored[("Service", name)]
        program = api.stored[("ConfigMap", name)]
        assert plane.errors == []
        assert api.left_behind() == []
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    assert spec["backoffLimit"] == 0
    pod = spec["template"]["spec"]
    (rank,) = pod["containers"]
    assert rank["image"] == TORCH
    assert rank["command"] == [
        "python3",
        "/opt/gpuprobe/nccl_rank.py",
        "-b",
        "8M",
        "-e",
        "8G",
        "-f",
        "2",
        "-g",
        "8",
    ]
    assert rank["resources"] == {"limits": {"nvidia.com/gpu": "8"}}
    env = {e["name"]: e["value"] for e in rank["env"]}
    assert env == {
        "MASTER_ADDR": f"{name}-0.{name}",
        "MASTER_PORT": "29500",
        "NNODES": "2",
        "NCCL_DEBUG": "WARN",
    }
    assert pod["subdomain"] == service["metadata"]["name"] == name
    assert service["spec"]["clusterIP"] == "None"
    assert program["data"] == {"nccl_rank.py": Path(nccl_rank.__file__).read_text()}
    # Owned by the Job: deleted with it even when gpuprobe cannot delete them itself.
    for owned in (service, program):
        ((ref),) = owned["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == ("Job", name, job["metadata"]["uid"])
    ranks = sorted((p, n) for p, n in plane.bindings)
    assert len(ranks) == 2 and {n for _, n in ranks} == {"gpu-a", "gpu-b"}


def failing_mpi(test: str, pods: list[dict[str, Any]]) -> Ending:
    """The published failed run, its machines renamed to the workers' hostnames."""
    log = FAILED.replace("DisAI-4090-2", f"{test}-worker-0").replace(
        "DisAI-4090-3", f"{test}-worker-1"
    )
    return Ending(logs={"launcher": log + MPIRUN_EXITED}, exit_codes={"launcher": 3})


def test_a_failed_run_names_each_node_with_nccls_own_words(tmp_path: Path) -> None:
    with cluster(tmp_path, failing_mpi, {"gpu-a": 8, "gpu-b": 8}, True) as (api, plane):
        out = mesh(api, "--nodes", "gpu-a,gpu-b", "--json")
        name = api.created[0][1]
        assert api.left_behind() == []
        assert plane.errors == []
    assert out.returncode == 2, out.stdout + out.stderr
    found = report(out)
    (link,) = found["links"]
    # worker-0 (DisAI-4090-2's words) was bound to gpu-a, worker-1 to gpu-b.
    error = f"gpu-a ({name}-worker-0): {WORDS_2}; gpu-b ({name}-worker-1): {WORDS_3}"
    assert link == {
        "source": "gpu-a",
        "target": "gpu-b",
        "transport": "nccl",
        "bytes_per_second": None,
        "verdict": "FAILED",
        "error": error,
    }
    assert found["findings"] == [
        {
            "code": "NCCL_MESH_FAILED",
            "severity": "CRITICAL",
            "message": f"the NCCL all-reduce gpu-a ↔ gpu-b failed: {error}",
            "action": "CHECK_NETWORK",
            "resource": "peer:gpu-a",
        }
    ]


def test_a_launcher_that_cannot_reach_its_workers_is_a_failure_in_its_own_words(
    tmp_path: Path,
) -> None:
    """mpirun's ssh cannot resolve the workers (a published launcher log, its workers renamed
    to this test's): no NCCL words, so the launcher's end and its first error line; the finding
    stays on a node of the pair, not on wherever the launcher ran."""
    log = (FIXTURES / "mpijob-launcher-ssh-unresolved-excerpt.txt").read_text()

    def script(test: str, pods: list[dict[str, Any]]) -> Ending:
        named = log.replace("nccl-tests-worker", f"{test}-worker").replace(
            "nccl-tests.default", f"{test}.gpuprobe"
        )
        return Ending(logs={"launcher": named}, exit_codes={"launcher": 1})

    with cluster(tmp_path, script, {"gpu-a": 8, "gpu-b": 8}, True) as (api, _):
        out = mesh(api, "--nodes", "gpu-a,gpu-b", "--json")
        name = api.created[0][1]
        assert api.left_behind() == []
    assert out.returncode == 2, out.stdout + out.stderr
    (finding,) = report(out)["findings"]
    assert finding["code"] == "NCCL_MESH_FAILED"
    assert finding["resource"] == "peer:gpu-a"
    assert finding["message"] == (
        "the NCCL all-reduce gpu-a ↔ gpu-b failed: the launcher: Error (exit 1): ssh: Could not "
        f"resolve hostname {name}-worker-0.{name}.gpuprobe.svc: Name or service not known"
    )


def per_host(log: str, hosts: dict[str, str]) -> dict[str, str]:
    """A merged log split into each machine's own lines (a pod's log holds only its own),
    the machines renamed to the pods' hostnames."""
    found: dict[str, list[str]] = {new: [] for new in hosts.values()}
    for line in log.splitlines(keepends=True):
        for old, new in hosts.items():
            if line.startswith(old + ":"):
                found[new].append(line.replace(old, new, 1))
    return {host: "".join(lines) for host, lines in found.items()}


def test_a_failed_indexed_run_reads_each_ranks_log(tmp_path: Path) -> None:
    def script(test: str, pods: list[dict[str, Any]]) -> Ending:
        logs = per_host(IB_FAILED, {"kolyoz1": f"{test}-0", "kolyoz2": f"{test}-1"})
        return Ending(
            logs={"rank-0": logs[f"{test}-0"], "rank-1": logs[f"{test}-1"]},
            exit_codes={"rank-1": 1},
        )

    with cluster(tmp_path, script, {"gpu-a": 8, "gpu-b": 8}) as (api, plane):
        out = mesh(api, "--nodes", "gpu-a,gpu-b", "--json", image=TORCH)
        name = api.created[0][1]
        bound = dict(plane.bindings)
        assert api.left_behind() == []
    assert out.returncode == 2, out.stdout + out.stderr
    rank1 = next(n for p, n in bound.items() if p.startswith(f"{name}-1-"))
    (finding,) = report(out)["findings"]
    assert finding["code"] == "NCCL_MESH_FAILED"
    assert finding["resource"] == f"peer:{rank1}"
    assert finding["message"] == (
        f"the NCCL all-reduce gpu-a ↔ gpu-b failed: {rank1} ({name}-1): {IB_WORDS}"
    )


def busy(api: WorkloadStandIn, node: str, gpus: int) -> None:
    """Another team's pod holding GPUs of a node."""
    api.add_pod(
        {
            "metadata": {"name": "trainer-0", "namespace": "ml"},
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": "train",
                        "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ],
            },
            "status": {"phase": "Running"},
        }
    )


def test_pods_the_scheduler_cannot_place_are_not_run_with_its_words(tmp_path: Path) -> None:
    """gpu-b has 4 of its 8 GPUs taken: the test's pod for it waits, the deadline passes, the
    test did not run (never a figure), and the scheduler says why."""
    with cluster(tmp_path, healthy_mpi, {"gpu-a": 8, "gpu-b": 8}, True) as (api, plane):
        busy(api, "gpu-b", 4)
        started = time.monotonic()
        out = mesh(api, "--nodes", "gpu-a,gpu-b", "--json", "--deadline", "3")
        took = time.monotonic() - started
        name = api.created[0][1]
        assert api.left_behind() == []
        assert plane.errors == []
    assert out.returncode == 3, out.stdout + out.stderr
    assert 3 <= took < 20
    # gpu-a's GPUs are the test's other worker's, gpu-b's half another team's.
    fit = (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are "
        "available: 2 No preemption victims found for incoming pod."
    )
    error = (
        f"not run: its pods did not start within 3 s; gpu-b took no pod of it: "
        f"{name}-worker-1 not scheduled: {fit}; the MPI Operator created no launcher: it "
        f"waits for every worker to be ready ({name}-worker-1 not ready)"
    )
    (link,) = report(out)["links"]
    assert link == {
        "source": "gpu-a",
        "target": "gpu-b",
        "transport": "nccl",
        "bytes_per_second": None,
        "verdict": "FAILED",
        "error": error,
    }
    assert report(out)["findings"] == [
        {
            "code": "BANDWIDTH_TEST_UNAVAILABLE",
            "severity": "UNKNOWN",
            "message": f"the NCCL test gpu-a ↔ gpu-b did not run: {error}",
            "action": "NONE",
            "resource": "peer:gpu-b",
        }
    ]


TAINT = {"key": "gpuprobe.io/unhealthy", "value": "XID", "effect": "NoSchedule"}


def test_a_taint_is_tolerated_only_when_the_operator_says_so(tmp_path: Path) -> None:
    with cluster(tmp_path, healthy_ranks, {"gpu-a": 8, "gpu-b": 8}, taints={"gpu-b": [TAINT]}) as (
        api,
        _,
    ):
        refused = mesh(api, "--nodes", "gpu-a,gpu-b", "--json", "--deadline", "2", image=TORCH)
        allowed = mesh(
            api,
            "--nodes",
            "gpu-a,gpu-b",
            "--json",
            "--toleration",
            "gpuprobe.io/unhealthy=XID:NoSchedule",
            image=TORCH,
        )
        second = api.created[3][1]
        tolerations = api.stored[("Job", second)]["spec"]["template"]["spec"]["tolerations"]
        assert api.left_behind() == []
    assert refused.returncode == 3, refused.stdout + refused.stderr
    (link,) = report(refused)["links"]
    assert "1 node(s) had untolerated taint {gpuprobe.io/unhealthy: XID}" in link["error"]
    assert "gpu-b took no pod of it" in link["error"]
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert report(allowed)["links"][0]["bytes_per_second"] == BUSBW
    assert tolerations == [
        {
            "key": "gpuprobe.io/unhealthy",
            "operator": "Equal",
            "value": "XID",
            "effect": "NoSchedule",
        }
    ]


def test_an_image_that_never_pulls_is_not_run_with_the_kubelets_words(tmp_path: Path) -> None:
    pulled = 'failed to pull and unpack image "ghcr.io/example/nccl-tests:nope": not found'

    def script(test: str, pods: list[dict[str, Any]]) -> Ending:
        return Ending(pull_error=pulled)

    with cluster(tmp_path, script, {"gpu-a": 8, "gpu-b": 8}) as (api, _):
        out = mesh(api, "--nodes", "gpu-a,gpu-b", "--json", "--deadline", "2")
        assert api.left_behind() == []
    assert out.returncode == 3
    (link,) = report(out)["links"]
    assert link["error"].startswith("not run: its pods did not start within 2 s: ")
    assert f"waits: ErrImagePull: {pulled}" in link["error"]
    assert report(out)["findings"][0]["code"] == "BANDWIDTH_TEST_UNAVAILABLE"


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_and_sigterm_delete_every_object(
    tmp_path: Path, signum: signal.Signals, status: int
) -> None:
    def hold(test: str, pods: list[dict[str, Any]]) -> Ending:
        return Ending(hold=True)

    with cluster(tmp_path, hold, {"gpu-a": 8, "gpu-b": 8}) as (api, plane):
        command = [
            sys.executable,
            "-m",
            "gpuprobe",
            "mesh",
            "--transport",
            "nccl",
            "--kubeconfig",
            str(api.kubeconfig(MESH_TOKEN)),
            "--nodes",
            "gpu-a,gpu-b",
            "--nccl-image",
            TORCH,
        ]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_for(lambda: len(plane.bindings) == 2 and len(api.created) == 3)
            process.send_signal(signum)
            _, err = process.communicate(timeout=30)
        finally:
            process.kill()
        assert process.returncode == status, err
        assert api.left_behind() == []
        # The Job with its pods (Background: never the API's default for Jobs, Orphan).
        assert ("Job", api.created[0][1], "Background") in api.deleted


def wait_for(done: Callable[[], bool], seconds: float = 30) -> None:
    end = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def test_a_node_that_fails_with_every_partner_is_named(tmp_path: Path) -> None:
    """Three GPU nodes with agents (a fourth without one is not tested): every pair with gpu-c
    fails, the partner's words first; the mesh's rule names gpu-c, which failed with both
    partners while they measured fine with each other."""

    def script(test: str, pods: list[dict[str, Any]]) -> Ending:
        hosts = hostnames(pods)
        if "gpu-c" not in hosts.values():
            return Ending(logs={"rank-0": TWO_NODES, "rank-1": ""})
        partner = next(h for h, n in hosts.items() if n != "gpu-c")
        culprit = next(h for h, n in hosts.items() if n == "gpu-c")
        log = FAILED.replace("DisAI-4090-2", partner).replace("DisAI-4090-3", culprit)
        logs = per_host(log, {partner: partner, culprit: culprit})
        rank = {p["spec"]["hostname"]: p["metadata"]["labels"][INDEX] for p in pods}
        return Ending(
            logs={f"rank-{rank[h]}": text for h, text in logs.items()},
            exit_codes={f"rank-{rank[partner]}": 1},
        )

    with cluster(tmp_path, script, {"gpu-a": 8, "gpu-b": 8, "gpu-c": 8, "gpu-d": 8}) as (
        api,
        _,
    ):
        for node in ("gpu-a", "gpu-b", "gpu-c"):
            agent(api, node)
        out = mesh(api, "--json", image=TORCH)
        assert api.left_behind() == []
    assert out.returncode == 2, out.stdout + out.stderr
    found = report(out)
    verdicts = {
        tuple(sorted((link["source"], link["target"]))): link["verdict"] for link in found["links"]
    }
    assert verdicts == {
        ("gpu-a", "gpu-b"): "OK",
        ("gpu-a", "gpu-c"): "FAILED",
        ("gpu-b", "gpu-c"): "FAILED",
    }
    assert len(found["links"]) == 3  # gpu-d runs no agent: not tested
    assert [(f["code"], f["resource"]) for f in found["findings"]] == [
        ("NCCL_MESH_FAILED", "peer:gpu-c"),
        ("NCCL_MESH_FAILED", "peer:gpu-c"),
    ]
    for finding in found["findings"]:
        assert "(gpu-c failed with every partner it was tested with)" in finding["message"]


def agent(api: WorkloadStandIn, node: str) -> None:
    """A running gpuprobe agent pod on a node, as the DaemonSet makes it."""
    api.add_pod(
        {
            "metadata": {
                "name": f"gpuprobe-{node}",
                "namespace": "gpuprobe",
                "labels": {
                    "app.kubernetes.io/name": "gpuprobe",
                    "app.kubernetes.io/component": "node-agent",
                },
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": "gpuprobe", "image": "gpuprobe:0.1.0"}],
            },
            "status": {"phase": "Running", "podIP": "10.244.1.7"},
        }
    )


def granted(rules: list[Any]) -> set[tuple[str, str, str]]:
    return {
        (g, r, v) for rule in rules for g in rule.groups for r in rule.resources for v in rule.verbs
    }


def test_an_mpijob_no_operator_acts_on_is_not_run(tmp_path: Path) -> None:
    """The CRD is installed, the operator is not running: no pod is ever made; the test did
    not run, and its owner's events (none) are read for a reason."""
    with cluster(tmp_path, healthy_mpi, {"gpu-a": 8, "gpu-b": 8}, True, operator_running=False) as (
        api,
        _,
    ):
        out = mesh(api, "--nodes", "gpu-a,gpu-b", "--json", "--deadline", "1")
        name = api.created[0][1]
        assert api.left_behind() == []
    assert out.returncode == 3
    (link,) = report(out)["links"]
    assert link["error"] == (
        "not run: its pods did not start within 1 s; gpu-a, gpu-b took no pod of it: no pod "
        f"was created: the MPI Operator (is it running?) did not act on MPIJob {name}"
    )


def test_the_mesh_nccl_role_grants_exactly_what_the_runs_use(tmp_path: Path) -> None:
    """Every permission of daemonset/mesh-nccl is used by a run (MPIJob, Indexed Job, the
    nodes found through the agents, an MPIJob no operator acts on), and nothing a run does
    needs more."""
    used: set[tuple[str, str, str]] = set()
    for operator, running, script in (
        (True, True, healthy_mpi),
        (False, True, healthy_ranks),
        (True, False, healthy_mpi),
    ):
        where = tmp_path / f"{operator}-{running}"
        where.mkdir()
        with cluster(
            where, script, {"gpu-a": 8, "gpu-b": 8}, operator, operator_running=running
        ) as (api, _):
            agent(api, "gpu-a")
            agent(api, "gpu-b")
            wanted = 0 if running else 3
            assert mesh(api, "--json", "--deadline", "2", image=TORCH).returncode == wanted
            named = mesh(api, "--nodes", "gpu-a,gpu-b", "--deadline", "2", image=TORCH)
            assert named.returncode == wanted
            for _, method, path, code in api.requests:
                if path.count("/") > 3 or path.startswith("/api/v1/nodes"):
                    info = request_info(method, path)
                    assert code != 403, (method, path)
                    used.add((info.group, info.rbac_resource, info.verb))
    assert used == granted(mesh_rules())


def test_the_agents_account_may_not_run_it(tmp_path: Path) -> None:
    with cluster(tmp_path, healthy_ranks, {"gpu-a": 8, "gpu-b": 8}) as (api, _):
        out = gpuprobe(
            "mesh",
            "--transport",
            "nccl",
            "--kubeconfig",
            str(api.kubeconfig()),
            "--nodes",
            "gpu-a,gpu-b",
            "--nccl-image",
            TORCH,
        )
        assert api.left_behind() == []
    assert (out.returncode, out.stdout) == (64, "")
    assert out.stderr.startswith("gpuprobe: the API server did not create jobs.batch ")
    assert "403: jobs.batch is forbidden" in out.stderr
    assert out.stderr.count("\n") == 1
