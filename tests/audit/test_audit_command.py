"""The real `gpuprobe audit` process against real agents on loopback, each serving another
snapshot (healthy, remap pending, a driver outlier served by a `gpuprobe serve` process, a
lost GPU), plus a dead port, a hung agent, an auth proxy that wants a token and an mTLS agent:
the report names every outlier and every failure, exactly, and completes within its deadline.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from certs import make_pki
from conftest import ROOT, gpuprobe, snapshot
from fleet import fleet
from gpuprobe.client import Client
from gpuprobe.config import Config, ServeConfig
from gpuprobe.report import format_time
from grpc_standins import hangs, report_of, standin, wants_token
from serving import PASSIVE, in_process_agent, serve_process

DEADLINE = 1.0
TOKEN = "s3cret-audit-token"
H100 = "NVIDIA H100 80GB HBM3"
QUIET = Config(serve=ServeConfig(interval_seconds=3600))  # no new round during a test


@dataclass
class Cluster:
    """The targets of the audit, by role, and each reachable node's report time."""

    healthy: str
    remap: str
    driver_old: str
    lost: str
    dead: str
    slow: str
    proxy: str
    mtls: str
    times: dict[str, str]
    token_file: str
    tmp: Path

    @property
    def targets(self) -> str:
        return ",".join(
            [
                self.healthy,
                self.remap,
                self.driver_old,
                self.lost,
                self.dead,
                self.slow,
                self.proxy,
                self.mtls,
            ]
        )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("audit")
    pki = make_pki(tmp)
    token_file = tmp / "token"
    token_file.write_text(TOKEN + "\n")
    release = threading.Event()
    with contextlib.ExitStack() as stack:
        stack.callback(release.set)
        agents = {
            name: stack.enter_context(in_process_agent(name, config=QUIET))
            for name in [
                "synthetic-h100-8gpu-healthy",
                "synthetic-remap-pending",
                "synthetic-gpu-lost",
            ]
        }
        # The passive checks only: an active check's first round falls at a random point of
        # its jitter window, now and then within these tests' seconds.
        served = stack.enter_context(
            serve_process(
                "--snapshot",
                snapshot("synthetic-driver-too-old"),
                "--interval",
                "3600",
                "--only",
                ",".join(PASSIVE),
            )
        )
        slow = stack.enter_context(standin(hangs(release)))
        proxy = stack.enter_context(
            standin(wants_token(TOKEN, report_of("synthetic-h100-8gpu-healthy", "behind-proxy")))
        )
        mtls = stack.enter_context(
            in_process_agent(
                config=QUIET,
                tls_cert=pki.server_cert,
                tls_key=pki.server_key,
                tls_client_ca=pki.ca,
            )
        )
        times = {}
        for name, agent in agents.items():
            report = agent.store.current().report
            assert report is not None
            times[name] = format_time(report.time)
        with Client(served.grpc_target) as client:
            times["synthetic-driver-too-old"] = format_time(client.get_report().time)
        yield Cluster(
            healthy=f"127.0.0.1:{agents['synthetic-h100-8gpu-healthy'].grpc_port}",
            remap=f"127.0.0.1:{agents['synthetic-remap-pending'].grpc_port}",
            driver_old=served.grpc_target,
            lost=f"127.0.0.1:{agents['synthetic-gpu-lost'].grpc_port}",
            dead=f"127.0.0.1:{closed_port()}",
            slow=slow.target,
            proxy=proxy.target,
            mtls=f"127.0.0.1:{mtls.grpc_port}",
            times=times,
            token_file=str(token_file),
            tmp=tmp,
        )


def reachable(
    target: str, node: str, time: str, status: str = "OK", **changes: Any
) -> dict[str, Any]:
    """A reachable node's entry: a healthy 8-GPU H100 node unless `changes` say otherwise."""
    entry: dict[str, Any] = {
        "target": target,
        "node": node,
        "reachable": True,
        "status": status,
        "failure": None,
        "reason": None,
        "findings": [],
        "facts": {
            "driver_version": "550.54.15",
            "cuda_driver_version": "12.4",
            "amdgpu_version": None,
            "rocm_version": None,
            "gpu_model": H100,
            "gpu_count": "8",
            "mig_layout": "disabled",
            "toolkit_mode": "not installed",
            "runtime_default": None,
        },
        "counts": {
            "gpus": 8,
            "healthy_gpus": 8,
            "idle_gpus": 0,
            "mig_slices": 0,
            "time_slicing_units": 0,
        },
        "agent_version": "0.1.0",
        "time": time,
    }
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(entry[key], dict):
            entry[key] = {**entry[key], **value}
        else:
            entry[key] = value
    return entry


