"""The fleet brake: no new `gpuprobe.io/unhealthy` taint while too much of the fleet carries one.

`brake` is pure (the listed nodes to a `Brake`); `FleetBrake` asks the API server for the fleet
when a new taint is due, at most every `BRAKE_RECHECK_SECONDS` while it holds, and says so in
the agent's own finding (`TAINT_WITHHELD`). The brake is there so that a wrong verdict of the
agent (a bad release, a driver update read wrong) cannot take a whole fleet out of scheduling.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from gpuprobe.config import TaintConfig
from gpuprobe.effects.taints import TAINT_KEY, ours
from gpuprobe.report import Action, Finding, Severity

log = logging.getLogger("gpuprobe.kube")

# While the brake holds, the fleet is listed again at most this often (a list of every GPU
# node from every withheld agent each round would load the API server the brake protects).
BRAKE_RECHECK_SECONDS = 120.0


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


class FleetApi(Protocol):
    """What the brake needs of the API (`gpuprobe.kube.api.KubeApi`)."""

    def list_nodes(self, selector: str) -> list[dict[str, Any]]: ...


class FleetBrake:
    """The brake for one node: whether a new taint may go on now, and what it withheld."""

    def __init__(self, api: FleetApi, node: str, config: TaintConfig) -> None:
        self.api = api
        self.node = node
        self.config = config
        self.withheld: Brake | None = None
        self._at: datetime | None = None

    def resting(self, at: datetime) -> bool:
        """Whether the brake holds and the fleet need not be listed again yet."""
        since = (at - self._at).total_seconds() if self._at is not None else None
        return self.withheld is not None and since is not None and since < BRAKE_RECHECK_SECONDS

    def engaged(self, at: datetime) -> bool:
        """List the fleet now: whether a new taint is withheld."""
        fleet = self.api.list_nodes(self.config.node_selector)
        found = brake(fleet, self.node, self.config.max_unhealthy_fraction)
        self.withheld = found if found.engaged else None
        self._at = at
        if found.engaged:
            log.warning("taint withheld", extra={"node": self.node, "why": found.why()})
        return found.engaged

    def release(self) -> None:
        """Nothing is withheld (no taint due, or the node carries it)."""
        self.withheld = None

    def findings(self) -> list[Finding]:
        """The agent's own finding about a withheld taint (TAINT_WITHHELD), if any."""
        if self.withheld is None:
            return []
        return [
            Finding(
                "TAINT_WITHHELD",
                Severity.WARNING,
                f"a {TAINT_KEY} taint is due but withheld: {self.withheld.why()}",
                Action.NONE,
            )
        ]
