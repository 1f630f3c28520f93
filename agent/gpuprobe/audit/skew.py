"""Skew: for each fact, the value most nodes share and the nodes that differ from it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Skew:
    """One field across the nodes that could tell it: the majority value, and each other
    value with its nodes (empty when every node agrees)."""

    field: str
    majority: str
    nodes: int  # how many nodes told the value
    outliers: dict[str, list[str]]

    def to_dict(self) -> dict[str, Any]:
        """The skew entry as `audit --json` writes it."""
        return {
            "field": self.field,
            "majority": self.majority,
            "nodes": self.nodes,
            "outliers": self.outliers,
        }


def find_skew(field_name: str, values: Sequence[tuple[str, str | None]]) -> Skew | None:
    """The skew of one field from (node, value) pairs in the audit's node order; nodes
    without a value are left out; None when no node has one.

    The majority is the value most nodes hold; on a tie, the one the earliest node holds, so
    the answer never depends on anything but the inputs."""
    known = [(node, value) for node, value in values if value is not None]
    if not known:
        return None
    tally: dict[str, int] = {}
    for _, value in known:
        tally[value] = tally.get(value, 0) + 1  # insertion order: first seen first
    majority = max(tally, key=lambda v: tally[v])  # max keeps the first of equals
    outliers: dict[str, list[str]] = {}
    for node, value in known:
        if value != majority:
            outliers.setdefault(value, []).append(node)
    ordered = {v: sorted(outliers[v]) for v in sorted(outliers, key=lambda v: (-tally[v], v))}
    return Skew(field_name, majority, len(known), ordered)


def find_all_skew(
    fields: Sequence[str], nodes: Sequence[tuple[str, Mapping[str, str | None]]]
) -> list[Skew]:
    """The skew of every field (in `fields` order) over (node, values) pairs; fields no
    node can tell are left out."""
    found = []
    for name in fields:
        skew = find_skew(name, [(node, values.get(name)) for node, values in nodes])
        if skew is not None:
            found.append(skew)
    return found
