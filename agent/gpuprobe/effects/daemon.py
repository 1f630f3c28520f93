"""The daemon's side of the effects: the loop on its own thread and its metrics, which
`gpuprobe serve` wires in (whether the feature is on is `gpuprobe.kube.api.wanted`; the wiring
itself stays in serve/agent.py)."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuprobe.config import DEVICE_TAINT_EFFECTS, KubernetesConfig, RemediationConfig
from gpuprobe.effects.evictor import OUTCOMES
from gpuprobe.effects.loop import EffectsLoop
from gpuprobe.effects.node import NodeEffects
from gpuprobe.kube.api import Access, KubeApi, wanted
from gpuprobe.report import CheckResult
from gpuprobe.threads import start_thread

__all__ = ["EffectsLink", "KubeCollector", "wanted"]  # wanted: the serve face asks it here


class KubeCollector(Collector):
    """`gpuprobe_kubernetes_up`, `gpuprobe_kubernetes_errors_total{verb,code}`, and with
    device taints or evictions on, `gpuprobe_device_taints{effect}` and
    `gpuprobe_evictions_total{outcome}`."""

    def __init__(self, loop: EffectsLoop) -> None:
        self.loop = loop

    def collect(self) -> Iterator[Metric]:
        """The loop's state now (read without waiting on it)."""
        yield GaugeMetricFamily(
            "gpuprobe_kubernetes_up",
            "1 when the agent's latest update of its node in the Kubernetes API succeeded",
            value=1 if self.loop.up else 0,
        )
        errors = CounterMetricFamily(
            "gpuprobe_kubernetes_errors",
            "Failed Kubernetes API calls by verb and code "
            "(HTTP status, timeout, unreachable, too_large, invalid)",
            labels=["verb", "code"],
        )
        for (verb, code), count in sorted(dict(self.loop.errors).items()):
            errors.add_metric([verb, code], count)
        yield errors
        gpus = self.loop.effects.gpus
        if gpus.taints is not None:
            taints = GaugeMetricFamily(
                "gpuprobe_device_taints",
                "DeviceTaintRules gpuprobe holds for this node's failed GPUs, by effect",
                labels=["effect"],
            )
            counts = gpus.device_taint_counts()
            for effect in DEVICE_TAINT_EFFECTS:
                taints.add_metric([effect], counts.get(effect, 0))
            yield taints
        if gpus.evictor is not None:
            evicted = CounterMetricFamily(
                "gpuprobe_evictions",
                "Evictions of pods holding a failed GPU, by outcome (evicted, blocked: a "
                "PodDisruptionBudget refused, gone, withheld: the cap or the breaker, failed)",
                labels=["outcome"],
            )
            outcomes = gpus.eviction_outcomes()
            for outcome in OUTCOMES:
                evicted.add_metric([outcome], outcomes.get(outcome, 0))
            yield evicted


class EffectsLink:
    """The node's effects, their loop on its own thread, and its metrics, for one agent."""

    def __init__(
        self,
        node: str,
        config: KubernetesConfig,
        access: Access,
        report_own: Callable[[CheckResult], None],
        rng: random.Random | None = None,
        remediation: RemediationConfig | None = None,
        boot_id: str | None = None,
    ) -> None:
        self.api = KubeApi(access, config.timeout_seconds)
        effects = NodeEffects(self.api, node, config, uuid.uuid4().hex[:12], remediation, boot_id)
        self.loop = EffectsLoop(effects, report_own, config, rng=rng)
        self.collector = KubeCollector(self.loop)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Start the loop (after the jittered first wait); False when the system refused
        the thread."""
        self._thread = start_thread(self.loop.run, "kubernetes", (self._stop,))
        return self._thread is not None

    def stop(self, grace: float = 1.0) -> None:
        """Stop the loop; a call in flight is left to its own timeout."""
        self._stop.set()
        self.loop.offer(None)
        if self._thread is not None:
            self._thread.join(grace)
        self.api.close()
