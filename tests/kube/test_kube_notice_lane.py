"""The effects loop's priority budget: a provider's notice takes the notice lane, so the
terminating taint goes on at once even when the node's other updates have spent their budget;
the other effects (conditions, events, taking the taint back) keep waiting for theirs, and a
notice source that flaps is held to the notice lane's own bucket.

Before the effects had lanes, one bucket held every attempt: at a 1 s notice poll the taint
waited ~5 s for a token after a few notices (docs/benchmarks.md, "From a spot notice to the
taint"); the first test fails there (the taint waits the ordinary lane's minutes)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kube_reports import report

from gpuprobe.config import KubernetesConfig, TaintConfig
from gpuprobe.effects.budget import NOTICE_BURST, NOTICE_PER_MINUTE, Lane, PriorityBudget
from gpuprobe.effects.loop import EffectsLoop
from gpuprobe.effects.node import NodeEffects
from gpuprobe.effects.terminating import KEEP, TERMINATING_KEY, urgent
from gpuprobe.kube.api import Access, KubeApi
from gpuprobe.report import Action, CheckResult, Finding, NodeReport, Severity
from kube_standin import KubeStandIn, manifest_rules, running

NODE = "gpu-node-17"
FOREIGN = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
# As the lifecycle check raises it from AWS's spot instance-action (checks/lifecycle).
PREEMPTION = Finding(
    "NODE_PREEMPTION_NOTICE",
    Severity.CRITICAL,
    "AWS announced the spot interruption of this node at 2026-12-01T21:02:00Z",
    Action.DRAIN_NODE,
)
REBALANCE = Finding(
    "NODE_REBALANCE_RECOMMENDED", Severity.WARNING, "AWS rebalance", Action.DRAIN_NODE
)
# The ordinary lane: one attempt, then one an hour; the notice lane keeps its own bucket.
SLOW = KubernetesConfig(
    start_jitter_seconds=0,
    update_burst=1,
    updates_per_minute=1 / 60,
    taint=TaintConfig(enabled=True),
)


def taint(kind: str) -> dict[str, str]:
    return {"key": TERMINATING_KEY, "value": kind, "effect": "NoSchedule"}


def with_lifecycle(*found: Finding) -> NodeReport:
    base = report()
    return NodeReport(base.node, base.time, [*base.checks, CheckResult("lifecycle", "s", [*found])])


def test_adding_or_changing_the_taint_is_urgent_taking_it_back_is_not() -> None:
    assert urgent([FOREIGN], "preemption")
    assert urgent([FOREIGN, taint("rebalance")], "preemption")
    assert not urgent([FOREIGN, taint("preemption")], "preemption")
    assert not urgent([FOREIGN, taint("preemption")], None)
    assert not urgent([FOREIGN, taint("preemption")], KEEP)
    assert urgent(None, "rebalance")  # the node not known since a failed write: read it
    assert not urgent(None, None)


def test_each_lane_takes_only_its_own_tokens() -> None:
    clock = [0.0]
    budget = PriorityBudget(1, 12, lambda: clock[0])
    assert budget.take(Lane.ORDINARY) == 0
    assert budget.take(Lane.ORDINARY) == pytest.approx(5.0)
    assert [budget.take(Lane.NOTICE) for _ in range(NOTICE_BURST)] == [0] * NOTICE_BURST
    assert budget.take(Lane.NOTICE) == pytest.approx(60 / NOTICE_PER_MINUTE)
    clock[0] += 60 / NOTICE_PER_MINUTE
    assert budget.take(Lane.NOTICE) == 0
    assert budget.take(Lane.ORDINARY) == 0  # 10 s on: the ordinary lane's token is back


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[KubeStandIn]:
    with running(tmp_path) as stand_in:
        yield stand_in


@pytest.fixture
def loop(standin: KubeStandIn) -> Iterator[EffectsLoop]:
    api = KubeApi(Access(kubeconfig=str(standin.kubeconfig())), timeout=5)
    effects = NodeEffects(api, NODE, SLOW, run="run1")
    loop = EffectsLoop(effects, lambda _: None, SLOW)
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        stop.set()
        loop.offer(None)
        thread.join(5)
        api.close()


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> float:
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, "timed out"
        time.sleep(0.01)
    return time.monotonic() - start


def test_a_notice_goes_at_once_when_the_ordinary_budget_is_spent(
    standin: KubeStandIn, loop: EffectsLoop
) -> None:
    loop.offer(report())  # the ordinary lane's one token: the conditions
    wait_for(lambda: "GPUHardwareReady" in standin.conditions(NODE))
    wait_for(lambda: loop.attempts == 1)
    status_writes = [w for w in standin.writes if w[1] == "nodes/status"]
    loop.offer(with_lifecycle(PREEMPTION))
    took = wait_for(lambda: taint("preemption") in standin.taints(NODE))
    assert took < 2.0
    # the notice attempt wrote the taint alone: no condition, no event (those wait their turn)
    assert [w for w in standin.writes if w[1] == "nodes/status"] == status_writes
    assert standin.node_events(NODE) == []
    assert (loop.attempts, loop.up, loop.errors) == (2, True, {})
    # a change of notice is a notice too
    loop.offer(with_lifecycle(REBALANCE, PREEMPTION))  # the same kind: nothing to do
    loop.offer(with_lifecycle(REBALANCE))
    wait_for(lambda: taint("rebalance") in standin.taints(NODE))
    assert [t for t in standin.taints(NODE) if t["key"] == TERMINATING_KEY] == [taint("rebalance")]
    # the notice gone: taking the taint back waits for the ordinary lane's next token
    loop.offer(with_lifecycle())
    time.sleep(1.0)
    assert taint("rebalance") in standin.taints(NODE)
    assert loop.attempts == 3


def test_a_flapping_notice_is_held_to_the_notice_lane_bucket(
    standin: KubeStandIn, loop: EffectsLoop
) -> None:
    loop.offer(report())
    wait_for(lambda: loop.attempts == 1)
    started = time.monotonic()
    for i in range(60):  # preemption, rebalance, preemption, ... every 50 ms for 3 s
        loop.offer(with_lifecycle(PREEMPTION if i % 2 == 0 else REBALANCE))
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    taint_writes = [w for w in standin.writes if w[1] == "nodes"]
    allowed = NOTICE_BURST + NOTICE_PER_MINUTE / 60 * elapsed
    assert NOTICE_BURST <= len(taint_writes) <= allowed + 1
    assert loop.attempts - 1 == len(taint_writes)


def test_a_notice_does_not_wait_for_the_jittered_start(standin: KubeStandIn) -> None:
    """A restarted agent spreads its first writes over `start_jitter_seconds` (a fleet
    restarting at once must not write every node at once); a notice goes at once all the
    same, and the rest waits for the jitter."""
    config = KubernetesConfig(start_jitter_seconds=3600, taint=TaintConfig(enabled=True))
    api = KubeApi(Access(kubeconfig=str(standin.kubeconfig())), timeout=5)
    loop = EffectsLoop(NodeEffects(api, NODE, config, run="run1"), lambda _: None, config)
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    try:
        loop.offer(report())
        time.sleep(0.5)
        assert (loop.attempts, standin.writes) == (0, [])  # within the jitter: nothing yet
        loop.offer(with_lifecycle(PREEMPTION))
        assert wait_for(lambda: taint("preemption") in standin.taints(NODE)) < 2.0
        assert [w[1] for w in standin.writes] == ["nodes"]  # the taint alone
        assert "GPUHardwareReady" not in standin.conditions(NODE)
    finally:
        stop.set()
        loop.offer(None)
        thread.join(5)
        api.close()
    assert not thread.is_alive()


def test_a_notice_written_does_not_hide_that_the_other_updates_fail(tmp_path: Path) -> None:
    """Without `patch nodes/status` (a ClusterRole cut short) the conditions fail on every
    ordinary attempt while the notice's taint goes on: the ordinary lane keeps backing off
    longer and longer and the agent stays down, as if no notice had been written between."""
    rules = [r for r in manifest_rules() if "nodes/status" not in r.resources]
    config = KubernetesConfig(start_jitter_seconds=0, taint=TaintConfig(enabled=True))
    with running(tmp_path, rules) as standin:
        api = KubeApi(Access(kubeconfig=str(standin.kubeconfig())), timeout=5)
        loop = EffectsLoop(NodeEffects(api, NODE, config, run="run1"), lambda _: None, config)
        stop = threading.Event()
        thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
        loop.offer(with_lifecycle(PREEMPTION))
        thread.start()
        try:
            wait_for(lambda: taint("preemption") in standin.taints(NODE))
            wait_for(lambda: loop.failures >= 2, timeout=15)  # backoff 0.5-1 s, then 1-2 s
            assert not loop.up
            assert loop.failing_since is not None
            assert loop.errors[("patch", "403")] == loop.failures
        finally:
            stop.set()
            loop.offer(None)
            thread.join(5)
            api.close()


def test_the_next_attempt_by_the_clock(standin: KubeStandIn) -> None:
    """Which lane the loop takes next, and how long it waits for a token when neither has one
    (the clock stands still unless moved): a notice in its lane while it has tokens, then in
    the ordinary lane's turn; the wait is the nearer of the two lanes' next tokens."""
    clock = [100.0]
    config = KubernetesConfig(update_burst=1, updates_per_minute=6, taint=TaintConfig(enabled=True))
    api = KubeApi(Access(kubeconfig=str(standin.kubeconfig())), timeout=5)
    loop = EffectsLoop(
        NodeEffects(api, NODE, config, run="run1"), lambda _: None, config, clock=lambda: clock[0]
    )
    try:
        loop.offer(report())
        assert loop.next_lane() is Lane.ORDINARY
        assert loop.next_lane() == pytest.approx(10.0)  # the ordinary lane's next token: 10 s
        loop.offer(with_lifecycle(PREEMPTION))  # the node not read yet: a notice
        assert [loop.next_lane() for _ in range(NOTICE_BURST)] == [Lane.NOTICE] * NOTICE_BURST
        assert loop.next_lane() == pytest.approx(5.0)  # the notice lane's next token is nearer
        clock[0] += 5.0
        assert loop.next_lane() is Lane.NOTICE
        loop.step(Lane.NOTICE)  # the taint written: no notice left to bring
        assert taint("preemption") in standin.taints(NODE)
        assert loop.next_lane() == pytest.approx(5.0)  # the ordinary lane's token, 5 s on
        clock[0] += 5.0
        assert loop.next_lane() is Lane.ORDINARY
    finally:
        api.close()
