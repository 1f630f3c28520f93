"""Start-up and memory of the two Kubernetes clients for Python, for gpuprobe's choice.

    python -m venv /tmp/kube-lightkube && /tmp/kube-lightkube/bin/pip install lightkube
    python -m venv /tmp/kube-official && /tmp/kube-official/bin/pip install kubernetes
    python bench/kube_client.py --lightkube /tmp/kube-lightkube/bin/python \\
        --kubernetes /tmp/kube-official/bin/python --runs 10

Each run is a fresh interpreter that imports what the agent needs of the client (the client,
Node and events.k8s.io Event types) and builds a client object for a kubeconfig, then reports
the time that took and its resident memory (VmRSS); a bare interpreter is the baseline. The
medians are printed as one JSON object, with the official client's figures over lightkube's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""

PROBES = {
    "baseline": "pass",
    "lightkube": (
        "from lightkube import Client\n"
        "from lightkube.config.kubeconfig import KubeConfig\n"
        "from lightkube.resources.core_v1 import Node\n"
        "from lightkube.resources.events_v1 import Event\n"
        "client = Client(KubeConfig.from_file(KUBECONFIG))\n"
    ),
    "kubernetes": (
        "from kubernetes import client, config\n"
        "config.load_kube_config(KUBECONFIG)\n"
        "core, events = client.CoreV1Api(), client.EventsV1Api()\n"
    ),
}

WRAPPER = """import time
started = time.perf_counter()
KUBECONFIG = {kubeconfig!r}
{probe}
elapsed = time.perf_counter() - started
rss = next(l for l in open('/proc/self/status') if l.startswith('VmRSS:')).split()[1]
print(elapsed, int(rss) * 1024)
"""


def measure(python: str, probe: str, kubeconfig: str, runs: int) -> dict[str, float]:
    """Median seconds and MiB of `runs` fresh interpreters running `probe`."""
    seconds, rss = [], []
    code = WRAPPER.format(kubeconfig=kubeconfig, probe=probe)
    for _ in range(runs):
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
        elapsed, resident = out.stdout.split()
        seconds.append(float(elapsed))
        rss.append(int(resident))
    return {
        "start_seconds": round(statistics.median(seconds), 3),
        "rss_mib": round(statistics.median(rss) / 2**20, 1),
    }


def main() -> None:
    """Measure both clients and the baseline; print one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lightkube", required=True, help="a Python with lightkube installed")
    parser.add_argument("--kubernetes", required=True, help="a Python with kubernetes installed")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = str(Path(tmp) / "kubeconfig")
        Path(kubeconfig).write_text(KUBECONFIG)
        result = {
            "baseline": measure(args.lightkube, PROBES["baseline"], kubeconfig, args.runs),
            "lightkube": measure(args.lightkube, PROBES["lightkube"], kubeconfig, args.runs),
            "kubernetes": measure(args.kubernetes, PROBES["kubernetes"], kubeconfig, args.runs),
        }
    base = result["baseline"]["rss_mib"]
    for name in ("lightkube", "kubernetes"):
        result[name]["rss_added_mib"] = round(result[name]["rss_mib"] - base, 1)
    result["kubernetes_over_lightkube"] = {
        "start": round(
            result["kubernetes"]["start_seconds"] / result["lightkube"]["start_seconds"], 2
        ),
        "rss_added": round(
            result["kubernetes"]["rss_added_mib"] / result["lightkube"]["rss_added_mib"], 2
        ),
    }
    result["python"] = sys.version.split()[0]
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
