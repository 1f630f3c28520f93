"""Resident memory and CPU of `gpuprobe serve` over a long run, beside node_exporter.

    python bench/serve_resources.py --interval 10 --duration 600    # memory target (≤ 80 MiB)
    python bench/serve_resources.py --interval 60 --duration 600    # CPU target (< 1 %)
    python bench/serve_resources.py --snapshot synthetic-k8s-mig-single  # with attribution

Serves the 8-GPU snapshot `synthetic-h100-8gpu-healthy` at the given check interval while
both it and node_exporter are scraped every 15 s (Prometheus' default), then prints RSS at
start and end and the CPU used over the run, as a percentage of one core.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import urllib.request

from agents import SNAPSHOT, cpu_seconds, rss_bytes, start_agent, start_node_exporter, stop

MIB = 1024 * 1024


def main() -> None:
    """Run, sample, print one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--interval", type=float, default=10)
    parser.add_argument("--duration", type=float, default=600)
    parser.add_argument("--scrape-every", type=float, default=15)
    parser.add_argument("--snapshot", default=SNAPSHOT.name, help="a snapshot under tests/")
    args = parser.parse_args()

    agent, agent_port = start_agent(args.interval, SNAPSHOT.parent / args.snapshot)
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
        }
        print(json.dumps(result, indent=1))
    finally:
        stop(agent)
        stop(exporter)


if __name__ == "__main__":
    main()
