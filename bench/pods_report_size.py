"""How big the agent's GetReport is on a node running thousands of GPU containers.

    python bench/pods_report_size.py --containers 5000

Copies the committed snapshot `synthetic-pods-cuda12.8-geforce-550` (a GeForce node whose
CUDA 12.8 image needs a newer driver) and adds `--containers` more of that container, each its
own pod with its containerd spec and a log showing PyTorch's driver-too-old error: every
container is a finding and a failure (the worst case). Starts the agent on it in this process,
asks GetReport through the project's gRPC client, and prints the message's size in bytes, the
`pods` check's share, and the summary, as JSON. The target: under 1 MB at 5,000 containers.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "agent"), str(ROOT / "tests"), str(ROOT / "tests" / "serve")]

from test_pods_report_bounds import crowded_node  # noqa: E402

from gpuprobe.client import Client  # noqa: E402
from gpuprobe.config import Config  # noqa: E402
from gpuprobe.host import snapshot_host  # noqa: E402
from gpuprobe.serve.agent import Agent, ServeOptions  # noqa: E402
from serving import LOOPBACK, LOOPBACK_PEERS, PASSIVE, wait_for  # noqa: E402


def main() -> None:
    """Measure one GetReport on a node of `--containers` extra GPU containers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--containers", type=int, default=5000)
    args = parser.parse_args()
    import test_pods_report_bounds as node_maker

    node_maker.CONTAINERS = args.containers
    work = Path(tempfile.mkdtemp(prefix="gpuprobe-pods-size-"))
    try:
        host = snapshot_host(str(crowded_node(work)))
        agent = Agent(host, Config(bandwidth=LOOPBACK_PEERS), PASSIVE, ServeOptions(**LOOPBACK))
        agent.start()
        try:
            wait_for(lambda: agent.store.current().report is not None, timeout=300)
            with Client(f"127.0.0.1:{agent.grpc_port}") as client:
                message = client.get_report_message(timeout=60)
        finally:
            agent.stop(grace=0.5)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (pods,) = [c for c in message.checks if c.name == "pods"]
    print(
        json.dumps(
            {
                "containers": args.containers + 1,
                "get_report_bytes": message.ByteSize(),
                "pods_check_bytes": pods.ByteSize(),
                "summary": pods.summary,
            }
        )
    )


if __name__ == "__main__":
    main()
