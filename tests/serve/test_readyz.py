"""`/readyz` (the TLS overlay's readiness probe) says what gRPC health says of
gpuprobe.v1.NodeDiagnostics: 503 until the first report exists, 200 after, 503 when stopping."""

from __future__ import annotations

import urllib.request

from gpuprobe.serve.agent import Agent
from helpers import config
from serving import in_process_agent, wait_for


def get(agent: Agent, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{agent.metrics_port}{path}", timeout=5
        ) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_readyz_turns_200_with_the_first_report() -> None:
    # NVML hangs in the gpus check: the first report waits for its 1.5 s deadline.
    cfg = config(checks={"deadline_seconds": 1.5})
    with in_process_agent("synthetic-nvml-hang", config=cfg, names=["gpus"], wait=False) as agent:
        assert get(agent, "/readyz") == (
            503,
            "not ready: the first round of checks is running\n",
        )
        assert get(agent, "/healthz")[0] == 200  # alive all the while
        wait_for(lambda: agent.store.current().report is not None)
        assert get(agent, "/readyz") == (200, "ready\n")
        agent.stopping.set()
        assert get(agent, "/readyz") == (503, "stopping\n")
