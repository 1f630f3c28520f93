"""GetReport, /metrics and /healthz latency of `gpuprobe serve` while attackers hold streams
and connections open, against the same agent unloaded, in one run (loopback only).

    python bench/attack_load.py --calls 400 --reflection-streams 40 --idle-connections 300
    python bench/attack_load.py --calls 200 --reflection-streams 0 --idle-connections 312 \
        --attacker-addresses 39 [--slowloris]

Starts the agent on the 8-GPU snapshot and measures GetReport (a fresh channel, one call at a
time), /metrics and /healthz (a fresh connection each, from 127.0.0.1) quiet; then an attacker
without a token holds `--reflection-streams` server-reflection streams open from 127.0.0.1 and
a second one `--idle-connections` TCP connections to the metrics port, spread over
`--attacker-addresses` source addresses (127.0.0.2 and up), reopening each the agent closes;
with `--slowloris` each of them sends a request head one byte every half second, never ending
it. The same calls are timed again. Prints p50/p99 of each, the loaded/quiet ratios, the share
of calls answered (200), how many streams and connections the agent admitted, and its thread
count and resident memory at the peak, as JSON. `--python` runs another checkout's agent (e.g.
before a fix).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from agents import serve
from gpuprobe.v1 import diagnostics_pb2 as pb
from gpuprobe.v1 import diagnostics_pb2_grpc as pb_grpc

ATTACKER = "127.0.0.2"


def percentiles(samples: list[float]) -> dict[str, float]:
    """p50 and p99 in milliseconds."""
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {"p50_ms": round(cuts[49] * 1e3, 2), "p99_ms": round(cuts[98] * 1e3, 2)}


def scrape(metrics_port: int, path: str) -> float | None:
    """One GET on a fresh connection: its seconds, None when it did not answer 200."""
    started = time.perf_counter()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", metrics_port, timeout=5)
        conn.request("GET", path, headers={"Accept-Encoding": "gzip"})
        response = conn.getresponse()
        response.read()
        conn.close()
    except OSError:
        return None
    return time.perf_counter() - started if response.status == 200 else None


def time_calls(
    grpc_port: int, metrics_port: int, calls: int, with_grpc: bool = True
) -> dict[str, Any]:
    """GetReport, /metrics and /healthz, in turn: latencies, failures and the share answered."""
    report: list[float] = []
    pages: dict[str, list[float]] = {"metrics": [], "healthz": []}
    failures = {"GetReport": 0, "metrics": 0, "healthz": 0}
    for _ in range(calls):
        if with_grpc:
            started = time.perf_counter()
            try:
                with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                    pb_grpc.NodeDiagnosticsStub(channel).GetReport(pb.GetReportRequest(), timeout=5)
                report.append(time.perf_counter() - started)
            except grpc.RpcError:
                failures["GetReport"] += 1
        for kind in pages:
            took = scrape(metrics_port, f"/{kind}")
            if took is None:
                failures[kind] += 1
            else:
                pages[kind].append(took)
    return {
        "GetReport": percentiles(report) if len(report) > 1 else None,
        "metrics": percentiles(pages["metrics"]) if len(pages["metrics"]) > 1 else None,
        "healthz": percentiles(pages["healthz"]) if len(pages["healthz"]) > 1 else None,
        "failures": failures,
        "answered": {kind: f"{len(pages[kind])}/{calls}" for kind in pages},
    }


class Attack:
    """Reflection streams held open and idle connections kept up, until `stop()`."""

    def __init__(
        self,
        grpc_port: int,
        metrics_port: int,
        streams: int,
        idle: int,
        addresses: int = 1,
        slowloris: bool = False,
    ) -> None:
        self.done = threading.Event()
        self._sources = [f"127.0.0.{2 + i}" for i in range(addresses)]
        self._slowloris = slowloris
        self._sent: dict[socket.socket, int] = {}
        self.admitted_streams = 0
        self.refused_streams = 0
        self.admitted_connections = 0  # open and not answered: the agent holds them
        self._channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        self._calls: list[Any] = []
        self._metrics_port = metrics_port
        self._socks: list[socket.socket] = []
        self._idle = idle
        self.waiting_streams = 0  # neither answered nor refused: queued for a worker
        stub = reflection_pb2_grpc.ServerReflectionStub(self._channel)
        self._calls = [
            stub.ServerReflectionInfo(self._requests(), timeout=600) for _ in range(streams)
        ]
        outcomes: list[str] = []
        lock = threading.Lock()

        def first_answer(call: Any) -> None:
            try:
                next(call)
                outcome = "admitted"
            except grpc.RpcError:
                outcome = "refused"
            with lock:
                outcomes.append(outcome)

        for call in self._calls:
            threading.Thread(target=first_answer, args=(call,), daemon=True).start()
        deadline = time.monotonic() + 5.0
        while len(outcomes) < streams and time.monotonic() < deadline:
            time.sleep(0.05)
        with lock:
            self.admitted_streams = outcomes.count("admitted")
            self.refused_streams = outcomes.count("refused")
            self.waiting_streams = streams - len(outcomes)
        self._thread = threading.Thread(target=self._keep_connections, daemon=True)
        self._thread.start()

    def _requests(self) -> Iterator[reflection_pb2.ServerReflectionRequest]:
        yield reflection_pb2.ServerReflectionRequest(list_services="")
        self.done.wait()

    def _keep_connections(self) -> None:
        head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 100_000
        while not self.done.is_set():
            alive = []
            for s in self._socks:  # drop those the agent answered (503) or closed
                s.setblocking(False)
                try:
                    gone = s.recv(1, socket.MSG_PEEK) is not None
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                if not gone and self._slowloris:  # one more byte of a head that never ends
                    sent = self._sent.get(s, 0)
                    try:
                        s.send(head[sent % len(head) : sent % len(head) + 1])
                        self._sent[s] = sent + 1
                    except OSError:
                        gone = True
                if gone:
                    self._sent.pop(s, None)
                    s.close()
                else:
                    alive.append(s)
            self._socks = alive
            self.admitted_connections = len(alive)
            while len(self._socks) < self._idle and not self.done.is_set():
                source = self._sources[len(self._socks) % len(self._sources)]
                try:
                    self._socks.append(
                        socket.create_connection(
                            ("127.0.0.1", self._metrics_port),
                            timeout=2,
                            source_address=(source, 0),
                        )
                    )
                except OSError:
                    break
            self.done.wait(0.5)

    def stop(self) -> None:
        self.done.set()
        self._thread.join(5)
        for call in self._calls:
            call.cancel()
        for s in self._socks:
            s.close()
        self._channel.close()


def threads_and_rss(pid: int) -> tuple[int, int]:
    """The process's thread count and resident KiB, from /proc."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0])


