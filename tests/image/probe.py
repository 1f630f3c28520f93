"""Ask a started agent what the kubelet and its callers ask, until each answers or the
deadline passes; print one JSON object. Run inside the pod's network namespace
(`ip netns exec NS python probe.py ...`), so every call stays on that namespace's loopback.

    probe.py --metrics PORT --grpc PORT --health-service NAME --deadline SECONDS

- liveness: GET /healthz on the metrics port (the DaemonSet's livenessProbe);
- readiness: gRPC health of the named service SERVING (its readinessProbe);
- GET /metrics: the exposition, once it renders the first report;
- GetReport (gpuprobe.v1.NodeDiagnostics) through grpcio and the generated stubs.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.error
import urllib.request
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gpuprobe.v1 import diagnostics_pb2 as pb
from gpuprobe.v1 import diagnostics_pb2_grpc as pb_grpc


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--metrics", type=int, required=True)
    parser.add_argument("--grpc", type=int, required=True)
    parser.add_argument("--health-service", required=True)
    parser.add_argument("--deadline", type=float, required=True)
    args = parser.parse_args()
    started = time.monotonic()
    found: dict[str, Any] = {}
    channel = grpc.insecure_channel(f"127.0.0.1:{args.grpc}")
    while time.monotonic() - started < args.deadline:
        try:
            if "healthz" not in found:
                status, body = http_get(args.metrics, "/healthz")
                if status == 200:
                    found["healthz"] = {"status": status, "body": body, "after": elapsed(started)}
            if "ready" not in found:
                health = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=args.health_service), timeout=5
                )
                if health.status == health_pb2.HealthCheckResponse.SERVING:
                    found["ready"] = {"after": elapsed(started)}
            if "ready" in found and "report" not in found:
                response = pb_grpc.NodeDiagnosticsStub(channel).GetReport(
                    pb.GetReportRequest(), timeout=10
                )
                report = response.report
                found["report"] = {
                    "node": report.node,
                    "status": pb.Status.Name(report.status),
                    "checks": {c.name: pb.Status.Name(c.status) for c in report.checks},
                    "after": elapsed(started),
                }
            if "report" in found and "metrics" not in found:
                status, body = http_get(args.metrics, "/metrics")
                if status == 200 and "gpuprobe_node_status" in body:
                    found["metrics"] = {
                        "status": status,
                        "families": sorted(
                            {
                                line.split()[2]
                                for line in body.splitlines()
                                if line.startswith("# TYPE gpuprobe_")
                            }
                        ),
                        "after": elapsed(started),
                    }
            if {"healthz", "ready", "report", "metrics"} <= set(found):
                break
        except (OSError, grpc.RpcError):
            pass
        time.sleep(0.1)
    channel.close()
    print(json.dumps(found))


def elapsed(started: float) -> float:
    return round(time.monotonic() - started, 3)


if __name__ == "__main__":
    main()
