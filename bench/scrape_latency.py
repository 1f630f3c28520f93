"""`/metrics` scrape latency of `gpuprobe serve` beside node_exporter's, in one run.

    python bench/scrape_latency.py --scrapes 2000

Starts the agent on the 8-GPU snapshot and node_exporter (Debian's package, default
collectors), then scrapes them alternately, one at a time, each scrape on a fresh connection
with Prometheus' Accept header, and prints p50/p99 of each and their ratio as JSON.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import time

from agents import start_agent, start_node_exporter, stop

# What Prometheus 2.x sends.
ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def scrape(port: int) -> tuple[float, int]:
    """One scrape: seconds taken and bytes received."""
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics", headers={"Accept": ACCEPT, "Accept-Encoding": "gzip"})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status} from port {port}")
    return time.perf_counter() - started, len(body)


def summary(samples: list[float]) -> dict[str, float]:
    """p50, p99 and mean in milliseconds."""
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {
        "p50_ms": round(cuts[49] * 1000, 3),
        "p99_ms": round(cuts[98] * 1000, 3),
        "mean_ms": round(statistics.fmean(samples) * 1000, 3),
    }


def main() -> None:
    """Run and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scrapes", type=int, default=2000)
    parser.add_argument("--interval", type=float, default=60, help="the agent's check interval")
    args = parser.parse_args()
    agent, agent_port = start_agent(args.interval)
    exporter, exporter_port = start_node_exporter()
    try:
        time.sleep(3)
        for _ in range(20):  # warm both up
            scrape(agent_port)
            scrape(exporter_port)
        load_before = os.getloadavg()[0]
        times: dict[str, list[float]] = {"gpuprobe": [], "node_exporter": []}
        sizes = {}
        for _ in range(args.scrapes):
            for name, port in (("gpuprobe", agent_port), ("node_exporter", exporter_port)):
                took, size = scrape(port)
                times[name].append(took)
                sizes[name] = size
        result = {name: {**summary(t), "gzip_bytes": sizes[name]} for name, t in times.items()}
        ours, theirs = result["gpuprobe"], result["node_exporter"]
        result["ratio_p50"] = round(ours["p50_ms"] / theirs["p50_ms"], 3)
        result["ratio_p99"] = round(ours["p99_ms"] / theirs["p99_ms"], 3)
        result["scrapes_each"] = args.scrapes
        # The machine's own load says how noisy the tail (p99) of this run is.
        result["load_average_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        print(json.dumps(result, indent=1))
    finally:
        stop(agent)
        stop(exporter)


if __name__ == "__main__":
    main()
