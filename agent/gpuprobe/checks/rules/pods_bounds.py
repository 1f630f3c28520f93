"""How much of a node's containers the `pods` check names one by one.

A node may run thousands of containers (3,001 once made a 2.6 MB report, and about 5,000
would pass gRPC's default 4 MB message limit for every client). The check judges them all,
but names in its data and its findings only the first of them, the ones that need attention
first; the rest are counted (by verdict, by cause) and summed up in one finding per kind, so
`GetReport` stays well under 1 MB however many there are.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from gpuprobe.report import Finding

T = TypeVar("T")

# Containers listed in `data.containers`, failures in `data.failures`, specs in
# `data.unreadable_specs`; beyond: counts.
MAX_LISTED = 100
# Containers (an image finding each, per GPU) and pods (a failure finding each) named in
# findings one by one; beyond: one finding per code (and cause) for the rest.
MAX_NAMED = 32
# Verdicts that need attention, listed before the ones that do not.
VERDICT_RANK = {
    "too-new": 0,
    "forward-compatibility-unsupported": 0,
    "refused": 1,
    "unknown": 2,
}


def split(items: Sequence[T], most: int, key: Callable[[T], Any]) -> tuple[list[T], list[T]]:
    """The first `most` of `items` by `key`, and the rest (each in `key` order)."""
    ordered = sorted(items, key=key)
    return ordered[:most], ordered[most:]


def container_rank(entry: dict[str, Any]) -> tuple[int, str, str, str, str]:
    """A container entry's place in line to be listed: attention first, then by pod."""
    return (
        VERDICT_RANK.get(entry["verdict"], 3),
        entry["namespace"] or "",
        entry["pod"] or "",
        entry["container"] or "",
        entry["id"],
    )


def counted(values: Sequence[str]) -> dict[str, int]:
    """How many of each value, most first (then by name)."""
    return dict(sorted(Counter(values).items(), key=lambda kv: (-kv[1], kv[0])))


def not_listed(kind: str, values: Sequence[str]) -> dict[str, Any]:
    """The count of what was left out of a list, and how many of each `kind`."""
    return {"count": len(values), kind: counted(values)}


def summed_up(findings: Sequence[Finding], what: Callable[[Finding, int], str]) -> list[Finding]:
    """One finding per code for `findings` that are not named one by one (a code's findings
    share a severity and an action here), on the node, its message from `what(first, how
    many)`."""
    by_code: dict[str, list[Finding]] = {}
    for finding in findings:
        by_code.setdefault(finding.code, []).append(finding)
    return [
        Finding(
            code,
            group[0].severity,
            what(group[0], len(group)),
            group[0].action,
            "node",
        )
        for code, group in by_code.items()
    ]
