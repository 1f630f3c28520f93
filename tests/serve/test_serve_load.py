"""Under load with a hung check: 50 concurrent clients call GetReport and scrape /metrics for
30 s while NVML hangs inside the gpus check; no call fails and p99 stays under 50 ms.

The clients are bench/serve_load.py (threads over ten processes, each client with its own
channel, pausing a random 0.5-1.5 s between rounds: about 50 GetReport calls and 50 scrapes
a second in all)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, snapshot
from gpuprobe.client import Client
from serving import serve_process

# Heavy: one xdist worker runs these one after another, so they never load the machine
# together (a latency bound would measure the other test).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("heavy")]


def sample(text: str, series: str) -> float:
    (line,) = [x for x in text.splitlines() if x.startswith(series + " ")]
    return float(line.split()[-1])


def test_fifty_clients_for_30_s_while_a_check_hangs(tmp_path: Path) -> None:
    cfg = tmp_path / "gpuprobe.yaml"
    cfg.write_text("checks:\n  deadline_seconds: 2\n")
    with serve_process(
        "--snapshot", snapshot("synthetic-nvml-hang"), "--config", str(cfg), "--interval", "1"
    ) as agent:
        agent.report_metrics()
        with Client(agent.grpc_target) as client:
            gpus = client.get_report().check("gpus")
        assert gpus is not None and [f.code for f in gpus.findings] == ["CHECK_TIMEOUT"]
        out = subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / "serve_load.py"),
                "--grpc",
                agent.grpc_target,
                "--metrics",
                f"127.0.0.1:{agent.metrics_port}",
                "--clients",
                "50",
                "--processes",
                "10",
                "--duration",
                "30",
                "--pause",
                "1.0",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        metrics = agent.metrics()
    assert result["errors"] == 0, result["first_errors"]
    for kind in ("get_report", "metrics_scrape"):
        assert result[kind]["count"] >= 30 * 50 * 0.6, result
        assert result[kind]["p99_ms"] < 50, result
    # Round after round reported the hang while the clients were served.
    assert sample(metrics, 'gpuprobe_check_timeouts_total{check="gpus"}') >= 5
    assert sample(metrics, 'gpuprobe_check_status{check="gpus"}') == 3