def main() -> None:
    """Run the comparison and print it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--reflection-streams", type=int, default=40)
    parser.add_argument("--idle-connections", type=int, default=300)
    parser.add_argument("--attacker-addresses", type=int, default=1, help="127.0.0.2 and up")
    parser.add_argument("--slowloris", action="store_true", help="drip a head on each")
    parser.add_argument("--python", default=sys.executable, help="the agent's interpreter")
    args = parser.parse_args()
    proc, grpc_port, metrics_port = serve(python=args.python)
    try:
        time.sleep(2.0)  # the first report
        grpc_too = args.reflection_streams > 0
        quiet = time_calls(grpc_port, metrics_port, args.calls, grpc_too)
        quiet_threads, quiet_rss = threads_and_rss(proc.pid)
        attack = Attack(
            grpc_port,
            metrics_port,
            args.reflection_streams,
            args.idle_connections,
            args.attacker_addresses,
            args.slowloris,
        )
        try:
            time.sleep(2.0)
            peak = threads_and_rss(proc.pid)
            loaded = time_calls(grpc_port, metrics_port, args.calls, grpc_too)
            peak = max(peak, threads_and_rss(proc.pid))
            admitted = attack.admitted_connections
        finally:
            attack.stop()
    finally:
        proc.terminate()
        proc.wait(10)

    def ratio(kind: str) -> float | None:
        q, lo = quiet[kind], loaded[kind]
        return round(lo["p99_ms"] / q["p99_ms"], 2) if q and lo else None

    print(
        json.dumps(
            {
                "calls": args.calls,
                "cpus": os.cpu_count(),
                "quiet": quiet,
                "attacked": loaded,
                "p99_ratio": {
                    "GetReport": ratio("GetReport"),
                    "metrics": ratio("metrics"),
                    "healthz": ratio("healthz"),
                },
                "reflection_streams": {
                    "opened": args.reflection_streams,
                    "admitted": attack.admitted_streams,
                    "refused": attack.refused_streams,
                    "waiting": attack.waiting_streams,
                },
                "idle_connections": {
                    "held": args.idle_connections,
                    "addresses": args.attacker_addresses,
                    "slowloris": args.slowloris,
                    "admitted": admitted,
                },
                "agent_threads": {"quiet": quiet_threads, "attacked": peak[0]},
                "agent_rss_kib": {"quiet": quiet_rss, "attacked": peak[1]},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
