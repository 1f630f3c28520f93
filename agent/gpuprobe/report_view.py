"""The summary view of a report: what a fleet audit reads of each node, and nothing more.

An audit of thousands of agents compares a few facts across nodes (driver and CUDA versions,
the GPU inventory, the MIG layout, the toolkit's and runtimes' settings, the sharing units)
and lists the findings. The agent keeps the summary view of its latest report beside the
whole one, so an audit asks for a few kilobytes per node instead of every GPU's telemetry;
the audit names the same keys when it reads an agent that sends the whole report. Which
facts of a check's data the view keeps is the check's to say (its record's `summary_keys`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpuprobe.report import NodeReport

# Which keys of a check's data to keep: key → its own keys (for a mapping, or a list of
# mappings), or None to keep the value whole.
DataKeys = Mapping[str, "DataKeys | None"]


def pick(data: Mapping[str, Any], keys: DataKeys) -> dict[str, Any]:
    """Of `data`, only `keys` (recursively through mappings and lists of mappings)."""
    return {k: _pick_value(data[k], sub) for k, sub in keys.items() if k in data}


def _pick_value(value: Any, keys: DataKeys | None) -> Any:
    if keys is None:
        return value
    if isinstance(value, Mapping):
        return pick(value, keys)
    if isinstance(value, list):
        return [_pick_value(v, keys) for v in value]
    return value


def summary(report: NodeReport, keep: Mapping[str, DataKeys]) -> NodeReport:
    """The report's summary view: every check whole but for its data, of which only the facts
    `keep` names for the check are kept (each check's record says them: the registry's
    `summary_keys()`)."""
    checks = []
    for check in report.checks:
        keys = keep.get(check.name)
        checks.append(replace(check, data=pick(check.data, keys) if keys is not None else {}))
    return replace(report, checks=checks)
