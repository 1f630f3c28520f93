"""Evicting the pods that hold a failed GPU: the applier (docs/kubernetes.md, "Eviction").

`Evictor.apply` reads the node's pods when the report changed, plans (`effects.evictions`), and
asks the Eviction API (policy/v1) for each pod whose turn has come: a 201 evicted it (the
per-GPU count goes up, in a state file that survives restarts, per boot; the Node's record
that the fleet's breaker reads gets the time), a 429 (the PodDisruptionBudget allows no
disruption now) is retried at `evictions.retry_after`'s pace, never by deleting the pod, a
404 means the pod went by itself. Before a pod's first try, the per-GPU cap and the fleet's
breaker may withhold it; either way the agent says so (`withheld`, `outcomes`, events).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from gpuprobe.config import RemediationConfig
from gpuprobe.effects import evictions
from gpuprobe.effects.dra import gpu_faults, gpu_uuid
from gpuprobe.effects.evictions import PodFacts, PodKey, Target
from gpuprobe.host import state_files
from gpuprobe.kube.api import KubeError
from gpuprobe.report import NodeReport

log = logging.getLogger("gpuprobe.kube")

LEDGER_FILE = "evictions.json"
LEDGER_FORMAT = 1
MAX_PODS = 500
# The fleet is listed for the breaker at most this often while it holds.
BREAKER_RECHECK_SECONDS = 120.0
MAX_TOLD = 32  # evictions the agent's own result lists (the latest)
OUTCOMES = ("evicted", "blocked", "gone", "withheld", "failed")


class Api(Protocol):
    """What eviction needs of the API (`gpuprobe.kube.api.KubeApi`)."""

    def get_node(self, name: str) -> dict[str, Any]: ...
    def list_nodes(self, selector: str) -> list[dict[str, Any]]: ...
    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...
    def list_node_pods(self, node: str, most: int, keep: Any) -> tuple[list[Any], bool]: ...
    def evict(self, namespace: str, pod: str) -> None: ...


class Ledger:
    """Per GPU during this boot: the pods evicted from it and the eviction requests made for
    it, kept in a state file across agent restarts (a new boot starts afresh: the GPU was
    reset with the node)."""

    def __init__(self, directory: str, boot_id: str | None) -> None:
        self.path = Path(directory) / LEDGER_FILE
        self.boot_id = boot_id
        self.counts: dict[str, int] = {}  # pods evicted
        self.tries: dict[str, int] = {}  # eviction requests, whatever their answer
        self.error: str | None = None
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            self.error = f"eviction ledger {self.path}: {exc}"
            log.warning("eviction ledger unreadable", extra={"error": self.error})
            return
        if (
            isinstance(raw, dict)
            and raw.get("format") == LEDGER_FORMAT
            and raw.get("boot_id") == boot_id
            and boot_id is not None
        ):
            self.counts = _counts(raw.get("gpus"))
            self.tries = _counts(raw.get("tries"))

    def add(self, uuid: str) -> None:
        """One more pod evicted from this GPU; written at once."""
        self.counts[uuid] = self.counts.get(uuid, 0) + 1
        self._save()

    def tried(self, uuid: str) -> None:
        """One more eviction request for a pod on this GPU; written at once."""
        self.tries[uuid] = self.tries.get(uuid, 0) + 1
        self._save()

    def _save(self) -> None:
        document = {
            "format": LEDGER_FORMAT,
            "boot_id": self.boot_id,
            "gpus": self.counts,
            "tries": self.tries,
        }
        try:
            fd, tmp = tempfile.mkstemp(prefix=".evictions-", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(document, f, indent=1, sort_keys=True)
                f.write("\n")
            os.replace(tmp, self.path)
        except OSError as exc:
            self.error = f"eviction ledger {self.path}: {(exc.strerror or str(exc)).lower()}"
            state_files.saved(str(self.path), self.error)
            return
        self.error = None
        state_files.saved(str(self.path), None)


def _counts(value: object) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, int) and v > 0}


@dataclass
class Pending:
    """A pod whose eviction is under way: its target, refusals so far, when to try next."""

    target: Target
    next_at: datetime
    refusals: int = 0
    tries: list[datetime] = field(default_factory=list)
    refused: str = ""  # the API server's words for the last refusal


@dataclass(frozen=True)
class Withheld:
    """A pod on a failed GPU that is not evicted now, and why."""

    target: Target
    why: str
    by_breaker: bool = False  # the fleet's breaker (looked at again), not the per-GPU cap


@dataclass(frozen=True)
class Done:
    """An eviction's outcome this round: for the events, the metric and the findings."""

    target: Target
    outcome: str  # evicted, blocked, gone, withheld
    detail: str
    first: bool = True  # a refusal: the first of a run (the one an event tells)


