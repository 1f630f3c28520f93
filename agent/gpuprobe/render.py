"""The report for people: one block per check, findings with their action and resource."""

from __future__ import annotations

from collections.abc import Callable

from gpuprobe.report import NodeReport, Status

_COLOURS = {
    Status.OK: "\033[32m",
    Status.WARNING: "\033[33m",
    Status.CRITICAL: "\033[31m",
    Status.UNKNOWN: "\033[35m",
}
_RESET = "\033[0m"
NAME_WIDTH = 13  # the longest check name, device_plugin: columns line up whatever runs


def painter(colour: bool) -> Callable[[Status, str], str]:
    """Text in its status's colour (green, yellow, red, magenta), or as it is."""

    def paint(status: Status, text: str) -> str:
        return f"{_COLOURS[status]}{text}{_RESET}" if colour else text

    return paint


def render_report(report: NodeReport, colour: bool = False) -> str:
    """The report as text: a header line, then each check, worst findings first."""
    paint = painter(colour)

    width = max([NAME_WIDTH, *(len(c.name) for c in report.checks)])
    lines = [
        f"node {report.node}  {report.time.strftime('%Y-%m-%d %H:%M:%SZ')}  "
        + paint(report.status, report.status.value),
        "",
    ]
    for check in report.checks:
        status = paint(check.status, f"{check.status.value:<8}")
        lines.append(
            f"{status}  {check.name:<{width}}  {check.summary}  ({check.duration_seconds:.2f} s)"
        )
        findings = sorted(check.findings, key=lambda f: -f.severity.status.rank)
        for finding in findings:
            severity = paint(finding.severity.status, finding.severity.value)
            lines.append(f"{'':10}{severity} {finding.code} on {finding.resource}")
            lines.append(f"{'':12}{finding.message}")
            lines.append(f"{'':12}action: {finding.action.value}")
    return "\n".join(lines) + "\n"
