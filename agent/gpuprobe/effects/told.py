"""The findings say what was done: a post-pass (`gpuprobe.pipeline.POST_PASSES`).

The agent's own `kubernetes` result carries what its effects did (`data.device_taints`,
`data.evictions`: `gpuprobe.effects.gpu_effects`); this pass tells it in the findings it was
done for, so an operator reading `gpuprobe check`'s screen, the node condition's message or an
alert sees it beside the fault: a GPU fault whose device taint stands says which device carries
which taint, and one whose pods were evicted names them. Pure; a report without that data is
returned as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from gpuprobe.report import CheckResult, Finding, NodeReport

OWN = "kubernetes"  # the agent's own result (gpuprobe.effects.loop.CHECK_NAME)


def _rules(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = (data.get("device_taints") or {}).get("rules") or []
    return [r for r in found if isinstance(r, Mapping)]


def _evicted(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = (data.get("evictions") or {}).get("evicted") or []
    return [e for e in found if isinstance(e, Mapping)]


def _told(
    finding: Finding, rules: Sequence[Mapping[str, Any]], evicted: Sequence[Mapping[str, Any]]
) -> Finding:
    said = []
    for rule in rules:
        if rule.get("resource") == finding.resource and rule.get("code") == finding.code:
            said.append(
                f"quarantined: its DRA device {rule.get('device')} carries gpuprobe.io/unhealthy="
                f"{finding.code}:{rule.get('effect')} (DeviceTaintRule {rule.get('name')})"
            )
    pods = [str(e.get("pod")) for e in evicted if e.get("resource") == finding.resource]
    if pods:
        said.append(f"evicted: pod {', '.join(pods)}")
    if not said:
        return finding
    return replace(finding, message=f"{finding.message}; {'; '.join(said)}")


def tell_report(report: NodeReport) -> NodeReport:
    """The report with its GPU findings saying what the effects did for them (the report
    itself when they did nothing)."""
    own = next((c for c in report.checks if c.name == OWN), None)
    if own is None:
        return report
    rules, evicted = _rules(own.data), _evicted(own.data)
    if not rules and not evicted:
        return report
    checks: list[CheckResult] = []
    for check in report.checks:
        if check is own:
            checks.append(check)
            continue
        findings = [_told(f, rules, evicted) for f in check.findings]
        changed = any(new is not old for new, old in zip(findings, check.findings, strict=True))
        checks.append(replace(check, findings=findings) if changed else check)
    return replace(report, checks=checks)
