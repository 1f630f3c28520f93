"""Resident memory and CPU of `gpuprobe serve` over a long run, beside node_exporter.

    python bench/serve_resources.py --interval 10 --duration 600    # memory target (≤ 80 MiB)
    python bench/serve_resources.py --interval 60 --duration 600    # CPU target (< 1 %)
    python bench/serve_resources.py --snapshot synthetic-k8s-mig-single  # with attribution
    python bench/serve_resources.py --interval 10 --duration 600 --kubernetes   # ≤ 72 MiB

With `--kubernetes` the agent also publishes its node's conditions and events to the tests'
Kubernetes API stand-in (tests/kube_standin.py, on loopback, started here), as a DaemonSet
agent does to the API server: lightkube loaded, one TLS connection, a write per change.

Serves the 8-GPU snapshot `synthetic-h100-8gpu-healthy` at the given check interval while
both it and node_exporter are scraped every 15 s (Prometheus' default), then prints RSS at
start and end and the CPU used over the run, as a percentage of one core.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agents import ROOT, SNAPSHOT, cpu_seconds, rss_bytes, start_agent, start_node_exporter, stop

MIB = 1024 * 1024


def main() -> None:
    """Run, sample, print one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--interval", type=float, default=10)
    parser.add_argument("--duration", type=float, default=600)
    parser.add_argument("--scrape-every", type=float, default=15)
    parser.add_argument(
        "--kubernetes", action="store_true", help="publish to a Kubernetes API stand-in too"
    )
    parser.add_argument("--snapshot", default=SNAPSHOT.name, help="a snapshot under tests/")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, kube_standin(Path(tmp), args.kubernetes) as extra:
        run(args, extra)


@contextmanager
def kube_standin(directory: Path, wanted: bool) -> Iterator[list[str]]:
    """The tests' API stand-in with the agent's node, and the flags that point the agent at it
    (none when not `wanted`)."""
    if not wanted:
        yield []
        return
    sys.path.insert(0, str(ROOT / "tests"))
    from kube_standin import running

    with running(directory) as standin:
        config = directory / "config.yaml"
        config.write_text(json.dumps({"kubernetes": {"start_jitter_seconds": 0}}))
        yield [
            *("--kubeconfig", str(standin.kubeconfig()), "--config", str(config)),
            *("--node-name", "gpu-node-17"),
        ]
        conditions = standin.conditions("gpu-node-17")
        assert "GPUHardwareReady" in conditions, "the agent never published"
        print(f"stand-in: {len(standin.requests)} requests", file=sys.stderr)


def run(args: argparse.Namespace, extra: list[str]) -> None:
    """Serve, scrape both exporters, sample, print."""
    agent, agent_port = start_agent(args.interval, SNAPSHOT.parent / args.snapshot, extra)
    exporter, exporter_port = start_node_exporter()
    try:
        time.sleep(5)  # past start-up and the first round
        start = {p.pid: (rss_bytes(p.pid), cpu_seconds(p.pid)) for p in (agent, exporter)}
        began = time.monotonic()
        peak = {p.pid: start[p.pid][0] for p in (agent, exporter)}
        while (elapsed := time.monotonic() - began) < args.duration:
            for port in (agent_port, exporter_port):
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
            for p in (agent, exporter):
                peak[p.pid] = max(peak[p.pid], rss_bytes(p.pid))
            time.sleep(min(args.scrape_every, max(0.0, args.duration - elapsed)))
        elapsed = time.monotonic() - began
        result = {}
        for name, p in (("gpuprobe", agent), ("node_exporter", exporter)):
            rss0, cpu0 = start[p.pid]
            result[name] = {
                "rss_start_mib": round(rss0 / MIB, 1),
                "rss_end_mib": round(rss_bytes(p.pid) / MIB, 1),
                "rss_peak_mib": round(peak[p.pid] / MIB, 1),
                "cpu_percent_of_one_core": round(100 * (cpu_seconds(p.pid) - cpu0) / elapsed, 3),
            }
        result["run"] = {
            "snapshot": args.snapshot,
            "interval_seconds": args.interval,
            "duration_seconds": round(elapsed, 1),
            "scrape_every_seconds": args.scrape_every,
            "load_average_1m_end": round(os.getloadavg()[0], 2),
            "kubernetes": bool(extra),
        }
        print(json.dumps(result, indent=1))
    finally:
        stop(agent)
        stop(exporter)


if __name__ == "__main__":
    main()
