"""The cluster report for people: the verdict and the first things to do, then one row per
node, worst first, then the skew and totals."""

from __future__ import annotations

import re
from collections.abc import Callable

from gpuprobe.audit.cluster import AuditedNode, ClusterReport
from gpuprobe.audit.facts import Counts, driver_needed, ranked_images
from gpuprobe.audit.usage import Usage
from gpuprobe.audit.view.checklist import AGENT_MISSING_WORDS
from gpuprobe.audit.view.model import ClusterView
from gpuprobe.causes import Cause, gpu_list, group, same_on_every_node, worst_first
from gpuprobe.printable import screen
from gpuprobe.render import (
    CAUSE_INDENT,
    MIN_TEXT_WIDTH,
    STATUS_WIDTH,
    counted,
    finding_lines,
    painter,
    wrap,
)
from gpuprobe.report import Finding, Status

FIRST_THINGS = 5  # the cluster's worst causes listed under its verdict
# AGENT_MISSING's words (gpuprobe.audit.view.checklist), read back to group the nodes.
AGENT_MISSING = re.compile(
    re.escape(AGENT_MISSING_WORDS)
    .replace(re.escape("{node}"), r"(?P<node>.*?)")
    .replace(re.escape("{why}"), r"(?P<why>.*)"),
    re.S,
)
NODES_NAMED = 3  # the nodes a cluster-wide cause names before it counts the rest


def render_cluster(report: ClusterReport, colour: bool = False, width: int | None = None) -> str:
    """The report as text: a header, the nodes (worst first), the skew, the totals; findings
    wrapped to `width` columns with a hanging indent (None: not wrapped)."""
    paint = painter(colour)
    t = report.totals
    head = (
        f"cluster {report.status.value}  {counted(t.nodes, 'target')}: "
        f"{t.reachable_nodes} reachable, {t.nodes - t.reachable_nodes} unreachable, "
        f"{t.healthy_nodes} healthy"
        if t.nodes
        else f"cluster {report.status.value}  0 targets: {_why_no_targets(report)}"
    )
    first, *rest = wrap(head, CAUSE_INDENT, width, first=0)
    # The status is the header's second word: whole on the first line, painted there.
    lines = [first.replace(report.status.value, paint(report.status, report.status.value), 1)]
    lines += rest
    if report.view is not None and (counts := _api_counts(report.view)):
        lines += wrap(counts, CAUSE_INDENT, width)
    nodes = sorted(report.nodes, key=lambda n: (-n.status.rank, n.node or "", n.target))
    lines += _first_things(nodes, paint, width, report.view)
    if not nodes and report.view is not None:  # nothing the agents said: the view follows
        lines += render_view(report.view, colour, width)
        return screen(lines)
    lines.append("")
    node_width = max([4, *(len(n.node or "-") for n in nodes)])
    target_width = max([6, *(len(n.target) for n in nodes)])
    titles = f"{'NODE':<{node_width}}  {'TARGET':<{target_width}}  "
    lines += _row(f"{'STATUS':<{STATUS_WIDTH}}", titles, "FINDINGS", width)
    for node in nodes:
        row = f"{node.node or '-':<{node_width}}  {node.target:<{target_width}}  "
        lines += _row(
            paint(node.status, f"{node.status.value:<{STATUS_WIDTH}}"), row, _summary(node), width
        )
        for cause in worst_first(group(node.findings)):
            head = f"{cause.code} on {cause.where} ({cause.check}), action {cause.action.value}"
            lines += finding_lines(cause.severity, head, cause.message, paint, width)
    if report.skew:
        lines += ["", *wrap("skew (majority value, and the nodes that differ)", 2, width, first=0)]
        field_width = max(len(s.field) for s in report.skew)
        for skew in report.skew:
            agree = skew.nodes - _count(skew.outliers)
            line = f"{skew.field:<{field_width}}  {skew.majority} on {agree} of {skew.nodes}"
            if skew.outliers:
                outliers = "; ".join(f"{v}: {', '.join(n)}" for v, n in skew.outliers.items())
                line += f"  OUTLIERS {outliers}"
            lines += wrap(line, 2 + field_width + 2, width, first=2)
    c = t.counts
    totals = (
        f"totals  {counted(t.nodes, 'node')} ({t.reachable_nodes} reachable, "
        f"{t.healthy_nodes} healthy), {counted(c.gpus, 'GPU')} ({c.healthy_gpus} healthy, "
        f"{c.idle_gpus} idle), {counted(c.mig_slices, 'MIG slice')}, "
        f"{counted(c.time_slicing_units, 'time-slicing unit')}"
    )
    lines += ["", *wrap(totals, 8, width, first=0)]
    if report.usage is not None:
        for line in _usage(report.usage, report.price_per_gpu_hour):
            lines += wrap(line, 8, width, first=0)
    for line in _workload_failures(c):
        lines += wrap(line, 4, width, first=0) if line else [line]
    if report.view is not None:
        lines += render_view(report.view, colour, width)
    return screen(lines)