def unreachable(target: str, failure: str, reason: str) -> dict[str, Any]:
    return {
        "target": target,
        "node": None,
        "reachable": False,
        "status": "UNKNOWN",
        "failure": failure,
        "reason": reason,
        "findings": [],
        "facts": None,
        "counts": None,
        "agent_version": None,
        "time": None,
    }


def test_the_cluster_report_names_every_outlier_and_failure_in_time(cluster: Cluster) -> None:
    started = time.monotonic()
    out = gpuprobe("audit", "--targets", cluster.targets, "--json", "--deadline", str(DEADLINE))
    elapsed = time.monotonic() - started
    assert out.returncode == 2, out.stderr
    assert out.stderr == ""
    t = cluster.times
    assert out.json() == {
        "status": "CRITICAL",
        "nodes": [
            reachable(
                cluster.healthy, "synthetic-h100-8gpu-healthy", t["synthetic-h100-8gpu-healthy"]
            ),
            reachable(
                cluster.remap,
                "synthetic-remap-pending",
                t["synthetic-remap-pending"],
                "CRITICAL",
                findings=[
                    {
                        "check": "gpus",
                        "code": "ROW_REMAP_PENDING",
                        "severity": "CRITICAL",
                        "message": "GPU 3 (0000:5d:00.0) has 2 uncorrectable rows remapped; a GPU "
                        "reset is pending to activate the remapping: drain the GPU and reset it",
                        "action": "RESET_GPU",
                        "resource": "gpu:3:GPU-5f1c0003-8e2b-4c1d-9a7e-000000000003",
                    }
                ],
                counts={"healthy_gpus": 7},
            ),
            reachable(
                cluster.driver_old,
                "synthetic-driver-too-old",
                t["synthetic-driver-too-old"],
                facts={"driver_version": "535.104.05", "cuda_driver_version": "12.2"},
            ),
            reachable(
                cluster.lost,
                "synthetic-gpu-lost",
                t["synthetic-gpu-lost"],
                "CRITICAL",
                findings=[
                    {
                        "check": "gpus",
                        "code": "GPU_LOST",
                        "severity": "CRITICAL",
                        "message": "GPU 5 is lost: NVML reports GpuIsLost (fallen off the bus or "
                        "hung). Reboot the node; inspect the GPU if it happens again",
                        "action": "REBOOT_NODE",
                        "resource": "gpu:5:GPU-5f1c0005-8e2b-4c1d-9a7e-000000000005",
                    }
                ],
                facts={"gpu_count": "7"},
                counts={"healthy_gpus": 7},
            ),
            unreachable(
                cluster.dead, "refused", "connection refused: nothing listens at the address"
            ),
            unreachable(
                cluster.slow,
                "timeout",
                "no answer within 1 s (the agent is down, hung or filtered)",
            ),
            unreachable(
                cluster.proxy,
                "unauthorised",
                "refused our credentials (UNAUTHENTICATED): bearer token required",
            ),
            unreachable(
                cluster.mtls,
                "tls",
                "the agent closed the connection at setup: it serves TLS: call it with --tls-ca",
            ),
        ],
        "skew": [
            {
                "field": "driver_version",
                "majority": "550.54.15",
                "nodes": 4,
                "outliers": {"535.104.05": ["synthetic-driver-too-old"]},
            },
            {
                "field": "cuda_driver_version",
                "majority": "12.4",
                "nodes": 4,
                "outliers": {"12.2": ["synthetic-driver-too-old"]},
            },
            {"field": "gpu_model", "majority": H100, "nodes": 4, "outliers": {}},
            {
                "field": "gpu_count",
                "majority": "8",
                "nodes": 4,
                "outliers": {"7": ["synthetic-gpu-lost"]},
            },
            {"field": "mig_layout", "majority": "disabled", "nodes": 4, "outliers": {}},
            {"field": "toolkit_mode", "majority": "not installed", "nodes": 4, "outliers": {}},
        ],
        "totals": {
            "nodes": 8,
            "reachable_nodes": 4,
            "unreachable_nodes": 4,
            "healthy_nodes": 2,
            "gpus": 32,
            "healthy_gpus": 30,
            "idle_gpus": 0,
            "mig_slices": 0,
            "time_slicing_units": 0,
        },
    }
    # The hung agent costs its deadline, no more: the whole audit (a Python process
    # start included) ends soon after one deadline.
    assert DEADLINE <= elapsed < DEADLINE + 2.5, elapsed


