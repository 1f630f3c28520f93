"""Publishing the latest report to Kubernetes: conditions, events and the taint, with backoff.

`NodePublisher.publish` makes one attempt for one report (raising `KubeError` on the first
failed call; what it had written stays written, and the next attempt re-reads the node, so
nothing is lost). `PublishLoop` runs it on its own thread after each round: the checks, gRPC
and `/metrics` never wait on the API server. Its first write comes at a random moment within
`kubernetes.start_jitter_seconds`, failures back off exponentially with jitter, attempts stay
within a token bucket (`UpdateBudget`: a flapping source cannot make the agent write its node
more often), and while updates fail for more than 5 minutes the agent says so in its own
report.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from gpuprobe.config import KubernetesConfig, RemediationConfig
from gpuprobe.kube import conditions, events, taints, terminating
from gpuprobe.kube.api import KubeError
from gpuprobe.kube.gpu_effects import GpuEffects
from gpuprobe.report import Action, CheckResult, Finding, NodeReport, Severity, now

log = logging.getLogger("gpuprobe.kube")

CHECK_NAME = "kubernetes"  # the agent's own result about its Kubernetes updates
HEARTBEAT_SECONDS = 240.0  # conditions are re-asserted within 5 minutes
UNREACHABLE_AFTER_SECONDS = 300.0
BACKOFF_BASE_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 60.0
CONFLICT_RETRIES = 3
# While the brake holds, the fleet is listed again at most this often (a list of every GPU
# node from every withheld agent each round would load the API server the brake protects).
BRAKE_RECHECK_SECONDS = 120.0
# Event series remembered (name -> count); past this many, older series are forgotten and a
# transition seen again starts a new one (findings on ever new resources must not grow it).
MAX_SERIES = 4096


class Api(Protocol):
    """What the publisher needs of the API (`gpuprobe.kube.api.KubeApi`)."""

    def get_node(self, name: str) -> dict[str, Any]: ...
    def list_nodes(self, selector: str) -> list[dict[str, Any]]: ...
    def patch_node_status(self, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...
    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...
    def create_event(self, event: dict[str, Any]) -> None: ...
    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> None: ...


class NodePublisher:
    """Writes one node's conditions, events and taint from its reports, remembering what the
    node already says so that an unchanged round costs no request."""

    def __init__(
        self,
        api: Api,
        node: str,
        config: KubernetesConfig,
        run: str,
        remediation: RemediationConfig | None = None,
        boot_id: str | None = None,
    ) -> None:
        self.api = api
        self.node = node
        self.config = config
        self.run = run
        self._conditions: list[dict[str, Any]] | None = None  # ours on the node, None: re-read
        self._taints: list[dict[str, Any]] | None = None  # the node's, as last seen
        self._beat: datetime | None = None
        self._told: dict[events.FindingKey, Finding] = {}  # what the events have said so far
        self._series: dict[str, int] = {}
        self._last_due: datetime | None = None
        self._braked_at: datetime | None = None
        self.withheld: taints.Brake | None = None
        # Calls that failed but were handled here (a conflict re-read and re-applied): the
        # loop counts them in gpuprobe_kubernetes_errors_total with the ones that surface.
        self.handled: list[KubeError] = []
        # Device taints and evictions (docs/kubernetes.md): off unless configured.
        self.gpus = GpuEffects(api, node, config, remediation or RemediationConfig(), boot_id)  # type: ignore[arg-type]

    def publish(self, report: NodeReport, at: datetime) -> None:
        """Bring the node up to date with `report`; raises KubeError on a failed call."""
        try:  # what keeps pods off a broken GPU or node first, what tells people after
            covered = self.gpus.apply_taints(report, at)
            self._publish_conditions(report, at)
            if self.config.taint.enabled:
                self._publish_terminating(report)  # outside the brake: the node is going
                self._publish_taint(report, at, covered)
            self.gpus.apply_evictions(report, at)
            if self.config.events:
                self._publish_events(report, at)
        except KubeError:
            self.forget()  # the failed write may have landed, or another writer came
            raise
        finally:
            self.gpus.announce(at)

    def forget(self) -> None:
        """Read the node again before the next write instead of trusting what was seen."""
        self._conditions = None
        self._taints = None
        self.gpus.forget()

    def _remember(self, node: Mapping[str, Any]) -> None:
        owned = set(conditions.groups(self.config))
        found = node.get("status", {}).get("conditions") or []
        self._conditions = [c for c in found if c.get("type") in owned]
        self._taints = list(node.get("spec", {}).get("taints") or [])

    def _publish_conditions(self, report: NodeReport, at: datetime) -> None:
        wanted = conditions.desired(report, conditions.groups(self.config))
        if self._conditions is None:
            self._remember(self.api.get_node(self.node))
        assert self._conditions is not None
        heartbeat = self._beat is None or (at - self._beat).total_seconds() >= HEARTBEAT_SECONDS
        patch = conditions.to_write(wanted, self._conditions, at, heartbeat)
        if patch:
            self._remember(self.api.patch_node_status(self.node, {"status": {"conditions": patch}}))
        if heartbeat:
            self._beat = at

    def _publish_events(self, report: NodeReport, at: datetime) -> None:
        after = events.notable(report)
        for event in events.changes(self._told, after):
            name = events.event_name(self.node, event, self.run)
            count = self._series.get(name, 0) + 1
            if count == 1:
                try:
                    self.api.create_event(events.body(event, self.node, name, at))
                except KubeError as exc:
                    if exc.code != "409":  # already there: an earlier try did land
                        raise
            else:
                self.api.patch_event(events.NAMESPACE, name, events.series_patch(count, at))
            if len(self._series) >= MAX_SERIES and name not in self._series:
                self._series.clear()
            self._series[name] = count
            key = (event.code, event.resource)
            if event.action == events.DETECTED:
                self._told[key] = after[key]
            else:
                self._told.pop(key, None)

    def _publish_taint(self, report: NodeReport, at: datetime, covered: set[str]) -> None:
        code = taints.due(report, self.config.taint.codes, covered)
        if code is not None:
            self._last_due = at
        elif self._last_due is None:
            self._last_due = at  # after a restart: the clear delay counts from now
        clear_for = (at - self._last_due).total_seconds()
        known = self._taints
        if (
            known is not None
            and taints.decide(known, code, clear_for, self.config.taint, at) is None
        ):
            if code is None or taints.ours(known) is not None:
                self.withheld = None
            return
        since = (at - self._braked_at).total_seconds() if self._braked_at else None
        if self.withheld is not None and since is not None and since < BRAKE_RECHECK_SECONDS:
            return

        def decide(current: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
            new = taints.decide(current, code, clear_for, self.config.taint, at)
            if new is None or (taints.ours(current) is None and self._braked(at)):
                return None
            return new

        new = self._patch_taints(decide)
        if new is None:
            return
        if taints.ours(new) is not None:
            log.warning("tainted", extra={"taint": taints.ours(new), "node": self.node})
        else:
            log.info("taint removed", extra={"node": self.node})

    def _publish_terminating(self, report: NodeReport) -> None:
        """Add, change or remove `gpuprobe.io/terminating` as the lifecycle check's notices
        say (docs/kubernetes.md); no request when the node already says it."""
        kind = terminating.wanted(report)
        if self._taints is not None and terminating.decide(self._taints, kind) is None:
            return
        if self._patch_taints(lambda current: terminating.decide(current, kind)) is not None:
            log.warning("terminating taint", extra={"node": self.node, "kind": kind})

    def _patch_taints(
        self, decide: Callable[[list[dict[str, Any]]], list[dict[str, Any]] | None]
    ) -> list[dict[str, Any]] | None:
        """Read the node, `decide` its taints, and write them with the node's resourceVersion,
        reading and deciding again when the node changed under us (409). The taints written,
        or None when `decide` wanted no change."""
        for _ in range(CONFLICT_RETRIES):
            node = self.api.get_node(self.node)
            self._remember(node)
            new = decide(list(node.get("spec", {}).get("taints") or []))
            if new is None:
                return None
            patch = {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": new},
            }
            try:
                self._remember(self.api.patch_node(self.node, patch))
            except KubeError as exc:
                if exc.code == "409":  # the node changed under us: read again, decide again
                    self.handled.append(exc)
                    continue
                raise
            return new
        raise KubeError("patch", "409", f"node {self.node} kept changing")

    def _braked(self, at: datetime) -> bool:
        fleet = self.api.list_nodes(self.config.taint.node_selector)
        brake = taints.brake(fleet, self.node, self.config.taint.max_unhealthy_fraction)
        self.withheld = brake if brake.engaged else None
        self._braked_at = at
        if brake.engaged:
            log.warning("taint withheld", extra={"node": self.node, "why": brake.why()})
        return brake.engaged

    def findings(self) -> list[Finding]:
        """The agent's own findings about its taints and evictions (TAINT_WITHHELD,
        DEVICE_TAINT_WITHHELD, EVICTION_WITHHELD)."""
        found = self.gpus.findings()
        if self.withheld is None:
            return found
        return [
            Finding(
                "TAINT_WITHHELD",
                Severity.WARNING,
                f"a {taints.TAINT_KEY} taint is due but withheld: {self.withheld.why()}",
                Action.NONE,
            ),
            *found,
        ]


def backoff(failures: int, rng: random.Random) -> float:
    """The wait before the next try after `failures` in a row: exponential, capped, and a
    random point in the upper half of that (so agents that failed together do not retry
    together)."""
    ceiling = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** min(failures - 1, 16))
    return rng.uniform(ceiling / 2, ceiling)


class UpdateBudget:
    """A token bucket over publishing attempts: `burst` at once, then `per_minute`. Each
    attempt brings the node up to date with the latest report, so a source that flaps faster
    than the budget loses nothing but the states in between."""

    def __init__(self, burst: int, per_minute: float, clock: Callable[[], float]) -> None:
        self.burst = float(burst)
        self.rate = per_minute / 60.0
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> float:
        """0 when an attempt may go now (one token taken), else the seconds until one may."""
        t = self._clock()
        self._tokens = min(self.burst, self._tokens + (t - self._at) * self.rate)
        self._at = t
        if self._tokens < 1.0:
            return (1.0 - self._tokens) / self.rate
        self._tokens -= 1.0
        return 0.0


class PublishLoop:
    """Publishes the latest report after each round, on its own thread, within the update
    budget (`kubernetes.update_burst`, `kubernetes.updates_per_minute`)."""

    def __init__(
        self,
        publisher: NodePublisher,
        report_own: Callable[[CheckResult], None],
        config: KubernetesConfig,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = now,
    ) -> None:
        self.publisher = publisher
        self._report: NodeReport | None = None
        self.report_own = report_own
        self.config = config
        self.rng = rng or random.Random()
        self.clock = clock
        self.wall = wall
        self.up = False
        self.errors: dict[tuple[str, str], int] = {}
        self.failures = 0
        self.failing_since: float | None = None
        self.last_error: KubeError | None = None
        self._wake = threading.Event()
        self._own: list[Finding] | None = None
        self._own_data: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self.budget = UpdateBudget(config.update_burst, config.updates_per_minute, clock)
        self.attempts = 0

    def offer(self, report: NodeReport | None) -> None:
        """A new report (from the agent's store, after each round): publish it soon. Never
        blocks; the report is handed over here, so none is missed between two attempts."""
        if report is not None:
            self._report = report
        self._wake.set()

    def step(self) -> float:
        """One attempt with the latest report; returns the seconds to wait before the next."""
        self._wake.clear()
        report = self._report
        delay = HEARTBEAT_SECONDS
        if report is not None:
            try:
                self.publisher.publish(report, self.wall())
            except KubeError as exc:
                with self._lock:
                    key = (exc.verb, exc.code)
                    self.errors[key] = self.errors.get(key, 0) + 1
                    self.up = False
                    self.failures += 1
                    self.last_error = exc
                    if self.failing_since is None:
                        self.failing_since = self.clock()
                log.warning(
                    "kubernetes update failed",
                    extra={"verb": exc.verb, "code": exc.code, "error": exc.message},
                )
                delay = backoff(self.failures, self.rng)
            else:
                with self._lock:
                    self.up, self.failures, self.failing_since = True, 0, None
        with self._lock:
            for handled in self.publisher.handled:
                key = (handled.verb, handled.code)
                self.errors[key] = self.errors.get(key, 0) + 1
            self.publisher.handled.clear()
        self._report_own()
        due = self.publisher.gpus.next_due()
        if due is not None and not self.failures:  # a refused eviction's next try
            delay = min(delay, max(0.0, (due - self.wall()).total_seconds()))
        return delay

    def own_findings(self) -> list[Finding]:
        """The agent's findings about its Kubernetes updates, now."""
        found = self.publisher.findings()
        if self.failing_since is not None and self.last_error is not None:
            failing = self.clock() - self.failing_since
            if failing > UNREACHABLE_AFTER_SECONDS:
                found.append(
                    Finding(
                        "KUBERNETES_UNREACHABLE",
                        Severity.WARNING,
                        f"node updates have failed for {failing:.0f} s "
                        f"(last: {self.last_error.verb} {self.last_error.code})",
                        Action.CHECK_NETWORK,
                    )
                )
        return found

    def _report_own(self) -> None:
        found = self.own_findings()
        data = self.publisher.gpus.data()
        if (found, data) == (self._own, self._own_data):
            return
        self._own, self._own_data = found, data
        if self.up:
            summary = "node conditions, events and taint up to date"
        elif self.failures:
            summary = f"node updates failing ({self.failures} tries), retrying with backoff"
        else:
            summary = "no node update yet"
        self.report_own(CheckResult(CHECK_NAME, summary, found, data=data))

    def run(self, stop: threading.Event) -> None:
        """Publish until `stop` is set: after a jittered start, after each round, at least
        every heartbeat, and after each failure once its backoff has passed."""
        if stop.wait(self.rng.uniform(0, self.config.start_jitter_seconds)):
            return
        while not stop.is_set():
            wait = self.budget.take()
            if wait > 0:  # over budget: the latest report goes once a token is there
                stop.wait(wait)
                continue
            self.attempts += 1
            try:
                delay = self.step()
            except Exception:  # a bug must not end publishing for the agent's lifetime
                log.exception("kubernetes publishing failed")
                with self._lock:
                    self.up = False
                    self.failures += 1
                delay = backoff(self.failures, self.rng)
            if self.failures:
                stop.wait(delay)  # a new round does not cut a backoff short
            else:
                self._wake.wait(delay)