def _why_no_targets(report: ClusterReport) -> str:
    """Why an audit has no agent to ask."""
    if report.view is None:
        return "no target given"
    source = next((s for s in report.view.sources if s.name == "agent pods"), None)
    if source is None:
        return "the agents' pods were never asked for"
    if source.state in ("forbidden", "failed"):
        why = f"needs {source.missing}" if source.missing else source.detail
        return f"the agents' pods could not be read from the API server ({why})"
    return (
        "no gpuprobe agent pod with an address runs in the cluster (label selector "
        "app.kubernetes.io/name=gpuprobe,app.kubernetes.io/component=node-agent)"
    )


def _row(tag: str, row: str, summary: str, width: int | None) -> list[str]:
    """A node's row: its status tag, node and target in their columns, and its summary
    wrapped under the summary's column; on a terminal too narrow for the columns, the row
    wrapped whole under the status."""
    at = STATUS_WIDTH + 2 + len(row)
    if width is None or at + MIN_TEXT_WIDTH <= width:
        first, *rest = wrap(summary, at, width)
        return [f"{tag}  {row}{first[at:]}", *rest]
    first, *rest = wrap(row + summary, CAUSE_INDENT, width)
    return [f"{tag}  {first[CAUSE_INDENT:]}", *rest]


def _api_counts(view: ClusterView) -> str:
    """What the API server shows of the GPU nodes, beside what the agents said: GPU nodes,
    GPUs allocatable, agents answering (an audit before any agent is installed counts here);
    "" when the nodes were not read."""
    items = {i.name: i for i in view.items}
    resources, agents = items.get("gpu_resources"), items.get("agents")
    if resources is None or "gpu_nodes" not in resources.facts:
        return ""  # the nodes were not read: the view's items say why
    allocatable = resources.facts.get("allocatable") or {}
    offered = ", ".join(f"{v} {k}" for k, v in sorted(allocatable.items())) or "no GPU resource"
    text = f"API server: {counted(resources.facts['gpu_nodes'], 'GPU node')} offering {offered}"
    if agents is not None and "answering" in agents.facts:
        text += f"; gpuprobe answering on {agents.facts['answering']} of them"
    return text


# The view's findings that are workloads waiting now: first among their severity.
WAITING_NOW = ("GPU_POD_PENDING", "GANG_PARTIALLY_SCHEDULED")


def _view_things(view: ClusterView) -> list[tuple[Status, str, int]]:
    """The view's findings as first things: one line per code, naming its resources
    (AGENT_MISSING on every node is one line); (status, text, rank among equals: 0 for
    workloads waiting, 2 for a missing agent, 1 for the rest)."""
    grouped: dict[str, list[Finding]] = {}
    for finding in view.findings:
        grouped.setdefault(finding.code, []).append(finding)
    things = []
    for code, found in grouped.items():
        worst_one = max(found, key=lambda f: f.severity.status.rank)
        where = _named([_resource_words(f.resource) for f in found])
        text = f"{worst_one.action.value} for {code} on {where}"
        order = 0 if code in WAITING_NOW else 2 if code == "AGENT_MISSING" else 1
        things.append((worst_one.severity.status, text, order))
    return things


def _resource_words(resource: str) -> str:
    """A view finding's resource as the screen names it: the node, `pod ns/name`, ..."""
    kind, _, name = resource.partition(":")
    if kind == "node":
        return name
    if kind in ("pod", "gang"):
        return f"{kind} {name}"
    return "the cluster" if resource == "cluster" else resource


