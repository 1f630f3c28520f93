"""An independent gRPC client, `buf curl` (npm @bufbuild/buf), finds the API by reflection
and calls health and GetReport on a real `gpuprobe serve`."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from conftest import gpuprobe, require_tool, snapshot
from serving import PASSIVE, serve_process


def buf_curl(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    buf = require_tool("buf")
    return subprocess.run(
        [buf, "curl", "--protocol", "grpc", "--http2-prior-knowledge", *args, f"http://{target}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def call(target: str, method: str, body: str = "{}", *headers: str) -> Any:
    extra = [a for h in headers for a in ("-H", h)]
    out = buf_curl(f"{target}/{method}", "-d", body, *extra)
    assert out.returncode == 0, out.stderr + out.stdout
    return json.loads(out.stdout)


def test_buf_curl_reflection_health_and_get_report() -> None:
    expected = gpuprobe(
        "check", "--json", "--only", ",".join(PASSIVE), "--snapshot", snapshot("synthetic-gpu-lost")
    ).json()
    with serve_process("--snapshot", snapshot("synthetic-gpu-lost"), "--interval", "3600") as agent:
        agent.report_metrics()
        target = agent.grpc_target
        methods = buf_curl(target, "--list-methods")
        assert methods.returncode == 0, methods.stderr
        assert "gpuprobe.v1.NodeDiagnostics/GetReport" in methods.stdout.splitlines()
        assert call(target, "grpc.health.v1.Health/Check") == {"status": "SERVING"}
        assert call(
            target, "grpc.health.v1.Health/Check", '{"service": "gpuprobe.v1.NodeDiagnostics"}'
        ) == {"status": "SERVING"}
        report = call(target, "gpuprobe.v1.NodeDiagnostics/GetReport")["report"]
        refused = buf_curl(f"{target}/gpuprobe.v1.NodeDiagnostics/RunChecks", "-d", "{}")
    assert report["node"] == expected["node"] == "synthetic-gpu-lost"
    assert report["status"] == "STATUS_CRITICAL"
    assert report["agentVersion"]
    # The active checks (storage, NCCL) first run at a random point of their jitter window,
    # which now and then falls within this test's seconds: the first report's passive rounds
    # are what `check --only PASSIVE` reproduces.
    passive = [c["name"] for c in report["checks"] if c["name"] in PASSIVE]
    assert passive == [c["name"] for c in expected["checks"]]
    assert {c["name"] for c in report["checks"]} - set(PASSIVE) <= {"storage", "nccl"}
    gpus = report["checks"][1]
    assert gpus["status"] == "STATUS_CRITICAL"
    assert gpus["summary"] == expected["checks"][1]["summary"]
    assert gpus["findings"] == [
        {
            "code": f["code"],
            "severity": f"SEVERITY_{f['severity']}",
            "message": f["message"],
            "action": f"ACTION_{f['action']}",
            "resource": f["resource"],
        }
        for f in expected["checks"][1]["findings"]
    ]
    assert gpus["data"] == expected["checks"][1]["data"]
    # A guarded RPC without a token on an agent without one: refused.
    assert refused.returncode != 0
    assert json.loads(refused.stdout or refused.stderr)["code"] == "permission_denied"
