"""The one-shot effects: `check --publish` writes a run's conditions and events (never a taint,
of the node or of a device, and never an eviction: a one-shot run has no history to clear one
by)."""

from __future__ import annotations

import dataclasses
import random
import time

from gpuprobe.config import KubernetesConfig
from gpuprobe.effects.budget import backoff
from gpuprobe.effects.node import NodeEffects
from gpuprobe.kube.api import Access, KubeApi, KubeError
from gpuprobe.report import NodeReport, now

ATTEMPTS = 4
# Events of `check --publish` are named for this run id: repeated runs of a cron job find
# their event already there instead of adding one per run.
ONE_SHOT_RUN = "check"
RETRIED = {"409", "429", "500", "502", "503", "504", "timeout", "unreachable"}


def publish_once(report: NodeReport, config: KubernetesConfig, access: Access) -> None:
    """Write the report's conditions and events (never a taint: a one-shot run has no history
    to clear one by), retrying conflicts, throttling, 5xx and outages a few times with
    backoff; raises KubeError when it could not."""
    api = KubeApi(access, config.timeout_seconds)
    # Neither a node taint nor a device taint: nothing would clear it. No eviction either
    # (NodeEffects evicts only with a RemediationConfig, which a one-shot run never passes).
    untainted = dataclasses.replace(
        config,
        taint=dataclasses.replace(config.taint, enabled=False),
        device_taints=dataclasses.replace(config.device_taints, enabled=False),
    )
    effects = NodeEffects(api, report.node, untainted, run=ONE_SHOT_RUN)
    rng = random.Random()
    try:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                effects.publish(report, now())
                return
            except KubeError as exc:
                if exc.code not in RETRIED or attempt == ATTEMPTS:
                    raise
                time.sleep(backoff(attempt, rng))
    finally:
        api.close()