def _first_things(
    nodes: list[AuditedNode],
    paint: Callable[[Status, str], str],
    width: int | None,
    view: ClusterView | None = None,
) -> list[str]:
    """The cluster's worst causes, one line each: a cause the same on several nodes is one
    line naming them; targets that gave no report are one line; the cluster view's findings
    one line per code (a missing agent after the real problems of its severity); at most
    FIRST_THINGS."""
    merged: dict[tuple[object, ...], tuple[Cause, list[str]]] = {}
    for node in nodes:
        for cause in group(node.findings):
            where = node.node or node.target
            if cause.gpus:
                where += f" ({gpu_list(cause.gpus)})"
            merged.setdefault(same_on_every_node(cause), (cause, []))[1].append(where)
    things = [
        (c.severity.status, f"{c.action.value} for {c.code} ({c.check}) on {_named(where)}")
        # Worst first; among equals, the cause on the most nodes first.
        for c, where in sorted(
            merged.values(), key=lambda cw: (-cw[0].severity.status.rank, -len(cw[1]))
        )
    ]
    unreachable = [n for n in nodes if n.unreachable is not None]
    if unreachable:
        shown = ", ".join(
            f"{n.target} ({n.unreachable.failure.value})"
            for n in unreachable[:NODES_NAMED]
            if n.unreachable is not None
        )
        more = len(unreachable) - NODES_NAMED
        thing = f"reach {counted(len(unreachable), 'unreachable target')}: {shown}"
        things.append((Status.UNKNOWN, thing + (f" and {more} more" if more > 0 else "")))
        things.sort(key=lambda t: -t[0].rank)
    if view is not None:
        ranked = [(s, t, 1) for s, t in things] + _view_things(view)
        # Worst first (a stable sort: the nodes' causes keep their order); among equals the
        # GPU pods that wait first, a missing agent last: the real problems come first.
        ranked.sort(key=lambda st: (-st[0].rank, st[2]))
        things = [(s, t) for s, t, _ in ranked]
    if not things:
        return []
    lines = ["", "first"]
    for status, text in things[:FIRST_THINGS]:
        lines += _row(paint(status, f"{status.value:<{STATUS_WIDTH}}"), "", text, width)
    if len(things) > FIRST_THINGS:
        lines += wrap(f"and {len(things) - FIRST_THINGS} more below", CAUSE_INDENT, width)
    return lines


def _named(nodes: list[str]) -> str:
    """`gpu-3`, or `3 nodes: a, b, c`, or `12 nodes: a, b, c and 9 more`."""
    if len(nodes) == 1:
        return nodes[0]
    more = len(nodes) - NODES_NAMED
    shown = ", ".join(nodes[:NODES_NAMED]) + (f" and {more} more" if more > 0 else "")
    return f"{counted(len(nodes), 'node')}: {shown}"


def render_view(view: ClusterView, colour: bool = False, width: int | None = None) -> list[str]:
    """The cluster view's lines: the checklist (one line an item, its verdict first), then
    its findings, worst first."""
    paint = painter(colour)
    version = f" (API server {view.version})" if view.version else ""
    lines = ["", f"cluster view {paint(view.status, view.status.value)}{version}"]
    name_width = max(len(i.name) for i in view.items) if view.items else 0
    unread: dict[str, list[str]] = {}  # the sources not read, by why (one line a cause)
    for source in view.sources:
        if source.state in ("forbidden", "failed"):
            why = f"needs {source.missing}" if source.missing else source.detail
            unread.setdefault(why, []).append(source.name)
    # Items not read for the same source are one line (the source's why follows below).
    rows: list[tuple[list[str], Status, str]] = []
    by_source: dict[str, list[str]] = {}
    for item in view.items:
        named = _unread_source(item.summary, unread)
        if named is None:
            rows.append(([item.name], item.status, item.summary))
        elif named in by_source:
            by_source[named].append(item.name)
        else:
            by_source[named] = [item.name]
            rows.append((by_source[named], item.status, f"not read: {named} (below)"))
    indent = 2 + name_width + 2 + STATUS_WIDTH + 2
    for item_names, item_status, summary in rows:
        status = paint(item_status, f"{item_status.value:<{STATUS_WIDTH}}")
        if len(item_names) == 1:
            head = f"  {item_names[0]:<{name_width}}  {status}  "
            lines += wrap(head + summary, indent, width, first=0)
        else:
            lines += wrap(f"  {', '.join(item_names)}", indent, width, first=0)
            lines += wrap(f"  {'':<{name_width}}  {status}  {summary}", indent, width, first=0)
    missing: dict[str, list[Finding]] = {}  # AGENT_MISSING by why: one entry a cause
    for finding in view.findings:
        if (found := AGENT_MISSING.fullmatch(finding.message)) is not None:
            missing.setdefault(found.group("why"), []).append(finding)
    shown = [f for f in view.findings if not AGENT_MISSING.fullmatch(f.message)]
    for finding in sorted(shown, key=lambda f: -f.severity.status.rank):
        head = f"{finding.code} on {finding.resource}, action {finding.action.value}"
        lines += finding_lines(finding.severity, head, finding.message, paint, width)
    for why, alike in missing.items():
        one = alike[0]
        if len(alike) == 1:
            head = f"AGENT_MISSING on {one.resource}, action {one.action.value}"
            lines += finding_lines(one.severity, head, one.message, paint, width)
            continue
        nodes = _named([f.resource.removeprefix("node:") for f in alike])
        head = f"AGENT_MISSING on {nodes}, action {one.action.value}"
        message = (
            f"no gpuprobe agent answering on these GPU nodes: {why}; their GPUs are not checked"
        )
        lines += finding_lines(one.severity, head, message, paint, width)
    for why, sources in unread.items():
        lines += wrap(f"  not read ({why}): {', '.join(sources)}", 4, width, first=0)
    return lines