def test_the_human_report_and_fail_on(cluster: Cluster) -> None:
    out = gpuprobe("audit", "--targets", cluster.targets, "--deadline", str(DEADLINE))
    assert out.returncode == 2
    lines = out.stdout.splitlines()
    assert lines[0] == "cluster CRITICAL  8 targets: 4 reachable, 4 unreachable, 2 healthy"
    assert (
        "  driver_version       550.54.15 on 3 of 4  OUTLIERS 535.104.05: synthetic-driver-too-old"
        in lines
    )
    assert "  gpu_count            8 on 3 of 4  OUTLIERS 7: synthetic-gpu-lost" in lines
    assert any(
        line.startswith("UNKNOWN ")
        and line.endswith(
            f"{cluster.slow}  unreachable (timeout): no answer within 1 s (the agent is down, "
            "hung or filtered)"
        )
        for line in lines
    )
    assert lines[-1] == (
        "totals  8 nodes (4 reachable, 2 healthy), 32 GPUs (30 healthy, 0 idle), "
        "0 MIG slices, 0 time-slicing units"
    )
    # A cluster with nothing CRITICAL: the driver outlier alone, and a dead target.
    calm = f"{cluster.healthy},{cluster.driver_old},{cluster.dead}"
    assert gpuprobe("audit", "--targets", calm).returncode == 3  # UNKNOWN: the dead target
    # under --fail-on a dead target still fails the gate; the driver outlier alone does not
    assert gpuprobe("audit", "--targets", calm, "--fail-on", "WARNING").returncode == 3
    assert gpuprobe("audit", "--targets", calm, "--fail-on", "CRITICAL").returncode == 3
    up = f"{cluster.healthy},{cluster.driver_old}"
    assert gpuprobe("audit", "--targets", up, "--fail-on", "WARNING").returncode == 0
    assert gpuprobe("audit", "--targets", cluster.lost, "--fail-on", "critical").returncode == 2
    assert gpuprobe("audit", "--targets", f"{cluster.healthy},{cluster.driver_old}").returncode == 0


