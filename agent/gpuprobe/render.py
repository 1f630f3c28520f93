"""The report for people: one block per check, findings with their action and resource."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from datetime import datetime

from gpuprobe.report import Finding, NodeReport, Status

_COLOURS = {
    Status.OK: "\033[32m",
    Status.WARNING: "\033[33m",
    Status.CRITICAL: "\033[31m",
    Status.UNKNOWN: "\033[35m",
}
_RESET = "\033[0m"
NAME_WIDTH = 13  # the longest check name, device_plugin: columns line up whatever runs
FINDING_INDENT = 12  # a finding's message and action, under its severity
# However narrow the terminal, a wrapped line keeps this many columns of text beside its
# indent (narrower, every word would get a line of its own).
MIN_TEXT_WIDTH = 30


def painter(colour: bool) -> Callable[[Status, str], str]:
    """Text in its status's colour (green, yellow, red, magenta), or as it is."""

    def paint(status: Status, text: str) -> str:
        return f"{_COLOURS[status]}{text}{_RESET}" if colour else text

    return paint


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`1 target`, `2 targets` (`plural` for a noun that does not just take an s)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def _time(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%SZ")


def header_time(report: NodeReport, replayed: bool, captured_at: datetime | None) -> str:
    """When the facts were seen: the report's time live; for a replayed snapshot, when the
    snapshot was captured (the replay's own time says nothing about the node)."""
    if not replayed:
        return _time(report.time)
    if captured_at is None:
        return "snapshot, capture time unknown"
    return f"snapshot captured {_time(captured_at)}"


def wrap(text: str, indent: int, width: int | None, first: int | None = None) -> list[str]:
    """`text` as lines of at most `width` columns, each indented by `indent` (the first line
    by `first` columns already taken, when given): a hanging indent. One line when `width`
    is None. Words (resources, paths) are never split."""
    lead = " " * (indent if first is None else first)
    if width is None:
        return [lead + text]
    return textwrap.wrap(
        text,
        width=max(width, indent + MIN_TEXT_WIDTH),
        initial_indent=lead,
        subsequent_indent=" " * indent,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [lead]


def render_report(
    report: NodeReport,
    colour: bool = False,
    width: int | None = None,
    replayed: bool = False,
    captured_at: datetime | None = None,
) -> str:
    """The report as text: a header line, then each check, worst findings first.

    `width`: wrap to that many columns with a hanging indent (a terminal's width; None: no
    wrapping, for pipes and files). `replayed`: the report is of a snapshot captured at
    `captured_at` (None: not known), which the header shows instead of the replay's time.
    """
    paint = painter(colour)

    names = max([NAME_WIDTH, *(len(c.name) for c in report.checks)])
    lines = [
        f"node {report.node}  {header_time(report, replayed, captured_at)}  "
        + paint(report.status, report.status.value),
        "",
    ]
    summary_at = 8 + 2 + names + 2  # status, gap, name, gap
    for check in report.checks:
        status = paint(check.status, f"{check.status.value:<8}")
        text = f"{check.summary}  ({check.duration_seconds:.2f} s)"
        # Wrapped as if the first line's status and name were blanks, then put in their place.
        first, *rest = wrap(text, summary_at, width)
        lines.append(f"{status}  {check.name:<{names}}  {first[summary_at:]}")
        lines += rest
        findings = sorted(check.findings, key=lambda f: -f.severity.status.rank)
        for finding in findings:
            lines += finding_lines(finding, f"{finding.code} on {finding.resource}", paint, width)
            lines += wrap(f"action: {finding.action.value}", FINDING_INDENT, width)
    return "\n".join(lines) + "\n"


def finding_lines(
    finding: Finding, head: str, paint: Callable[[Status, str], str], width: int | None
) -> list[str]:
    """A finding as both reports print it: its severity, then `head` wrapped beside it and
    under it, then its message."""
    severity = paint(finding.severity.status, finding.severity.value)
    skip = 10 + len(finding.severity.value) + 1
    first, *rest = wrap(head, FINDING_INDENT, width, first=skip)
    return [
        f"{'':10}{severity} {first[skip:]}",
        *rest,
        *wrap(finding.message, FINDING_INDENT, width),
    ]
