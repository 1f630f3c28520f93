"""Starting agents for the daemon's tests: the real `gpuprobe serve` process, or an in-process
`Agent` on a snapshot, both on loopback with ephemeral ports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from conftest import snapshot
from gpuprobe.checks.registry import CHECKS, active
from gpuprobe.config import BandwidthConfig, Config
from gpuprobe.host import snapshot_host
from gpuprobe.serve.agent import Agent, ServeOptions
from gpuprobe.serve.service import ClearXid

# The checks a fresh agent has run: the active ones (storage, NCCL) first run after a random
# part of their jitter window, so its first reports hold only these.
PASSIVE = [name for name in CHECKS if name not in active(CHECKS)]

LOOPBACK = {"grpc_listen": "127.0.0.1:0", "metrics_listen": "127.0.0.1:0"}
LOOPBACK_FLAGS = ("--grpc-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
# Agents on loopback test bandwidth toward each other there (the default peer networks, the
# private ranges of pod networks, leave loopback out).
LOOPBACK_PEERS = BandwidthConfig(peer_networks=("127.0.0.0/8", "::1/128"))


@dataclass
class ServeProcess:
    """A running `gpuprobe serve` and what it logged."""

    proc: subprocess.Popen[str]
    grpc_port: int
    metrics_port: int
    logs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def get(self, path: str) -> tuple[int, str]:
        """GET a path of the metrics server: (status, body)."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}{path}", timeout=10
            ) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metrics(self) -> str:
        status, body = self.get("/metrics")
        assert status == 200
        return body

    def report_metrics(self) -> str:
        """/metrics once it renders the first report."""

        def rendered() -> str:
            text = self.metrics()
            return text if "gpuprobe_node_status" in text else ""

        return str(wait_for(rendered))

    def terminate(self, timeout: float = 15) -> tuple[int, float]:
        """SIGTERM; the exit status and how long it took to exit."""
        started = time.monotonic()
        self.proc.terminate()
        code = self.proc.wait(timeout=timeout)
        return code, time.monotonic() - started


@contextmanager
def serve_process(*args: str, timeout: float = 30) -> Iterator[ServeProcess]:
    """Run `gpuprobe serve ARGS` on loopback ephemeral ports until the block ends."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuprobe", "serve", *LOOPBACK_FLAGS, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    try:
        assert proc.stderr is not None
        logs: list[dict[str, Any]] = []
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        for line in proc.stderr:
            logs.append(json.loads(line))
            if logs[-1]["msg"] == "listening":
                break
        timer.cancel()
        assert logs and logs[-1]["msg"] == "listening", f"serve did not start: {logs}"
        served = ServeProcess(proc, logs[-1]["grpc_port"], logs[-1]["metrics_port"], logs)

        def drain() -> None:
            for line in proc.stderr or ():
                logs.append(json.loads(line))

        threading.Thread(target=drain, daemon=True).start()
        yield served
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@contextmanager
def in_process_agent(
    snapshot_name: str = "synthetic-h100-8gpu-healthy",
    config: Config | None = None,
    names: list[str] | None = None,
    clear_xid: ClearXid | None = None,
    wait: bool = True,
    node_name: str | None = None,
    **options: Any,
) -> Iterator[Agent]:
    """An Agent on a snapshot (as node `node_name`, default the snapshot's), started (with its
    first report in, if `wait`); stopped afterwards."""
    host = snapshot_host(snapshot(snapshot_name), node_name)
    agent = Agent(
        host,
        config or Config(bandwidth=LOOPBACK_PEERS),
        names or list(CHECKS),
        ServeOptions(**{**LOOPBACK, **options}),
        clear_xid=clear_xid,
    )
    agent.start()
    try:
        if wait:
            wait_for(lambda: agent.store.current().report is not None)
        yield agent
    finally:
        agent.stop(grace=0.5)


def wait_for(condition: Callable[[], Any], timeout: float = 20, every: float = 0.05) -> Any:
    """Wait until `condition()` is truthy; returns its value (fails the test on timeout)."""
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {condition}")
        time.sleep(every)
