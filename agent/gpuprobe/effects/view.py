"""The node as the effects last saw it, and the writes that keep that view true.

`NodeView` remembers the node's conditions gpuprobe owns and its taints from the last answer
of the API server, so that an unchanged round costs no request; `forget` makes the next write
read the node again (after a failed call: the write may have landed, or another writer came).
`patch_taints` writes a new taint list with the node's resourceVersion and reads and decides
again when the node changed under it (409), counting each conflict it handled.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

from gpuprobe.kube.api import KubeError

CONFLICT_RETRIES = 3

Taints = list[dict[str, Any]]


class Api(Protocol):
    """What the effects need of the API (`gpuprobe.kube.api.KubeApi`)."""

    def get_node(self, name: str) -> dict[str, Any]: ...
    def list_nodes(self, selector: str) -> list[dict[str, Any]]: ...
    def patch_node_status(self, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...
    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...
    def create_event(self, event: dict[str, Any]) -> None: ...
    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> None: ...


class NodeView:
    """One node's conditions (those of `owned` types) and taints, as last seen."""

    def __init__(self, api: Api, node: str, owned: Collection[str]) -> None:
        self.api = api
        self.node = node
        self.owned = frozenset(owned)
        self.conditions: list[dict[str, Any]] | None = None  # None: read the node first
        self.taints: Taints | None = None
        # Calls that failed but were handled here (a conflict re-read and re-applied): the
        # loop counts them in gpuprobe_kubernetes_errors_total with the ones that surface.
        self.handled: list[KubeError] = []

    def forget(self) -> None:
        """Read the node again before the next write instead of trusting what was seen."""
        self.conditions = None
        self.taints = None

    def remember(self, node: Mapping[str, Any]) -> None:
        """Keep what the API server answered about the node."""
        found = node.get("status", {}).get("conditions") or []
        self.conditions = [c for c in found if c.get("type") in self.owned]
        self.taints = list(node.get("spec", {}).get("taints") or [])

    def known_conditions(self) -> list[dict[str, Any]]:
        """The node's conditions gpuprobe owns, read from the API server when not known."""
        if self.conditions is None:
            self.remember(self.api.get_node(self.node))
        assert self.conditions is not None
        return self.conditions

    def patch_conditions(self, patch: list[dict[str, Any]]) -> None:
        """Write conditions to the node's status (a strategic merge by type)."""
        self.remember(self.api.patch_node_status(self.node, {"status": {"conditions": patch}}))

    def patch_taints(self, decide: Callable[[Taints], Taints | None]) -> Taints | None:
        """Read the node, `decide` its taints, and write them with the node's resourceVersion,
        reading and deciding again when the node changed under us (409). The taints written,
        or None when `decide` wanted no change."""
        for _ in range(CONFLICT_RETRIES):
            node = self.api.get_node(self.node)
            self.remember(node)
            new = decide(list(node.get("spec", {}).get("taints") or []))
            if new is None:
                return None
            patch = {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": new},
            }
            try:
                self.remember(self.api.patch_node(self.node, patch))
            except KubeError as exc:
                if exc.code == "409":  # the node changed under us: read again, decide again
                    self.handled.append(exc)
                    continue
                raise
            return new
        raise KubeError("patch", "409", f"node {self.node} kept changing")
