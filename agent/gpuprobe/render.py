"""The report for people: the verdict first, then the causes worst first, then what is OK.

The first screen answers what a person opens it for: is the node healthy, and what to do
first. The first line is the verdict (the node's status and the worst cause's action); with
several causes one line each follows, so that all of them fit the first screen; then each
cause in full, worst first; then the checks that are OK, on one closing line, and each check
that did not run with why (`verbose`: every check's summary line). A check that did not run is
never counted as OK. Findings on several GPUs that differ only in the GPU they name
are one cause naming its GPUs (gpuprobe.causes); the JSON report keeps every finding.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from gpuprobe.causes import Cause, gpu_index, gpu_list, group
from gpuprobe.printable import printable, screen
from gpuprobe.report import Action, CheckResult, NodeReport, Severity, Status

_COLOURS = {
    Status.OK: "\033[32m",
    Status.WARNING: "\033[33m",
    Status.CRITICAL: "\033[31m",
    Status.UNKNOWN: "\033[35m",
}
_RESET = "\033[0m"
NAME_WIDTH = 13  # the longest check name, device_plugin: columns line up whatever runs
STATUS_WIDTH = 8  # CRITICAL
CAUSE_INDENT = STATUS_WIDTH + 2  # a cause's message and action, under its head
FINDING_INDENT = 12  # a finding's message under its severity, in the audit's node rows
# However narrow the terminal, a wrapped line keeps this many columns of text beside its
# indent (narrower, every word would get a line of its own). With the widest indent (25,
# a check's summary beside its status and name) every line fits 40 columns.
MIN_TEXT_WIDTH = 15
# A check that did not run (its data says `"ran": false`): OK in the JSON, but judged nothing.
NOT_RUN = "NOT RUN"
# Joins words that must stay on one line ("0.14 s"); a space again once wrapped.
NO_BREAK = "\u00a0"


def painter(colour: bool) -> Callable[[Status, str], str]:
    """Text in its status's colour (green, yellow, red, magenta), or as it is."""

    def paint(status: Status, text: str) -> str:
        return f"{_COLOURS[status]}{text}{_RESET}" if colour else text

    return paint


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`1 target`, `2 targets` (`plural` for a noun that does not just take an s)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def _time(t: datetime) -> str:
    # The date and the time stay on one line however the header wraps.
    return t.strftime(f"%Y-%m-%d{NO_BREAK}%H:%M:%SZ")


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
    is None. Lines break between words, never inside `word{NO_BREAK}unit`; a word longer
    than a whole line (a path, a log excerpt) is broken inside the hanging indent rather
    than pushed past the edge."""
    lead = " " * (indent if first is None else first)
    text = printable(text, painted=True)  # escaped before it is measured
    if width is None:
        return [(lead + text).replace(NO_BREAK, " ")]
    lines = textwrap.wrap(
        text,
        width=max(width, indent + MIN_TEXT_WIDTH, len(lead) + MIN_TEXT_WIDTH),
        initial_indent=lead,
        subsequent_indent=" " * indent,
        break_long_words=True,
        break_on_hyphens=False,
    ) or [lead]
    # A long word broken at a line's very end leaves the space before it there: dropped.
    return [line.replace(NO_BREAK, " ").rstrip() for line in lines]


@dataclass(frozen=True)
class _Item:
    """A cause as the node report shows it: a cause of findings, or a check that is not OK
    with no finding to say why (its summary says it)."""

    status: Status
    check: str
    cause: Cause | None
    summary: str = ""

    def subject(self) -> str:
        """What and on what: the code on its resource (GPUs by index, pods by name)."""
        if self.cause is None:
            return f"{self.check}: {self.summary}"
        cause = self.cause
        where = gpu_list(cause.gpus) if gpu_index(cause.first.resource) is not None else cause.where
        pods = cause.first.pods
        if len(pods) == 1:
            where += f", pod {pods[0].namespace}/{pods[0].pod}"
        elif pods:
            where += ", " + counted(len(pods), "pod")
        return f"{cause.code} on {where}"

    def short(self) -> str:
        """One line: the subject and the action."""
        if self.cause is None:
            return self.subject()
        return f"{self.subject()}: {self.cause.action.value}"

    def verdict(self) -> str:
        """The thing to do first, when this is the worst cause."""
        if self.cause is None:
            return f"first: read why {self.check} is {self.status.value}: {self.summary}"
        head = f"{self.subject()} ({self.check})"
        if self.cause.action is Action.NONE:
            return f"first: read {head}"
        return f"first: {self.cause.action.value} for {head}"


def _items(report: NodeReport) -> list[_Item]:
    """The node's causes, worst first; a check that is not OK without findings is one."""
    items: list[_Item] = []
    for check in report.checks:
        if check.findings:
            items += [
                _Item(c.severity.status, c.check, c)
                for c in group((check.name, f) for f in check.findings)
            ]
        elif check.status is not Status.OK:
            items.append(_Item(check.status, check.name, None, check.summary))
    return sorted(items, key=lambda i: -i.status.rank)