def _unread_source(summary: str, unread: dict[str, list[str]]) -> str | None:
    """The source an item's `not read: SOURCE: WHY` names when the view's closing lines say
    why (one line a cause, not one an item); None for an item that was read."""
    for why, sources in unread.items():
        for source in sources:
            if summary == f"not read: {source}: {why}":
                return source
    return None


def _usage(usage: Usage, price: float | None) -> list[str]:
    """GPUs allocated, busy, idle and free now; the GPU-hours counted and idle ones by
    namespace (with their cost when priced)."""
    d = usage.to_dict(price)
    now, hours = d["gpus"], d["gpu_hours"]
    lines = [
        f"usage   GPUs now: {now['allocated']:g} allocated ({now['busy']:g} busy, "
        f"{now['allocated_idle']:g} idle), {now['unallocated']:g} unallocated",
        f"        GPU-hours since {d['since'] or 'the agents started'}: {hours['allocated']:g} "
        f"allocated ({hours['busy']:g} busy, {hours['allocated_idle']:g} idle), "
        f"{hours['unallocated']:g} unallocated"
        + (f"; idle cost {d['idle_cost']:.2f} at {price:g} per GPU-hour" if price else ""),
    ]
    for namespace, idle in d["idle_gpu_hours_by_namespace"].items():
        cost = f"  cost {d['idle_cost_by_namespace'][namespace]:.2f}" if price else ""
        lines.append(f"        idle GPU-hours  {namespace}: {idle:g}{cost}")
    return lines


def _workload_failures(counts: Counts) -> list[str]:
    """Pods failing for GPU reasons by namespace and cause; images that need a newer driver."""
    lines = []
    if counts.gpu_pod_failures:
        lines += ["", "pods failing for GPU reasons (namespace, cause: pods)"]
        for (namespace, cause), n in sorted(counts.gpu_pod_failures.items()):
            lines.append(f"  {namespace}  {cause}: {n}")
    if counts.images_too_new:
        lines += ["", "images that need a newer driver (image, CUDA: containers on nodes)"]
        for (image, cuda), need in ranked_images(counts.images_too_new):
            driver = driver_needed(cuda)
            lines.append(
                f"  {image}  CUDA {cuda}: {need.containers} on {need.nodes}"
                f" ({', '.join(sorted(need.namespaces)) or 'no namespace'})"
                + (f"; needs driver >= {driver}" if driver else "")
            )
    return lines


def _summary(node: AuditedNode) -> str:
    """How many findings the node has (and the causes they are, when fewer), or why it is
    unreachable."""
    if node.unreachable is not None:
        return f"unreachable ({node.unreachable.failure.value}): {node.unreachable.reason}"
    if not node.findings:
        return "-"
    causes = len(group(node.findings))
    found = counted(len(node.findings), "finding")
    return found if causes == len(node.findings) else f"{found} ({counted(causes, 'cause')})"


def _count(outliers: dict[str, list[str]]) -> int:
    return sum(len(nodes) for nodes in outliers.values())
