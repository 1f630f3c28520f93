"""Concurrent clients against a running agent: each calls GetReport, then scrapes /metrics,
then pauses, for a while; prints the latency percentiles and the error count as JSON.

    python bench/serve_load.py --grpc 127.0.0.1:50051 --metrics 127.0.0.1:9760 \
        --clients 50 --duration 30 --pause 0.05

Each client pauses a random 0.5-1.5 × PAUSE between rounds (clients do not move in
lockstep). Clients are threads spread over several processes, each client with its own gRPC channel
and a fresh HTTP connection per scrape (as Prometheus opens them), so the load generator's
own interpreter lock does not stand in for the agent's latency.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import random
import statistics
import threading
import time
from typing import Any

import grpc

from gpuprobe.v1 import diagnostics_pb2 as pb
from gpuprobe.v1 import diagnostics_pb2_grpc as pb_grpc


def client(
    grpc_target: str, metrics_target: str, until: float, pause: float, out: dict[str, Any]
) -> None:
    """One client's loop; appends its latencies (seconds) and errors to `out`."""
    host, port = metrics_target.rsplit(":", 1)
    rng = random.Random()
    with grpc.insecure_channel(grpc_target) as channel:
        stub = pb_grpc.NodeDiagnosticsStub(channel)
        stub.GetReport(pb.GetReportRequest(), timeout=10)  # connect before timing
        time.sleep(rng.uniform(0, pause))  # clients do not move in lockstep
        while time.monotonic() < until:
            started = time.perf_counter()
            try:
                response = stub.GetReport(pb.GetReportRequest(), timeout=10)
                if not response.report.checks:
                    raise RuntimeError("empty report")
                out["grpc"].append(time.perf_counter() - started)
            except Exception as exc:  # counted, the run goes on
                out["errors"].append(f"GetReport: {exc}")
            started = time.perf_counter()
            try:
                conn = http.client.HTTPConnection(host, int(port), timeout=10)
                conn.request("GET", "/metrics")
                reply = conn.getresponse()
                body = reply.read()
                conn.close()
                if reply.status != 200 or b"gpuprobe_node_status" not in body:
                    raise RuntimeError(f"HTTP {reply.status}")
                out["metrics"].append(time.perf_counter() - started)
            except Exception as exc:
                out["errors"].append(f"/metrics: {exc}")
            time.sleep(rng.uniform(0.5 * pause, 1.5 * pause))


def worker(args: tuple[str, str, int, float, float]) -> dict[str, Any]:
    """A process running `clients` client threads until `until` (a monotonic time)."""
    grpc_target, metrics_target, clients, until, pause = args
    out: dict[str, Any] = {"grpc": [], "metrics": [], "errors": []}
    threads = [
        threading.Thread(target=client, args=(grpc_target, metrics_target, until, pause, out))
        for _ in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def percentiles(samples: list[float]) -> dict[str, float]:
    """Count, p50, p99 and max, in milliseconds."""
    if len(samples) < 2:
        return {"count": len(samples)}
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {
        "count": len(samples),
        "p50_ms": round(cuts[49] * 1000, 2),
        "p99_ms": round(cuts[98] * 1000, 2),
        "max_ms": round(max(samples) * 1000, 2),
    }


def run(
    grpc_target: str,
    metrics_target: str,
    clients: int,
    duration: float,
    pause: float,
    processes: int = 5,
) -> dict[str, Any]:
    """Run the load; the figures as a dict."""
    per = [clients // processes + (i < clients % processes) for i in range(processes)]
    # Every process starts its clock after start-up: the duration is the measured part.
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(processes) as pool:
        until = time.monotonic() + duration + 3.0
        parts = pool.map(worker, [(grpc_target, metrics_target, n, until, pause) for n in per if n])
    merged: dict[str, Any] = {"grpc": [], "metrics": [], "errors": []}
    for part in parts:
        for key in merged:
            merged[key] += part[key]
    return {
        "clients": clients,
        "duration_seconds": duration,
        "pause_seconds": pause,
        "get_report": percentiles(merged["grpc"]),
        "metrics_scrape": percentiles(merged["metrics"]),
        "errors": len(merged["errors"]),
        "first_errors": merged["errors"][:5],
    }


def main() -> None:
    """Parse flags, run, print JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--grpc", required=True, metavar="HOST:PORT")
    parser.add_argument("--metrics", required=True, metavar="HOST:PORT")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--duration", type=float, default=30)
    parser.add_argument("--pause", type=float, default=0.05)
    args = parser.parse_args()
    result = run(args.grpc, args.metrics, args.clients, args.duration, args.pause, args.processes)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