def render_report(
    report: NodeReport,
    colour: bool = False,
    width: int | None = None,
    replayed: bool = False,
    captured_at: datetime | None = None,
    verbose: bool = False,
) -> str:
    """The report as text: the verdict, the node and when, one line per cause (for two or
    more), each cause in full, then the checks that are OK.

    `width`: wrap to that many columns with a hanging indent (a terminal's width; None: no
    wrapping, for pipes and files). `replayed`: the report is of a snapshot captured at
    `captured_at` (None: not known), which the header shows instead of the replay's time.
    `verbose`: every check's summary line at the end instead of the OK checks' names.
    """
    paint = painter(colour)
    items = _items(report)
    status = report.status
    not_run = [c for c in report.checks if c.not_run]
    if items:
        verdict = items[0].verdict()
    else:
        verdict = _all_clear(len(report.checks) - len(not_run), len(not_run))
    lines = _beside(paint(status, f"{status.value:<{STATUS_WIDTH}}"), verdict, width)
    when = header_time(report, replayed, captured_at)
    header = f"node {report.node}  {when}"
    if width is None or len(header) <= width:
        lines.append(header.replace(NO_BREAK, " "))
    else:  # the node's name, then when, on lines of their own
        lines += wrap(f"node {report.node}", CAUSE_INDENT, width, first=0)
        lines += wrap(when, CAUSE_INDENT, width)
    if len(items) > 1:
        lines.append("")
        for item in items:
            lines += _beside(
                paint(item.status, f"{item.status.value:<{STATUS_WIDTH}}"), item.short(), width
            )
    for item in items:
        lines.append("")
        lines += _cause_lines(item, paint, width)
    lines.append("")
    if verbose:
        lines += [line for check in report.checks for line in check_line(check, paint, width)]
    else:
        ok = [c.name for c in report.checks if c.status is Status.OK and not c.not_run]
        if ok:
            lines += _beside(paint(Status.OK, f"{'OK':<{STATUS_WIDTH}}"), ", ".join(ok), width)
        for check in not_run:
            lines += _beside(f"{NOT_RUN:<{STATUS_WIDTH}}", f"{check.name}: {check.summary}", width)
        if not ok and not not_run:
            lines.pop()
    return screen(lines)


def _all_clear(ok: int, not_run: int) -> str:
    """The verdict with nothing to do: the checks that ran and are OK, and those that did not
    run (never counted as OK: they judged nothing)."""
    if not not_run:
        return f"{counted(ok, 'check')} OK, nothing to do"
    if not ok:
        return f"no check ran ({not_run} not run): nothing was judged"
    return f"{counted(ok, 'check')} OK, {not_run} not run, nothing to do"


def check_line(
    check: CheckResult, paint: Callable[[Status, str], str], width: int | None
) -> list[str]:
    """A check's status, name and summary with its duration, as `--verbose` lists them."""
    summary_at = STATUS_WIDTH + 2 + NAME_WIDTH + 2
    text = f"{check.summary}  ({check.duration_seconds:.2f}{NO_BREAK}s)"
    # Wrapped as if the first line's status and name were blanks, then put in their place.
    first, *rest = wrap(text, summary_at, width)
    if check.not_run:
        status = f"{NOT_RUN:<{STATUS_WIDTH}}"
    else:
        status = paint(check.status, f"{check.status.value:<{STATUS_WIDTH}}")
    if len(check.name) > NAME_WIDTH:  # a check added later with a longer name: its own line
        return [f"{status}  {check.name}", first, *rest]
    return [f"{status}  {check.name:<{NAME_WIDTH}}  {first[summary_at:]}", *rest]


def _cause_lines(item: _Item, paint: Callable[[Status, str], str], width: int | None) -> list[str]:
    """A cause in full: its severity and head, its message and its action."""
    tag = paint(item.status, f"{item.status.value:<{STATUS_WIDTH}}")
    if item.cause is None:
        return _beside(tag, f"{item.check}: {item.summary}", width)
    cause = item.cause
    lines = _beside(tag, f"{cause.code} on {cause.where} ({item.check})", width)
    lines += wrap(cause.message, CAUSE_INDENT, width)
    lines += wrap(f"action: {cause.action.value}", CAUSE_INDENT, width)
    return lines


def _beside(tag: str, text: str, width: int | None) -> list[str]:
    """`text` wrapped beside a status tag (painted or not) with a hanging indent under it."""
    first, *rest = wrap(text, CAUSE_INDENT, width)
    return [f"{tag}  {first[CAUSE_INDENT:]}", *rest]


def finding_lines(
    severity: Severity,
    head: str,
    message: str,
    paint: Callable[[Status, str], str],
    width: int | None,
) -> list[str]:
    """A finding (or a cause) as the audit's node rows print it: its severity, then `head`
    wrapped beside it and under it, then its message."""
    tag = paint(severity.status, severity.value)
    skip = 10 + len(severity.value) + 1
    first, *rest = wrap(head, FINDING_INDENT, width, first=skip)
    return [f"{'':10}{tag} {first[skip:]}", *rest, *wrap(message, FINDING_INDENT, width)]
