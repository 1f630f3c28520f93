"""bench/recorded_fleet.py, the fleet the audit benchmark meets: real agents' recorded
answers, each loopback address answering as its own node, and nothing but GetReport."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from conftest import ROOT, snapshot
from gpuprobe.audit.run import AuditOptions, audit
from gpuprobe.targets import parse_targets

# One fleet for the module's tests, on one worker: a fleet per worker would be two on the
# same addresses.
pytestmark = pytest.mark.xdist_group("recorded-fleet")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.1.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def fleet() -> Iterator[dict[str, object]]:
    port = free_port()
    child = subprocess.Popen(
        [
            *(sys.executable, str(ROOT / "bench" / "recorded_fleet.py")),
            *("--count", "6", "--processes", "2", "--port", str(port)),
            *("--snapshot", snapshot("synthetic-h100-8gpu-healthy")),
            *("--snapshot", snapshot("synthetic-h100-8gpu-idle")),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        started = json.loads(child.stdout.readline())
        yield {**started, "port": port}
    finally:
        child.stdin.close()  # the fleet serves until its stdin closes
        try:
            code = child.wait(20)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise
    assert code == 0


def test_each_address_answers_as_its_own_node_with_a_recorded_report(
    fleet: dict[str, object],
) -> None:
    targets = Path(str(fleet["targets_file"])).read_text().split()
    assert targets == [f"127.1.0.{i}:{fleet['port']}" for i in range(1, 7)]
    report = audit(AuditOptions(parse_targets(f"@{fleet['targets_file']}"), deadline=30))
    assert [(n.target, n.node, n.reachable) for n in report.nodes] == [
        (t, f"fleet-node-{i:06d}", True) for i, t in enumerate(targets)
    ]
    # the two snapshots' answers in turn: the healthy node's GPUs busy, the idle one's idle
    assert [n.counts.idle_gpus if n.counts else None for n in report.nodes] == [0, 8] * 3
    assert report.totals.counts.gpus == 48


def test_it_answers_getreport_and_nothing_else(fleet: dict[str, object]) -> None:
    with (
        grpc.insecure_channel(f"127.1.0.2:{fleet['port']}") as channel,
        pytest.raises(grpc.RpcError) as refused,
    ):
        channel.unary_unary("/gpuprobe.v1.NodeDiagnostics/RunChecks")(b"", timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert refused.value.details() == "Method not found!"


def test_a_second_fleet_on_the_same_port_refuses_to_start(fleet: dict[str, object]) -> None:
    second = subprocess.run(
        [
            *(sys.executable, str(ROOT / "bench" / "recorded_fleet.py")),
            *("--count", "6", "--processes", "1", "--port", str(fleet["port"])),
            *("--snapshot", snapshot("synthetic-h100-8gpu-healthy")),
        ],
        input="",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert second.returncode != 0
    assert f"recorded_fleet: cannot listen on 127.1.0.1:{fleet['port']}" in second.stderr