def test_the_token_and_the_client_certificate_open_the_guarded_targets(cluster: Cluster) -> None:
    out = gpuprobe(
        "audit",
        "--targets",
        f"{cluster.proxy},{cluster.healthy}",
        "--json",
        "--token-file",
        cluster.token_file,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert [(n["node"], n["reachable"]) for n in out.json()["nodes"]] == [
        ("behind-proxy", True),
        ("synthetic-h100-8gpu-healthy", True),
    ]
    pki = cluster.tmp
    out = gpuprobe(
        "audit",
        "--targets",
        cluster.mtls,
        "--json",
        "--tls-ca",
        str(pki / "ca.crt"),
        "--tls-cert",
        str(pki / "client.crt"),
        "--tls-key",
        str(pki / "client.key"),
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert [(n["node"], n["reachable"]) for n in out.json()["nodes"]] == [
        ("synthetic-h100-8gpu-healthy", True)
    ]
    # TLS toward a plaintext agent: named as such.
    out = gpuprobe("audit", "--targets", cluster.healthy, "--json", "--tls-ca", str(pki / "ca.crt"))
    node = out.json()["nodes"][0]
    assert (out.returncode, node["failure"]) == (3, "tls")
    assert node["reason"].startswith("it does not speak TLS: call it without --tls-ca")


def test_dns_discovery_through_the_system_resolver(cluster: Cluster) -> None:
    port = cluster.healthy.rsplit(":", 1)[1]
    out = gpuprobe("audit", "--targets", f"dns:localhost:{port}", "--json")
    # /etc/hosts names localhost 127.0.0.1 (and ::1 where it lists it: nothing listens there).
    nodes = {n["target"]: (n["node"], n["failure"]) for n in out.json()["nodes"]}
    assert nodes[f"127.0.0.1:{port}"] == ("synthetic-h100-8gpu-healthy", None)
    assert set(nodes) <= {f"127.0.0.1:{port}", f"[::1]:{port}"}
    if f"[::1]:{port}" in nodes:
        assert nodes[f"[::1]:{port}"] == (None, "refused")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--targets", "node-a"],
            "gpuprobe: --targets: 'node-a' is not HOST:PORT or dns:NAME:PORT",
        ),
        (["--targets", ""], "gpuprobe: --targets names no agent"),
        (
            ["--targets", "a:1", "--token-file", "/nonexistent/token"],
            "gpuprobe: --token-file /nonexistent/token: No such file or directory",
        ),
        (
            ["--targets", "a:1", "--tls-cert", str(ROOT / "README.md")],
            f"gpuprobe: --tls-cert {ROOT / 'README.md'}: not a PEM file",
        ),
        (
            ["--targets", "a:1", "--deadline", "0"],
            "gpuprobe: argument --deadline: must be above 0: 0 (see gpuprobe audit --help)",
        ),
        (
            # past gRPC's range a deadline is already expired: healthy agents would time out
            ["--targets", "a:1", "--deadline", "1e10"],
            "gpuprobe: argument --deadline: at most 3600 s, not 1e10 (see gpuprobe audit --help)",
        ),
        (
            ["--targets", "a:1", "--deadline", "3600.5"],
            "gpuprobe: argument --deadline: at most 3600 s, not 3600.5 (see gpuprobe audit --help)",
        ),
        (
            ["--targets", "a:1", "--concurrency", "0"],
            "gpuprobe: argument --concurrency: must be at least 1: 0 (see gpuprobe audit --help)",
        ),
        (
            ["--targets", "a:1", "--fail-on", "UNKNOWN"],
            "gpuprobe: argument --fail-on: WARNING or CRITICAL, not 'UNKNOWN' "
            "(see gpuprobe audit --help)",
        ),
        (
            [],  # no targets, and no Kubernetes access to find the agents through
            "gpuprobe: audit: give --targets, or --kubeconfig (or run in a pod with a service "
            "account) to find the agents through the API server",
        ),
    ],
)
def test_usage_errors_are_one_line_and_exit_64(args: list[str], message: str) -> None:
    out = gpuprobe("audit", *args)
    # Every usage error points at the command's help, whatever found it.
    if not message.endswith(" (see gpuprobe audit --help)"):
        message += " (see gpuprobe audit --help)"
    assert (out.returncode, out.stdout, out.stderr) == (64, "", message + "\n")


def test_the_longest_deadline_is_accepted() -> None:
    """3600 s is within gRPC's range: a dead port is refused at once, not timed out."""
    out = gpuprobe("audit", "--targets", f"127.0.0.1:{closed_port()}", "--deadline", "3600")
    assert (out.returncode, out.stderr) == (3, "")
    assert "unreachable (refused)" in out.stdout


def test_an_audit_of_a_fleet_asked_a_few_at_a_time() -> None:
    """32 agents in one process (two snapshots dealt in turn), asked 8 at a time."""
    snapshots = [snapshot("synthetic-h100-8gpu-healthy"), snapshot("synthetic-driver-too-old")]
    with fleet(snapshots, 32, node_prefix="gpu-node-") as agents:
        out = gpuprobe(
            "audit",
            "--targets",
            ",".join(a.target for a in agents),
            "--json",
            "--concurrency",
            "8",
        )
    report = out.json()
    assert out.returncode == 0, out.stderr
    assert [n["target"] for n in report["nodes"]] == [a.target for a in agents]
    assert [n["node"] for n in report["nodes"]] == [f"gpu-node-{i:04d}" for i in range(32)]
    # 16 nodes each: a tie, won by the value of the first node.
    assert report["skew"][0] == {
        "field": "driver_version",
        "majority": "550.54.15",
        "nodes": 32,
        "outliers": {"535.104.05": [f"gpu-node-{i:04d}" for i in range(1, 32, 2)]},
    }
    assert report["totals"]["gpus"] == 256
    assert report["totals"]["healthy_nodes"] == 32
