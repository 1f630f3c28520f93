"""Many real agents in one process, each on its own loopback port: a fleet for audit tests and
benchmarks without a process per agent.

    python tests/fleet.py --count 64 --snapshot tests/snapshots/synthetic-h100-8gpu-healthy \
        --node-prefix node-a-

starts 64 `Agent`s (the same class `gpuprobe serve` runs: scheduler, gRPC service, metrics),
waits for each one's first report, prints one JSON line `{"agents": [{"target": "127.0.0.1:P",
"node": "...", "snapshot": "..."}, ...]}`, and serves until its stdin closes or SIGTERM. The
snapshots given are dealt out in turn. `fleet(...)` runs it from Python.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class FleetAgent:
    """One agent of a fleet."""

    target: str
    node: str
    snapshot: str


@contextmanager
def fleet(
    snapshots: Sequence[str], count: int, node_prefix: str = "", timeout: float = 120
) -> Iterator[list[FleetAgent]]:
    """Run `count` agents on `snapshots` (paths, dealt in turn) in one child process until
    the block ends."""
    args = [sys.executable, str(HERE / "fleet.py"), "--count", str(count)]
    for path in snapshots:
        args += ["--snapshot", path]
    if node_prefix:
        args += ["--node-prefix", node_prefix]
    proc = subprocess.Popen(
        args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "GRPC_VERBOSITY": "NONE"},
    )
    timer = threading.Timer(timeout, proc.kill)
    try:
        timer.start()
        assert proc.stdout is not None
        line = proc.stdout.readline()
        timer.cancel()
        if not line:
            raise RuntimeError(f"the fleet exited before serving (status {proc.wait()})")
        yield [FleetAgent(**a) for a in json.loads(line)["agents"]]
    finally:
        timer.cancel()
        if proc.stdin is not None:
            proc.stdin.close()  # the fleet stops its agents and exits
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _serve(snapshots: Sequence[str], count: int, node_prefix: str) -> int:
    sys.path.insert(0, str(HERE.parent / "agent"))
    from gpuprobe.checks.registry import CHECKS
    from gpuprobe.config import Config, ServeConfig
    from gpuprobe.host import snapshot_host
    from gpuprobe.serve.agent import Agent, ServeOptions

    # The first round of checks is all the audit reads; no further rounds while serving.
    config = Config(serve=ServeConfig(interval_seconds=86400, jitter_fraction=0))
    options = ServeOptions(grpc_listen="127.0.0.1:0", metrics_listen="127.0.0.1:0")
    agents: list[tuple[Any, str]] = []
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        for i in range(count):
            path = snapshots[i % len(snapshots)]
            name = f"{node_prefix}{i:04d}" if node_prefix else None
            agent = Agent(snapshot_host(path, name), config, list(CHECKS), options)
            agent.start()
            agents.append((agent, path))
        end = time.monotonic() + 600
        while any(a.store.current().report is None for a, _ in agents):
            if time.monotonic() > end:
                raise RuntimeError("agents without a first report after 600 s")
            time.sleep(0.05)
        listed = [
            {"target": f"127.0.0.1:{a.grpc_port}", "node": a.host.node_name, "snapshot": p}
            for a, p in agents
        ]
        print(json.dumps({"agents": listed}), flush=True)
        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
        stop.wait()
    finally:
        for agent, _ in agents:
            agent.stop(grace=0.2)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags and serve the fleet."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, required=True, help="how many agents")
    parser.add_argument(
        "--snapshot", action="append", required=True, help="a snapshot directory (repeatable)"
    )
    parser.add_argument(
        "--node-prefix", default="", help="name the nodes PREFIX0000, PREFIX0001, ..."
    )
    args = parser.parse_args(argv)
    return _serve(args.snapshot, args.count, args.node_prefix)


if __name__ == "__main__":
    raise SystemExit(main())
