"""A hundred agents starting at once against one API stand-in: their first writes spread over
the jitter window instead of arriving together, and every node ends right."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from kube_reports import GPU_LOST, report

from gpuprobe.config import KubernetesConfig
from gpuprobe.effects.loop import EffectsLoop
from gpuprobe.effects.node import NodeEffects
from gpuprobe.kube.api import Access, KubeApi
from kube_standin import running

AGENTS = 100
WINDOW = 2.0  # kubernetes.start_jitter_seconds, shrunk from 30 s to keep the test short
BUCKET = 0.25


@pytest.mark.slow
def test_a_hundred_agents_spread_their_first_writes_over_the_window(tmp_path: Path) -> None:
    config = KubernetesConfig(start_jitter_seconds=WINDOW)
    with running(tmp_path) as standin:
        for i in range(AGENTS):
            standin.add_node(f"gpu-{i:03}", {"nvidia.com/gpu.present": "true"})
        kubeconfig = str(standin.kubeconfig())
        loops, apis = [], []
        for i in range(AGENTS):
            # Each request is bounded end to end; 100 TLS clients and the stand-in share one
            # process here, so on a loaded machine the bound is wide: this test is about the
            # spread of the first writes, not about a slow server (test_kube_bounds.py).
            api = KubeApi(Access(kubeconfig=kubeconfig), timeout=30)
            findings = [("gpus", GPU_LOST)] if i % 10 == 0 else []
            publisher = NodeEffects(api, f"gpu-{i:03}", config, run="r")
            loop = EffectsLoop(publisher, lambda _: None, config, rng=random.Random(i))
            loop.offer(report(*findings))
            loops.append(loop)
            apis.append(api)
        stop = threading.Event()
        threads = [threading.Thread(target=loop.run, args=(stop,), daemon=True) for loop in loops]
        started = time.monotonic()
        for t in threads:
            t.start()
        try:
            deadline = started + WINDOW + 40
            while not all(loop.up for loop in loops) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            stop.set()
            for loop in loops:
                loop.offer(None)
            for t in threads:
                t.join(5)
            for api in apis:
                api.close()
        assert all(loop.up for loop in loops)
        times = sorted(t - started for t, *_ in standin.requests)
        buckets: dict[int, int] = {}
        for t in times:
            buckets[int(t / BUCKET)] = buckets.get(int(t / BUCKET), 0) + 1
        per_second = {s: n for s, n in sorted(standin.per_second().items())}
        print(f"requests per second: {per_second}; per {BUCKET} s: {dict(sorted(buckets.items()))}")
        # 100 GETs, 100 status patches and 10 events
        assert len(times) == 2 * AGENTS + AGENTS // 10, per_second
        assert all(code in (200, 201) for *_, code in standin.requests)
        assert times[-1] - times[0] > 0.8 * WINDOW, per_second  # spread over the window ...
        # ... evenly (uniform: 1/8 of them in each quarter-second of the window on average)
        assert max(buckets.values()) <= 0.25 * len(times), (buckets, per_second)
        for i in range(AGENTS):
            hardware = standin.conditions(f"gpu-{i:03}")["GPUHardwareReady"]
            assert hardware["status"] == ("False" if i % 10 == 0 else "True")
        assert {w[2] for w in standin.writes} == {f"gpu-{i:03}" for i in range(AGENTS)}
        assert len(standin.writes) == AGENTS  # each agent wrote its own node, once
