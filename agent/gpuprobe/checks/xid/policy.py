"""The effective XID policy: NVIDIA's catalogs, with the operator's `xid.policy` overrides.

The built-in verdict on an XID is its catalog entry's (`gpuprobe.gpu.xid_catalog`, NVLink5 lines
decoded by `gpuprobe.gpu.nvlink5`); on an SXid, the SXid catalog's (`gpuprobe.gpu.sxid_catalog`).
An override (docs/configuration.md, `xid.policy`) names an XID or SXid number or range and, for
the first rule that covers a number and whose `driver` range holds the loaded driver, changes
the severity or action, ignores the number (kept in data, never a finding), or holds the finding
back until the number was seen `count` times within `window_seconds` (this boot when unset).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any, TypeVar

from gpuprobe.checks.xid.settings import XidPolicyRule, xid_settings
from gpuprobe.config import Config
from gpuprobe.gpu.sxid_catalog import SxidInfo
from gpuprobe.gpu.xid_catalog import BUCKET_VERDICTS, CATALOG, CATALOG_URL, XidInfo
from gpuprobe.report import Action, Severity


@dataclasses.dataclass(frozen=True)
class Override:
    """The rule that decides for one number: its place in `xid.policy` and the rule."""

    index: int
    rule: XidPolicyRule

    @property
    def label(self) -> str:
        """How data and messages name it: `xid.policy[0]`."""
        return f"xid.policy[{self.index}]"


def find(config: Config, kind: str, number: int, driver: str | None) -> Override | None:
    """The first rule covering `number` (of `kind`, `xid` or `sxid`) that holds for `driver`."""
    for index, rule in enumerate(xid_settings(config).policy):
        if rule.kind == kind and number in rule.numbers() and rule.applies_to_driver(driver):
            return Override(index, rule)
    return None


Verdict = TypeVar("Verdict", XidInfo, SxidInfo)


def apply(info: Verdict, override: Override | None) -> Verdict:
    """A catalog verdict (an XID's or an SXid's) with an override's severity and action."""
    if override is None or override.rule.ignore:
        return info
    return dataclasses.replace(
        info,
        severity=Severity(override.rule.severity) if override.rule.severity else info.severity,
        action=Action(override.rule.action) if override.rule.action else info.action,
    )


def threshold_met(override: Override | None, count: int, times: list[str], now: datetime) -> bool:
    """Whether a number was seen often enough for its finding: `count` times, within
    `window_seconds` of now when set (sightings of unknown time count as within)."""
    if override is None or override.rule.count <= 1:
        return True
    window = override.rule.window_seconds
    if window is None:
        return count >= override.rule.count
    since = now - timedelta(seconds=window)
    known = [t for t in times if t]
    recent = sum(1 for t in known if _parse(t) >= since) + max(0, count - len(known))
    return recent >= override.rule.count


def _parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def rule_data(override: Override) -> dict[str, Any]:
    """A rule as the report's data shows it."""
    rule = override.rule
    return {
        "rule": override.label,
        rule.kind: rule.xid if rule.kind == "xid" else rule.sxid,
        "severity": rule.severity,
        "action": rule.action,
        "ignore": rule.ignore,
        "driver": rule.driver,
        "count": rule.count,
        "window_seconds": rule.window_seconds,
    }


def explain(config: Config, driver: str | None) -> dict[str, Any]:
    """The effective policy: every catalog XID with its built-in and effective verdict, the
    overrides in force for this driver, and those the driver version rules out."""
    rules = [Override(i, r) for i, r in enumerate(xid_settings(config).policy)]
    xids = []
    for xid, info in sorted(CATALOG.items()):
        override = find(config, "xid", xid, driver)
        effective = apply(info, override)
        xids.append(
            {
                "xid": xid,
                "mnemonic": info.mnemonic,
                "bucket": info.bucket,
                "builtin": [info.severity.value, info.action.value],
                "effective": "ignored"
                if override is not None and override.rule.ignore
                else [effective.severity.value, effective.action.value],
                "rule": override.label if override else None,
            }
        )
    return {
        "catalog": CATALOG_URL,
        "driver_version": driver,
        "buckets": {b: [s.value, a.value] for b, (s, a) in BUCKET_VERDICTS.items()},
        "overrides": [rule_data(o) for o in rules if o.rule.applies_to_driver(driver)],
        "overrides_not_for_this_driver": [
            rule_data(o) for o in rules if not o.rule.applies_to_driver(driver)
        ],
        "xids": xids,
    }


def render(explained: dict[str, Any]) -> str:
    """The effective policy as text, for `gpuprobe check --explain-policy`."""
    lines = [
        f"XID policy: NVIDIA's Xid catalog ({explained['catalog']}), driver "
        f"{explained['driver_version'] or 'unknown'}",
    ]
    for title, key in (
        ("overrides (xid.policy, first match wins)", "overrides"),
        ("overrides the driver version rules out", "overrides_not_for_this_driver"),
    ):
        if explained[key]:
            lines.append(f"{title}:")
            lines += [f"  {_rule_text(r)}" for r in explained[key]]
    lines.append(
        "XID  mnemonic                                         built-in            effective"
    )
    for entry in explained["xids"]:
        builtin = " ".join(entry["builtin"])
        effective = (
            entry["effective"]
            if isinstance(entry["effective"], str)
            else " ".join(entry["effective"])
        )
        mark = f"  ({entry['rule']})" if entry["rule"] else ""
        lines.append(
            f"{entry['xid']:>3}  {entry['mnemonic'][:48]:<48} {builtin:<28} {effective}{mark}"
        )
    return "\n".join(lines) + "\n"


def _rule_text(rule: dict[str, Any]) -> str:
    kind = "xid" if "xid" in rule else "sxid"
    what = (
        "ignore"
        if rule["ignore"]
        else " ".join(str(v) for v in (rule["severity"], rule["action"]) if v) or "as built in"
    )
    parts = [f"{rule['rule']}: {kind} {rule[kind]} → {what}"]
    if rule["count"] > 1:
        within = f" within {rule['window_seconds']:g} s" if rule["window_seconds"] else " this boot"
        parts.append(f"only after {rule['count']} sightings{within}")
    if rule["driver"]:
        parts.append(f"driver {rule['driver']}")
    return ", ".join(parts)
