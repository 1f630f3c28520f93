"""The opt-in taint `gpuprobe.io/unhealthy=<CODE>:<effect>`, and the brake that withholds it.

Pure: `due` finds the code that calls for the taint, `decide` the node's new taint list (or
None to leave it be), `brake` whether too much of the fleet is already tainted for a new one.
gpuprobe only ever adds, changes or removes the taint with its own key; every other taint on
the node stays as it is, in its place.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuprobe.config import TaintConfig
from gpuprobe.report import NodeReport, Severity, format_time

TAINT_KEY = "gpuprobe.io/unhealthy"


def due(report: NodeReport, codes: Sequence[str], covered: Collection[str] = ()) -> str | None:
    """The first of `codes` (in their configured order) CRITICAL in the report, if any;
    findings on a `covered` resource (a GPU whose device taint stands) do not count."""
    critical = {
        f.code
        for _, f in report.findings()
        if f.severity is Severity.CRITICAL and f.resource not in covered
    }
    return next((code for code in codes if code in critical), None)


def ours(taints: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """gpuprobe's taint among the node's, if it carries one."""
    return next((t for t in taints if t.get("key") == TAINT_KEY), None)


def taint(code: str, effect: str, now: datetime) -> dict[str, Any]:
    """gpuprobe's taint for `code` (NoExecute taints carry the time they were added)."""
    made: dict[str, Any] = {"key": TAINT_KEY, "value": code, "effect": effect}
    if effect == "NoExecute":
        made["timeAdded"] = format_time(now)
    return made


def decide(
    taints: Sequence[Mapping[str, Any]],
    code: str | None,
    clear_for: float,
    config: TaintConfig,
    now: datetime,
) -> list[dict[str, Any]] | None:
    """The node's taint list after this round, or None when it stays as it is.

    `code`: the code due now (None: none); `clear_for`: seconds since one was last due.
    """
    mine = ours(taints)
    if code is not None:
        if mine is not None and (mine.get("value"), mine.get("effect")) == (code, config.effect):
            return None
        wanted = taint(code, config.effect, now)
        if mine is None:
            return [dict(t) for t in taints] + [wanted]
        return [wanted if t is mine else dict(t) for t in taints]
    if mine is not None and clear_for >= config.clear_after_seconds:
        return [dict(t) for t in taints if t is not mine]
    return None


@dataclass(frozen=True)
class Brake:
    """The fleet as the brake sees it: the selected nodes and how many carry the taint."""

    nodes: int
    tainted: int
    fraction: float

    @property
    def engaged(self) -> bool:
        """Whether a new taint is withheld: at least `fraction` of the nodes carry it."""
        return self.tainted >= self.fraction * max(self.nodes, 1)

    def why(self) -> str:
        """The brake's state in words, for the finding, the event and the log."""
        return (
            f"{self.tainted} of {self.nodes} GPU nodes already carry {TAINT_KEY} (the brake "
            f"holds new taints at {self.fraction:.0%} or more)"
        )


def brake(nodes: Sequence[Mapping[str, Any]], node: str, fraction: float) -> Brake:
    """The brake over the nodes the selector listed (`node` itself counted among them)."""
    names = {str(n.get("metadata", {}).get("name")) for n in nodes}
    tainted = sum(
        1
        for n in nodes
        if n.get("metadata", {}).get("name") != node and ours(n.get("spec", {}).get("taints") or [])
    )
    return Brake(len(names | {node}), tainted, fraction)
