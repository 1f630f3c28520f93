"""Acting on one GPU, not the node: device taints and evictions, told everywhere.

`GpuEffects` holds one node's device taints (`effects.device_taints`, when
`kubernetes.device_taints.enabled`) and evictions (`effects.evictor`, when
`remediation.evict_pods`), and gives `node.NodeEffects` three appliers (`Lane.ORDINARY`): the
device taints first (their standing rules tell the node taint's applier which GPU faults it
need not cover: `covered`), the evictions after the taints, and last the Events on the node
and on the pods for what was done. It also says what was not (`DEVICE_TAINT_WITHHELD`,
`EVICTION_WITHHELD`) and what was (`data.device_taints`, `data.evictions` of the agent's
`kubernetes` result).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Protocol

from gpuprobe.config import KubernetesConfig, RemediationConfig
from gpuprobe.effects import device_taints, evictor
from gpuprobe.effects.budget import Lane
from gpuprobe.effects.device_taints import DeviceTaints, RuleChange
from gpuprobe.effects.events import effect_body
from gpuprobe.effects.evictions import gpu_index
from gpuprobe.effects.evictor import Done, Evictor
from gpuprobe.kube.api import KubeError
from gpuprobe.report import Action, Finding, NodeReport, PodRef, Severity, format_time

log = logging.getLogger("gpuprobe.kube")
# A failed device taint is tried again this soon, whatever the rounds do.
TAINT_RETRY_SECONDS = 30.0

# Acts whose events wait to be sent, at most (the API server down for long: the oldest go).
MAX_UNTOLD = 256


class Api(device_taints.Api, evictor.Api, Protocol):
    """What acting on GPUs needs of the API, and the events it writes."""

    def create_event(self, event: dict[str, Any]) -> None: ...


class _Step:
    """One of GpuEffects' steps as an applier of the room (`effects.appliers.Applier`)."""

    lane = Lane.ORDINARY

    def __init__(
        self,
        step: Callable[[NodeReport, datetime], None],
        told: Callable[[], list[Finding]] = list,
    ) -> None:
        self._step = step
        self._told = told

    def apply(self, report: NodeReport, at: datetime) -> None:
        """Run the step; raises KubeError on a failed call."""
        self._step(report, at)

    def findings(self) -> list[Finding]:
        """The agent's own findings about this step now."""
        return self._told()


