"""A hundred agents whose source flaps (a fault that comes and goes every 50 ms) against one
API stand-in: each agent updates its node within the update budget (`kubernetes.update_burst`
at once, then `kubernetes.updates_per_minute`), never once per flap, and every node ends
showing the last state."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from kube_reports import GPU_LOST, report

from gpuprobe.config import KubernetesConfig, TaintConfig
from gpuprobe.effects.loop import EffectsLoop
from gpuprobe.effects.node import NodeEffects
from gpuprobe.kube.api import Access, KubeApi
from kube_standin import running

AGENTS = 100
FLAP_SECONDS = 6.0
FLAP_EVERY = 0.05
CONFIG = KubernetesConfig(
    start_jitter_seconds=2,  # as in test_kube_fleet: first writes spread, not all at once
    # the brake off: every node flaps here, and this test counts the writes of the flaps
    taint=TaintConfig(enabled=True, max_unhealthy_fraction=1.0),
)


def budget(seconds: float) -> float:
    """The most publishing attempts one agent may make in `seconds` (docs/kubernetes.md)."""
    return CONFIG.update_burst + CONFIG.updates_per_minute / 60 * seconds


@pytest.mark.slow
def test_a_hundred_flapping_agents_stay_within_the_update_budget(tmp_path: Path) -> None:
    with running(tmp_path) as standin:
        for i in range(AGENTS):
            standin.add_node(f"gpu-{i:03}", {"nvidia.com/gpu.present": "true"})
        kubeconfig = str(standin.kubeconfig())
        loops, apis = [], []
        for i in range(AGENTS):
            api = KubeApi(Access(kubeconfig=kubeconfig), timeout=30)
            publisher = NodeEffects(api, f"gpu-{i:03}", CONFIG, run="r")
            loops.append(EffectsLoop(publisher, lambda _: None, CONFIG, rng=random.Random(i)))
            apis.append(api)
        stop, flapping = threading.Event(), threading.Event()
        flapping.set()
        offers = [0] * AGENTS

        def flap() -> None:  # one thread flaps every agent's source: 100 would take the CPU
            lost = False
            while flapping.is_set():
                lost = not lost
                for i, loop in enumerate(loops):
                    loop.offer(report(("gpus", GPU_LOST)) if lost else report())
                    offers[i] += 1
                time.sleep(FLAP_EVERY)
            for i, loop in enumerate(loops):  # the last word
                loop.offer(report(("gpus", GPU_LOST)) if i % 2 else report())

        threads = [threading.Thread(target=loop.run, args=(stop,), daemon=True) for loop in loops]
        sources = [threading.Thread(target=flap, daemon=True)]
        started = time.monotonic()
        for t in threads + sources:
            t.start()
        try:
            time.sleep(FLAP_SECONDS)
            flapping.clear()
            for t in sources:
                t.join(5)
            flapped = time.monotonic() - started

            def settled(i: int) -> bool:
                status = standin.conditions(f"gpu-{i:03}").get("GPUHardwareReady", {})
                return status.get("status") == ("False" if i % 2 else "True")

            # the last word arrives once the budget has a token again (one each 5 s)
            deadline = time.monotonic() + 60 / CONFIG.updates_per_minute + 90  # a loaded CI
            while not all(settled(i) for i in range(AGENTS)) and time.monotonic() < deadline:
                time.sleep(0.1)
            elapsed = time.monotonic() - started
        finally:
            stop.set()
            for loop in loops:
                loop.offer(None)
            for t in threads:
                t.join(5)
            for api in apis:
                api.close()
        errors: dict[tuple[str, str], int] = {}
        for loop in loops:
            for key, count in loop.errors.items():
                errors[key] = errors.get(key, 0) + count
        assert all(settled(i) for i in range(AGENTS)), (errors, [loop.attempts for loop in loops])
        # each source flapped (~120 times; fewer on a loaded machine) far past the budget
        assert min(offers) > 3 * budget(flapped)
        attempts = [loop.attempts for loop in loops]
        writes: dict[str, int] = {}
        for _token, _resource, name in standin.writes:
            writes[name] = writes.get(name, 0) + 1
        requests = len(standin.requests)
        print(
            f"{AGENTS} agents, {sum(offers)} flaps in {flapped:.1f} s: attempts per agent "
            f"max {max(attempts)}, node writes per node max {max(writes.values())}, "
            f"{requests} requests in all over {elapsed:.1f} s; errors {errors}"
        )
        assert max(attempts) <= budget(elapsed) + 1
        # a node update writes the node at most twice (its status, its taint) when nothing
        # conflicts: the bound docs/kubernetes.md gives
        assert max(writes.values()) <= 2 * (budget(elapsed) + 1)
        # all the API load of the fleet: each attempt a few requests (get, patch, events)
        assert requests <= AGENTS * 6 * (budget(elapsed) + 1)


def test_one_flapping_agent_is_held_to_the_burst_then_the_rate(tmp_path: Path) -> None:
    """Alone, an agent's attempts take milliseconds: without the budget a source flapping every
    10 ms would write its node ~100 times a second; with it, the burst and then one each 5 s."""
    config = KubernetesConfig(start_jitter_seconds=0)
    with running(tmp_path) as standin:
        standin.add_node("gpu-000", {"nvidia.com/gpu.present": "true"})
        api = KubeApi(Access(kubeconfig=str(standin.kubeconfig())), timeout=30)
        loop = EffectsLoop(NodeEffects(api, "gpu-000", config, run="r"), lambda _: None, config)
        stop = threading.Event()
        thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
        started = time.monotonic()
        thread.start()
        try:
            lost, flaps = False, 0
            while time.monotonic() - started < 3.0:
                lost = not lost
                loop.offer(report(("gpus", GPU_LOST)) if lost else report())
                flaps += 1
                time.sleep(0.01)
            elapsed = time.monotonic() - started
        finally:
            stop.set()
            loop.offer(None)
            thread.join(5)
            api.close()
        status_writes = [w for w in standin.writes if w[1] == "nodes/status"]
        print(f"{flaps} flaps in {elapsed:.1f} s: {loop.attempts} attempts")
        assert flaps > 100
        assert config.update_burst <= loop.attempts <= budget(elapsed) + 1
        assert len(status_writes) <= loop.attempts
