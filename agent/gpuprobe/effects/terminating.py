"""The taint `gpuprobe.io/terminating=<kind>:NoSchedule` of a node the cloud is taking away.

Pure: `wanted` reads the results of the checks whose records announce the node's end
(`notices`: the lifecycle check's), `decide` the node's new taint list (or None to leave it
be), `urgent` whether the change is a notice that goes before the node's other updates
(`gpuprobe.effects.budget.Lane.NOTICE`: adding or changing it). Unlike `gpuprobe.io/unhealthy`
it stands outside the fleet brake: the brake is there so that a wrong verdict of the agent (a
bad release, a driver update read wrong) cannot take a whole fleet out of scheduling; a
provider's notice is no verdict of the agent but the provider's own word that this node goes,
and when many spot nodes are reclaimed at once, keeping new pods off every one of them is
exactly what is wanted. It is removed at the node's next update once the notice is gone (a
check that could not ask keeps it: an unknown is no "gone"), with no clear delay: the node is
not broken, it was going away.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuprobe.checks import registry
from gpuprobe.report import NodeReport, Status

TERMINATING_KEY = "gpuprobe.io/terminating"
EFFECT = "NoSchedule"


class Keep:
    """The taint stays as it is: the lifecycle check could not tell (UNKNOWN, not run)."""


KEEP = Keep()


def wanted(report: NodeReport) -> str | Keep | None:
    """The kind the taint should name (None: no taint), or KEEP when the report cannot say.

    The codes announcing the node's end and their kinds are the checks' records' (`notices`:
    the lifecycle check's, the most urgent first); the taint names the first present. A
    check that announces them and is UNKNOWN, or not in the report, keeps the taint."""
    announced = registry.notices()
    codes: set[str] = set()
    for name in dict.fromkeys(check for check, _, _ in announced):
        result = report.check(name)
        if result is None or result.status is Status.UNKNOWN:
            return KEEP
        codes |= {f.code for f in result.findings}
    return next((kind for _, code, kind in announced if code in codes), None)


def ours(taints: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The terminating taint among the node's, if it carries one."""
    return next((t for t in taints if t.get("key") == TERMINATING_KEY), None)


def decide(
    taints: Sequence[Mapping[str, Any]], kind: str | Keep | None
) -> list[dict[str, Any]] | None:
    """The node's taint list with the terminating taint for `kind` (removed for None), or None
    when it stays as it is. Every other taint keeps its place."""
    if isinstance(kind, Keep):
        return None
    mine = ours(taints)
    if kind is None:
        return None if mine is None else [dict(t) for t in taints if t is not mine]
    made = {"key": TERMINATING_KEY, "value": kind, "effect": EFFECT}
    if mine is not None and (mine.get("value"), mine.get("effect")) == (kind, EFFECT):
        return None
    if mine is None:
        return [dict(t) for t in taints] + [made]
    return [made if t is mine else dict(t) for t in taints]


def urgent(taints: Sequence[Mapping[str, Any]] | None, kind: str | Keep | None) -> bool:
    """Whether the report asks for the taint to be added or changed on a node whose taints
    are `taints` (None: not known since the last failed write): a notice, which goes before
    the node's other updates. Taking the taint back is no notice and waits its turn."""
    if not isinstance(kind, str):
        return False
    return taints is None or decide(taints, kind) is not None
