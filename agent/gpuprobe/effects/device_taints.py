"""DeviceTaintRules for failed GPUs: the applier (docs/kubernetes.md, "Device taints").

`DeviceTaints.apply` brings this node's rules to what a report wants (`effects.dra` plans): it
asks discovery once which version serves DeviceTaintRules (v1, else v1beta2; neither: it
writes nothing to resource.k8s.io and covers no GPU, so the node taint stays as before),
reads this node's ResourceSlices, lists gpuprobe's rules of this node at start (and after any
failure) so stale ones are pruned, and creates and deletes rules. Rules of other nodes and
rules that are not gpuprobe's are never read for change, let alone written. A new GPU is
quarantined only while the brake (the fleet's GPUs quarantined by gpuprobe) allows it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from gpuprobe.config import DeviceTaintConfig
from gpuprobe.effects import dra
from gpuprobe.kube.api import KubeError
from gpuprobe.report import Finding, NodeReport, PodRef

log = logging.getLogger("gpuprobe.kube")
T = TypeVar("T")

# Discovery is asked again this often (a cluster upgraded from 1.36 to 1.37 serves v1).
REDISCOVER_SECONDS = 600.0
# The brake lists the fleet's slices and rules at most this often while it holds.
BRAKE_RECHECK_SECONDS = 120.0
# Slices and rules read, at most (a fleet of 10,000 nodes with a slice each fits).
MOST = 20000


class Api(Protocol):
    """What device taints need of the API (`gpuprobe.kube.api.KubeApi`)."""

    def get_node(self, name: str) -> dict[str, Any]: ...
    def api_resources(self, group: str) -> dict[str, list[str]]: ...
    def list_objects(
        self, path: str, labels: str | None = None, fields: str | None = None, most: int = 5000
    ) -> list[dict[str, Any]]: ...
    def each_object(
        self,
        path: str,
        keep: Callable[[dict[str, Any]], T],
        labels: str | None = None,
        fields: str | None = None,
        most: int = 5000,
    ) -> list[T]: ...
    def create_object(self, path: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def delete_object(self, path: str) -> None: ...


@dataclass(frozen=True)
class RuleChange:
    """A rule this agent created or deleted: for the events on the node and the pods."""

    created: bool
    name: str
    device: str
    resource: str  # the GPU's `gpu:<index>:<uuid>`
    code: str
    effect: str
    pods: tuple[PodRef, ...] = ()


def _slice_version(resources: Mapping[str, list[str]]) -> str | None:
    """The version to read ResourceSlices at (their devices' attributes are flat in both)."""
    return next((v for v in ("v1", "v1beta2") if "resourceslices" in resources.get(v, [])), None)


class DeviceTaints:
    """Keeps one node's DeviceTaintRules as the reports' GPU faults want them."""

    def __init__(self, api: Api, node: str, config: DeviceTaintConfig) -> None:
        self.api = api
        self.node = node
        self.config = config
        self.version: str | None = None  # the rules' version; None: not served (or not asked)
        self.slice_version: str | None = None
        self._discovered: datetime | None = None
        self._node_uid: str | None = None
        self._known: list[dict[str, Any]] | None = None  # this node's rules of ours, None: re-list
        self._last_due: dict[str, datetime] = {}
        self.devices: list[dra.DraDevice] = []
        self.withheld: dra.QuarantineBrake | None = None
        self._braked_at: datetime | None = None
        self.changes: list[RuleChange] = []  # since the caller last took them

    @property
    def rules(self) -> list[dict[str, Any]]:
        """This node's rules of gpuprobe's, as last seen (for the metric and the report)."""
        return list(self._known or [])

    def forget(self) -> None:
        """List the rules again before the next write (a write failed, or may have landed)."""
        self._known = None

    def apply(self, report: NodeReport, at: datetime) -> set[str]:
        """Bring the node's rules up to date with `report`; the GPU resources whose rules
        stand (they add no node taint). Raises KubeError on a failed call."""
        if not self._served(at):
            return set()
        faults = dra.gpu_faults(report)
        if not faults and self._known == []:
            self.withheld = None
            return set()  # nothing failed, nothing of ours: no request at all
        self.devices = self._read_devices()
        if self._known is None:
            self._known = self._list_own()
            for rule in self._known:  # after a restart, the clear delay counts from now
                self._last_due.setdefault(str(rule["metadata"]["name"]), at)
        want = dra.wanted(
            report, self.devices, self.node, self._uid(), self.config.effect, str(self.version)
        )
        for name in want:
            self._last_due[name] = at
        todo = dra.plan(
            want, self._known, self._last_due, at, self.config.clear_after_seconds, self.devices
        )
        held = {dra.gpu_uuid(str(w.finding.resource)) for w in want.values()} & self._held()
        fresh = [w for w in todo.create if dra.gpu_uuid(w.finding.resource) not in held]
        if fresh and self._braked(at):
            blocked = {w.name for w in fresh}
            todo = dra.RulePlan(todo.delete, tuple(w for w in todo.create if w.name not in blocked))
        elif not fresh:
            self.withheld = None
        for name in todo.delete:
            self._delete(name)
        for wanted_rule in todo.create:
            self._create(wanted_rule)
        standing = {str(r["metadata"]["name"]) for r in self._known}
        return {w.finding.resource for name, w in want.items() if name in standing}

    # -- discovery and reads ------------------------------------------------------------------
    def _served(self, at: datetime) -> bool:
        stale = (
            self._discovered is None
            or (at - self._discovered).total_seconds() >= REDISCOVER_SECONDS
        )
        if stale:
            resources = self.api.api_resources(dra.GROUP)
            version = dra.rule_version(resources)
            if version != self.version:
                log.info("device taints", extra={"version": version or "not served"})
                self._known = None
            self.version, self.slice_version = version, _slice_version(resources)
            self._discovered = at
        return self.version is not None and self.slice_version is not None

    def _read_devices(self) -> list[dra.DraDevice]:
        slices = self.api.list_objects(
            f"/apis/{dra.GROUP}/{self.slice_version}/resourceslices",
            fields=f"spec.nodeName={self.node}",
        )
        return dra.published(slices, self.node)

    def _list_own(self) -> list[dict[str, Any]]:
        found = self.api.list_objects(
            self._path(),
            labels=f"{dra.MANAGED_BY}={dra.OURS},{dra.NODE_LABEL}={dra.node_label(self.node)}",
        )
        return [r for r in found if dra.of_node(r, self.node)]

    def _uid(self) -> str:
        if self._node_uid is None:
            self._node_uid = str(self.api.get_node(self.node)["metadata"]["uid"])
        return self._node_uid

    def _held(self) -> set[str | None]:
        return {
            dra.gpu_uuid(str(r["metadata"].get("annotations", {}).get(dra.GPU_ANNOTATION, "")))
            for r in self._known or []
        }

    def _braked(self, at: datetime) -> bool:
        """Whether the brake holds new rules (the fleet listed at most every 2 minutes while
        it holds)."""
        since = (at - self._braked_at).total_seconds() if self._braked_at else None
        if self.withheld is not None and since is not None and since < BRAKE_RECHECK_SECONDS:
            return True
        gpus = self.api.each_object(
            f"/apis/{dra.GROUP}/{self.slice_version}/resourceslices", dra.slice_gpus, most=MOST
        )
        rules = self.api.list_objects(
            self._path(), labels=f"{dra.MANAGED_BY}={dra.OURS}", most=MOST
        )
        brake = dra.brake(gpus, rules, self.config.max_quarantined_fraction)
        self._braked_at = at
        self.withheld = brake if brake.engaged else None
        if brake.engaged:
            log.warning("device taint withheld", extra={"node": self.node, "why": brake.why()})
        return brake.engaged

    # -- writes -------------------------------------------------------------------------------
    def _path(self, name: str | None = None) -> str:
        base = f"/apis/{dra.GROUP}/{self.version}/{dra.RESOURCE}"
        return f"{base}/{name}" if name else base

    def _create(self, rule: dra.WantedRule) -> None:
        try:
            made = self.api.create_object(self._path(), rule.body)
        except KubeError as exc:
            if exc.code != "409":
                raise
            # A rule of that name is there: an earlier try of ours landed, or (never assumed)
            # someone else's has the name. Ours are listed again; another's is left alone.
            self._known = self._list_own()
            if not any(r["metadata"]["name"] == rule.name for r in self._known):
                log.warning("device taint name taken", extra={"rule": rule.name})
            return
        assert self._known is not None
        self._known = [r for r in self._known if r["metadata"]["name"] != rule.name] + [made]
        log.warning(
            "device tainted",
            extra={"node": self.node, "rule": rule.name, "device": rule.device.name},
        )
        self.changes.append(self._change(True, rule.name, made, rule.finding))

    def _delete(self, name: str) -> None:
        try:
            self.api.delete_object(self._path(name))
        except KubeError as exc:
            if exc.code != "404":  # already gone: someone deleted it, or an earlier try did
                raise
        assert self._known is not None
        gone = next(r for r in self._known if r["metadata"]["name"] == name)
        self._known = [r for r in self._known if r["metadata"]["name"] != name]
        self._last_due.pop(name, None)
        log.info("device taint removed", extra={"node": self.node, "rule": name})
        self.changes.append(self._change(False, name, gone, None))

    def _change(
        self, created: bool, name: str, rule: Mapping[str, Any], finding: Finding | None
    ) -> RuleChange:
        spec = rule.get("spec") or {}
        taint = spec.get("taint") or {}
        resource = str((rule.get("metadata") or {}).get("annotations", {}).get(dra.GPU_ANNOTATION))
        return RuleChange(
            created,
            name,
            str((spec.get("deviceSelector") or {}).get("device")),
            resource,
            str(taint.get("value")),
            str(taint.get("effect")),
            finding.pods if finding is not None else (),
        )

    def take_changes(self) -> list[RuleChange]:
        """The rules created and deleted since the last call (then forgotten)."""
        taken, self.changes = self.changes, []
        return taken


def effects(rules: list[dict[str, Any]]) -> dict[str, int]:
    """This node's rules counted by effect (`gpuprobe_device_taints{effect}`)."""
    counts: dict[str, int] = {}
    for rule in rules:
        effect = str(((rule.get("spec") or {}).get("taint") or {}).get("effect"))
        counts[effect] = counts.get(effect, 0) + 1
    return counts
