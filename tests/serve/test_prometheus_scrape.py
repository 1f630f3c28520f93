"""A real Prometheus (Debian's package, on loopback, with a throw-away config and data dir)
scrapes a real `gpuprobe serve`, and PromQL through its HTTP API returns the agent's series."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conftest import require_tool, snapshot
from serving import serve_process, wait_for

# Heavy: one xdist worker runs these one after another, so they never load the machine
# together (a latency bound would measure the other test).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("heavy")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def prometheus(scrape_port: int) -> Iterator[str]:
    """Prometheus scraping 127.0.0.1:`scrape_port` every second; yields its base URL."""
    binary = require_tool("prometheus")
    workdir = Path(tempfile.mkdtemp(prefix="gpuprobe-prom-"))
    config = workdir / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: gpuprobe\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{scrape_port}']\n"
    )
    port = free_port()
    log = (workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)


def query(base: str, promql: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.load(response)
    except OSError:
        return []  # not up yet
    assert body["status"] == "success", body
    return body["data"]["result"]  # type: ignore[no-any-return]


def test_prometheus_scrapes_the_agent_and_promql_finds_the_finding() -> None:
    with (
        serve_process("--snapshot", snapshot("synthetic-gpu-lost"), "--interval", "3600") as agent,
        prometheus(agent.metrics_port) as base,
    ):
        agent.report_metrics()
        lost = wait_for(
            lambda: query(base, 'gpuprobe_finding{code="GPU_LOST"} == 1'), timeout=60, every=0.5
        )
        up = query(base, 'up{job="gpuprobe"}')
        gpus = query(base, "gpuprobe_gpus")
        status = query(base, "max by (check) (gpuprobe_check_status) >= 2")
    assert [r["metric"] for r in lost] == [
        {
            "__name__": "gpuprobe_finding",
            "action": "REBOOT_NODE",
            "check": "gpus",
            "code": "GPU_LOST",
            "instance": f"127.0.0.1:{agent.metrics_port}",
            "job": "gpuprobe",
            "resource": "gpu:5:GPU-5f1c0005-8e2b-4c1d-9a7e-000000000005",
            "severity": "CRITICAL",
        }
    ]
    assert [r["value"][1] for r in up] == ["1"]
    assert [r["value"][1] for r in gpus] == ["8"]
    assert [(r["metric"], r["value"][1]) for r in status] == [({"check": "gpus"}, "2")]
