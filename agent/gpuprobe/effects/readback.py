"""What gpuprobe set on the nodes, read back: `audit --kubeconfig` shows each GPU node's
gpuprobe conditions and taint (`audit --json` under `kubernetes.nodes`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuprobe.config import KubernetesConfig
from gpuprobe.effects.conditions import groups
from gpuprobe.effects.taints import TAINT_KEY
from gpuprobe.kube.api import Access, KubeApi
from gpuprobe.printable import screen


@dataclass(frozen=True)
class NodeSignals:
    """What gpuprobe set on one node: its conditions (by type) and its taint."""

    node: str
    conditions: list[dict[str, Any]]
    taints: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        """As `audit --json` writes it under `kubernetes.nodes`."""
        return {"node": self.node, "conditions": self.conditions, "taints": self.taints}


def read_signals(access: Access, config: KubernetesConfig) -> list[NodeSignals]:
    """Every node the brake's selector picks, with the conditions and taint gpuprobe owns."""
    api = KubeApi(access, config.timeout_seconds)
    try:
        nodes = api.list_nodes(config.taint.node_selector)
    finally:
        api.close()
    return [signals(n, groups(config)) for n in nodes]


def signals(node: Mapping[str, Any], groups: Mapping[str, Sequence[str]]) -> NodeSignals:
    """One node's gpuprobe conditions (in the configured order) and taints."""
    found = {c.get("type"): c for c in node.get("status", {}).get("conditions") or []}
    keep = ("type", "status", "reason", "message", "lastTransitionTime")
    return NodeSignals(
        str(node.get("metadata", {}).get("name")),
        [{k: found[t].get(k) for k in keep} for t in groups if t in found],
        [dict(t) for t in node.get("spec", {}).get("taints") or [] if t.get("key") == TAINT_KEY],
    )


def render_signals(found: Sequence[NodeSignals]) -> str:
    """The nodes' gpuprobe conditions and taints as text for `audit`: the nodes with a
    condition not True or a taint first, each with its reasons."""

    def bad(n: NodeSignals) -> bool:
        return bool(n.taints) or any(c["status"] != "True" for c in n.conditions)

    lines = ["", f"kubernetes  {len(found)} GPU nodes, {sum(map(bad, found))} not ready or tainted"]
    for n in sorted(found, key=lambda n: (not bad(n), n.node)):
        states = ", ".join(f"{c['type']}={c['status']}" for c in n.conditions) or "no conditions"
        taints = "".join(f"  TAINT {t['key']}={t.get('value', '')}:{t['effect']}" for t in n.taints)
        lines.append(f"  {n.node}  {states}{taints}")
        for c in n.conditions:
            if c["status"] != "True":
                lines.append(f"      {c['type']} {c['reason']}: {c['message']}")
    return screen(lines)