class GpuEffects:
    """One node's device taints and evictions, and what they tell."""

    def __init__(
        self,
        api: Api,
        node: str,
        config: KubernetesConfig,
        remediation: RemediationConfig,
        boot_id: str | None,
        handled: list[KubeError] | None = None,
    ) -> None:
        self.api = api
        self.node = node
        self.events = config.events
        self.taints = (
            DeviceTaints(api, node, config.device_taints) if config.device_taints.enabled else None
        )
        self.evictor = (
            Evictor(api, node, remediation, config.taint.node_selector, boot_id)
            if remediation.evict_pods
            else None
        )

        self.covered: set[str] = set()  # GPU resources whose device taints stand
        self._untold: list[RuleChange | Done] = []  # acts whose events are still to send
        self.handled = handled if handled is not None else []  # counted by the loop
        self.taint_error: KubeError | None = None
        self._retry_at: datetime | None = None
        self._eviction_retry: datetime | None = None

    def appliers(self) -> tuple[list[_Step], list[_Step], list[_Step]]:
        """The appliers to run before the node's own (the device taints), after the node
        taint (the evictions), and last (the events of what was done)."""
        first = [_Step(self.apply_taints, self.taint_findings)] if self.taints else []
        after = [_Step(self.apply_evictions, self.eviction_findings)] if self.evictor else []
        last = [_Step(lambda _, at: self.announce(at))] if first or after else []
        return first, after, last

    def apply_taints(self, report: NodeReport, at: datetime) -> None:
        """The device taints; `covered` the GPU resources whose rules stand (no node taint
        for them). A failed call does not stop the node's own effects: it is counted, said
        (`DEVICE_TAINT_WITHHELD`), covers nothing (the node taint, where enabled, stands in)
        and is tried again within `TAINT_RETRY_SECONDS`."""
        if self.taints is None:
            return
        try:
            self.covered = self.taints.apply(report, at)
        except KubeError as exc:
            self.taints.forget()
            self.covered = set()
            self.taint_error, self._retry_at = exc, at + timedelta(seconds=TAINT_RETRY_SECONDS)
            self.handled.append(exc)
            log.warning(
                "device taints failed",
                extra={"verb": exc.verb, "code": exc.code, "error": exc.message},
            )
        else:
            self.taint_error, self._retry_at = None, None

    def apply_evictions(self, report: NodeReport, at: datetime) -> None:
        """The evictions whose turn has come. A failed call (not the Eviction API's refusal,
        which the evictor paces) is counted and tried again within `TAINT_RETRY_SECONDS`;
        it does not stop the events."""
        if self.evictor is None:
            return
        try:
            self.evictor.apply(report, at)
        except KubeError as exc:
            self.handled.append(exc)
            self._eviction_retry = at + timedelta(seconds=TAINT_RETRY_SECONDS)
            log.warning(
                "evictions failed", extra={"verb": exc.verb, "code": exc.code, "error": exc.message}
            )
        else:
            self._eviction_retry = None

    def forget(self) -> None:
        """Read the rules again before the next write."""
        if self.taints is not None:
            self.taints.forget()

    def next_due(self) -> datetime | None:
        """When a refused eviction or a failed device taint is next tried (the loop wakes
        for it)."""
        times = [t for t in (self._retry_at, self._eviction_retry) if t is not None]
        if self.evictor is not None and (due := self.evictor.next_due()) is not None:
            times.append(due)
        return min(times, default=None)

    # -- telling ------------------------------------------------------------------------------
    def announce(self, at: datetime) -> None:
        """An Event on the node, and on each pod concerned, for every rule made or removed
        and every eviction, refusal and withholding since the last call."""
        changes = self.taints.take_changes() if self.taints is not None else []
        done = self.evictor.take_done() if self.evictor is not None else []
        if not self.events:
            return
        # Told in order; one whose event failed stays first in line for the next attempt.
        self._untold = [*self._untold, *changes, *done][-MAX_UNTOLD:]
        while self._untold:
            item = self._untold[0]
            if isinstance(item, RuleChange):
                self._rule_events(item, at)
            else:
                self._eviction_events(item, at)
            self._untold.pop(0)

    def _send(
        self,
        regarding: dict[str, Any],
        reason: str,
        action: str,
        note: str,
        warning: bool,
        at: datetime,
        what: str,
    ) -> None:

        body = effect_body(self.node, regarding, reason, action, note, warning, at, what)
        try:
            self.api.create_event(body)
        except KubeError as exc:
            if exc.code != "409":  # already there: an earlier try did land
                raise

    def _rule_events(self, change: RuleChange, at: datetime) -> None:
        gpu = gpu_index(change.resource)
        if change.created:
            reason, action, warning = "DeviceTainted", "Tainted", True
            note = (
                f"GPU {gpu} ({change.resource}) has {change.code}: DeviceTaintRule "
                f"{change.name} taints its DRA device {change.device} with "
                f"gpuprobe.io/unhealthy={change.code}:{change.effect}"
            )
        else:
            reason, action, warning = "DeviceTaintRemoved", "Untainted", False
            note = (
                f"GPU {gpu} ({change.resource}): DeviceTaintRule {change.name} removed, the "
                f"device {change.device} is back in service"
            )
        what = f"rule\0{change.name}\0{change.created}"
        self._send(_node(self.node), reason, action, note, warning, at, what)
        for pod in change.pods:
            self._send(_pod(pod), reason, action, note, warning, at, what)

    def _eviction_events(self, done: Done, at: datetime) -> None:
        target = done.target
        name = f"{target.namespace}/{target.pod}"
        gpu = gpu_index(target.resource)
        if done.outcome == "evicted":
            reason, action = "GpuPodEvicted", "Evicted"
            note = f"pod {name} evicted: it held GPU {gpu} ({target.resource}), {target.code}"
        elif done.outcome == "blocked":
            if not done.first:
                return  # one event when the refusals start, not one per retry
            reason, action = "EvictionBlocked", "Evicting"
            note = f"pod {name} on failed GPU {gpu} not evicted yet: {done.detail}"
        elif done.outcome == "withheld":
            reason, action = "EvictionWithheld", "Withheld"
            note = f"pod {name} on failed GPU {gpu} not evicted: {done.detail}"
        else:
            return
        what = f"eviction\0{name}\0{done.outcome}"
        self._send(_node(self.node), reason, action, note, True, at, what)
        # On the pod too (an evicted pod's namespace keeps the event after the pod is gone).
        self._send(_pod_key(target.namespace, target.pod), reason, action, note, True, at, what)

    # -- the agent's own result ---------------------------------------------------------------
    def findings(self) -> list[Finding]:
        """DEVICE_TAINT_WITHHELD while the brake holds a rule back; EVICTION_WITHHELD for each
        pod on a failed GPU that is not evicted (a PDB refuses, the cap, the breaker)."""
        return self.taint_findings() + self.eviction_findings()

    def taint_findings(self) -> list[Finding]:
        """DEVICE_TAINT_WITHHELD while the brake holds a rule back or the calls fail."""
        found: list[Finding] = []
        if self.taint_error is not None:
            e = self.taint_error
            found.append(
                Finding(
                    "DEVICE_TAINT_WITHHELD",
                    Severity.WARNING,
                    f"device taints not brought up to date: {e.verb} {e.code}: {e.message}; "
                    "the node taint, where enabled, stands in for the GPU faults meanwhile",
                    Action.NONE,
                )
            )
        elif self.taints is not None and self.taints.withheld is not None:
            found.append(
                Finding(
                    "DEVICE_TAINT_WITHHELD",
                    Severity.WARNING,
                    f"a DeviceTaintRule is due but withheld: {self.taints.withheld.why()}",
                    Action.NONE,
                )
            )
        return found

    def eviction_findings(self) -> list[Finding]:
        """EVICTION_WITHHELD for each pod on a failed GPU that is not evicted."""
        found: list[Finding] = []
        if self.evictor is None:
            return found
        for _, pending in sorted(self.evictor.pending.items()):
            if pending.refusals:
                t = pending.target
                found.append(
                    Finding(
                        "EVICTION_WITHHELD",
                        Severity.WARNING,
                        f"pod {t.namespace}/{t.pod} holds failed GPU {gpu_index(t.resource)} "
                        f"and is not evicted yet: the API server refused ({pending.refused}); "
                        f"tried {len(pending.tries)} times, retrying at a bounded pace",
                        Action.NONE,
                        t.resource,
                        (PodRef(t.namespace, t.pod),),
                    )
                )
        for _, withheld in sorted(self.evictor.withheld.items()):
            t = withheld.target
            found.append(
                Finding(
                    "EVICTION_WITHHELD",
                    Severity.WARNING,
                    f"pod {t.namespace}/{t.pod} holds failed GPU {gpu_index(t.resource)} and "
                    f"is not evicted: {withheld.why}",
                    Action.NONE,
                    t.resource,
                    (PodRef(t.namespace, t.pod),),
                )
            )
        return found

    def data(self) -> dict[str, Any]:
        """What was done, for the `kubernetes` result's data."""
        facts: dict[str, Any] = {}
        if self.taints is not None:
            facts["device_taints"] = {
                "version": self.taints.version,
                "rules": [
                    {
                        "name": r["metadata"]["name"],
                        "device": r["spec"]["deviceSelector"].get("device"),
                        "resource": r["metadata"].get("annotations", {}).get("gpuprobe.io/gpu"),
                        "code": r["spec"]["taint"].get("value"),
                        "effect": r["spec"]["taint"].get("effect"),
                    }
                    for r in self.taints.rules
                ],
            }
        if self.evictor is not None:
            live = self.evictor.faulty  # evictions told while their GPU is still at fault
            facts["evictions"] = {
                "outcomes": dict(self.evictor.outcomes),
                "evicted_per_gpu": dict(self.evictor.ledger.counts),
                "evicted": [
                    {
                        "pod": f"{t.namespace}/{t.pod}",
                        "resource": t.resource,
                        "time": format_time(at),
                    }
                    for t, at in self.evictor.evicted
                    if t.uuid in live
                ],
                "pending": [f"{ns}/{pod}" for ns, pod in sorted(self.evictor.pending)],
                "spared": [
                    {"pod": f"{s.namespace}/{s.pod}", "resource": s.resource, "why": s.why}
                    for s in self.evictor.spared
                ],
            }
        return facts

    def device_taint_counts(self) -> dict[str, int]:
        """This node's rules by effect (`gpuprobe_device_taints{effect}`)."""
        return device_taints.effects(self.taints.rules) if self.taints is not None else {}

    def eviction_outcomes(self) -> dict[str, int]:
        """Evictions by outcome (`gpuprobe_evictions_total{outcome}`)."""
        return dict(self.evictor.outcomes) if self.evictor is not None else {}


def _node(node: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "name": node}


def _pod(pod: PodRef) -> dict[str, Any]:
    return _pod_key(pod.namespace, pod.pod)


def _pod_key(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name}