class Evictor:
    """Evicts the pods that hold a failed GPU, within the per-GPU cap and the fleet's breaker."""

    def __init__(
        self,
        api: Api,
        node: str,
        config: RemediationConfig,
        fleet_selector: str,
        boot_id: str | None,
    ) -> None:
        self.api = api
        self.node = node
        self.config = config
        self.fleet_selector = fleet_selector
        self.ledger = Ledger(config.state_dir, boot_id)
        self.pending: dict[PodKey, Pending] = {}
        self.withheld: dict[PodKey, Withheld] = {}
        self.spared: list[evictions.Spared] = []
        self.outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        self.done: list[Done] = []  # since the caller last took them
        self.evicted: list[tuple[Target, datetime]] = []  # the latest, MAX_TOLD at most
        self.faulty: set[str] = set()  # the GPUs (UUIDs) at fault in the latest report
        self._report: NodeReport | None = None
        self._breaker: evictions.FleetBreaker | None = None
        self._breaker_at: datetime | None = None

    def apply(self, report: NodeReport, at: datetime) -> None:
        """Plan against `report` (the node's pods read again when it changed) and make the
        evictions whose turn has come. Raises KubeError on a failed call other than the
        Eviction API's answers it handles (201, 429, 404)."""
        if report is not self._report:
            self.faulty = {gpu_uuid(f.resource) or "" for f in gpu_faults(report)}
        if report is not self._report or self._recheck_due(at):
            if not gpu_faults(report) and not self.pending:
                self._report, self.withheld, self.spared = report, {}, []
                return
            pods, _ = self.api.list_node_pods(self.node, MAX_PODS, evictions.pod_facts)
            facts: dict[PodKey, PodFacts] = {(p.namespace, p.name): p for p in pods}
            self._plan(report, facts, at)
            self._report = report
        for key, pending in sorted(self.pending.items()):
            if pending.next_at <= at:
                self._try(key, pending, at)

    def next_due(self) -> datetime | None:
        """When the next refused eviction is to be tried again, or the breaker looked at
        again for the pods it holds (None: none waits)."""
        times = [p.next_at for p in self.pending.values()]
        if self._breaker_held() and self._breaker_at is not None:
            times.append(self._breaker_at + timedelta(seconds=BREAKER_RECHECK_SECONDS))
        return min(times, default=None)

    def _breaker_held(self) -> bool:
        return any(w.by_breaker for w in self.withheld.values())

    def _recheck_due(self, at: datetime) -> bool:
        """Whether the breaker is to be asked again for the pods it holds."""
        if not self._breaker_held() or self._breaker_at is None:
            return False
        return (at - self._breaker_at).total_seconds() >= BREAKER_RECHECK_SECONDS

    def take_done(self) -> list[Done]:
        """The outcomes since the last call (then forgotten)."""
        taken, self.done = self.done, []
        return taken

    def _plan(self, report: NodeReport, facts: Mapping[PodKey, PodFacts], at: datetime) -> None:
        chosen, self.spared = evictions.targets(report, facts)
        wanted = {t.key for t in chosen}
        for key in [k for k in self.pending if k not in wanted]:
            del self.pending[key]  # healthy again, or the pod went: nothing more to do
        self.withheld = {k: w for k, w in self.withheld.items() if k in wanted}
        for target in chosen:
            if target.key in self.pending:
                continue
            before = self.withheld.get(target.key)
            if before is not None and not before.by_breaker:
                continue  # the cap holds for the rest of the boot
            capped = self._cap(target)
            why = capped or self._braked(at)
            if why:
                self.withheld[target.key] = Withheld(target, why, not capped)
                if before is None:  # told once, not at every look
                    self._count(Done(target, "withheld", why))
                    log.warning(
                        "eviction withheld",
                        extra={"pod": f"{target.namespace}/{target.pod}", "why": why},
                    )
                continue
            self.withheld.pop(target.key, None)
            self.pending[target.key] = Pending(target, at)

    def _cap(self, target: Target) -> str:
        done = self.ledger.counts.get(target.uuid, 0)
        tried = self.ledger.tries.get(target.uuid, 0)
        if tried >= self.config.max_eviction_requests_per_gpu:
            return (
                f"{tried} eviction requests were already made for GPU "
                f"{evictions.gpu_index(target.resource)} this boot "
                f"(remediation.max_eviction_requests_per_gpu: "
                f"{self.config.max_eviction_requests_per_gpu})"
            )
        if done < self.config.max_evictions_per_gpu:
            return ""
        return (
            f"{done} pods were already evicted from GPU {evictions.gpu_index(target.resource)} "
            f"this boot (remediation.max_evictions_per_gpu: "
            f"{self.config.max_evictions_per_gpu}): the GPU needs a repair, not more evictions"
        )

    def _braked(self, at: datetime) -> str:
        recheck = self._breaker_at is None or (
            (at - self._breaker_at).total_seconds() >= BREAKER_RECHECK_SECONDS
            or self._breaker is None
            or not self._breaker.engaged
        )
        if recheck:
            nodes = self.api.list_nodes(self.fleet_selector)
            count = evictions.fleet_evictions(nodes, at, self.config.fleet_window_seconds)
            self._breaker = evictions.FleetBreaker(
                count, self.config.fleet_max_evictions, self.config.fleet_window_seconds
            )
            self._breaker_at = at
        assert self._breaker is not None
        return self._breaker.why() if self._breaker.engaged else ""

    def _try(self, key: PodKey, pending: Pending, at: datetime) -> None:
        target = pending.target
        tried = self.ledger.tries.get(target.uuid, 0)
        if tried >= self.config.max_eviction_requests_per_gpu:
            del self.pending[key]
            why = (
                f"{tried} eviction requests were made for GPU "
                f"{evictions.gpu_index(target.resource)} this boot "
                f"(remediation.max_eviction_requests_per_gpu: "
                f"{self.config.max_eviction_requests_per_gpu}); the last refusal: "
                f"{pending.refused or 'none'}"
            )
            self.withheld[key] = Withheld(target, why)
            self._count(Done(target, "withheld", why))
            log.warning("eviction given up", extra={"pod": f"{target.namespace}/{target.pod}"})
            return
        pending.tries.append(at)
        self.ledger.tried(target.uuid)
        try:
            self.api.evict(target.namespace, target.pod)
        except KubeError as exc:
            if exc.code == "429":
                pending.refusals += 1
                pending.refused = exc.message
                wait = evictions.retry_after(pending.refusals)
                pending.next_at = at + timedelta(seconds=wait)
                self._count(Done(target, "blocked", exc.message, pending.refusals == 1))
                log.warning(
                    "eviction refused",
                    extra={"pod": f"{target.namespace}/{target.pod}", "why": exc.message},
                )
                return
            if exc.code == "404":
                del self.pending[key]
                self._count(Done(target, "gone", "the pod was already gone"))
                return
            # Any other failure (a 403 where the grant was taken away, a 5xx, a timeout):
            # said like a refusal, tried again at the same pace, and surfaced to be counted.
            pending.refusals += 1
            pending.refused = f"{exc.code}: {exc.message}"
            pending.next_at = at + timedelta(seconds=evictions.retry_after(pending.refusals))
            self._count(Done(target, "failed", pending.refused, pending.refusals == 1))
            raise
        del self.pending[key]
        self.ledger.add(target.uuid)
        self.evicted = [*self.evicted, (target, at)][-MAX_TOLD:]
        self._count(Done(target, "evicted", f"it held GPU {evictions.gpu_index(target.resource)}"))
        log.warning("pod evicted", extra={"pod": f"{target.namespace}/{target.pod}"})
        node = self.api.get_node(self.node)
        self.api.patch_node(
            self.node,
            evictions.record(
                node, at, self.config.fleet_window_seconds, self.config.fleet_max_evictions
            ),
        )
        if self._breaker is not None:  # this eviction counts toward the next check at once
            self._breaker = evictions.FleetBreaker(
                self._breaker.evictions + 1, self._breaker.most, self._breaker.window
            )

    def _count(self, done: Done) -> None:
        self.outcomes[done.outcome] = self.outcomes.get(done.outcome, 0) + 1
        self.done.append(done)
