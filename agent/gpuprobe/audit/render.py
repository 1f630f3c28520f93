"""The cluster report for people: one row per node, worst first, then the skew and totals."""

from __future__ import annotations

from gpuprobe.audit.cluster import AuditedNode, ClusterReport
from gpuprobe.audit.facts import Counts, driver_needed, ranked_images
from gpuprobe.audit.usage import Usage
from gpuprobe.audit.view.model import ClusterView
from gpuprobe.render import counted, finding_lines, painter, wrap

STATUS_WIDTH = 8  # CRITICAL


def render_cluster(report: ClusterReport, colour: bool = False, width: int | None = None) -> str:
    """The report as text: a header, the nodes (worst first), the skew, the totals; findings
    wrapped to `width` columns with a hanging indent (None: not wrapped)."""
    paint = painter(colour)
    t = report.totals
    lines = [
        f"cluster {paint(report.status, report.status.value)}  {counted(t.nodes, 'target')}: "
        f"{t.reachable_nodes} reachable, {t.nodes - t.reachable_nodes} unreachable, "
        f"{t.healthy_nodes} healthy",
        "",
    ]
    nodes = sorted(report.nodes, key=lambda n: (-n.status.rank, n.node or "", n.target))
    node_width = max([4, *(len(n.node or "-") for n in nodes)])
    target_width = max([6, *(len(n.target) for n in nodes)])
    lines.append(
        f"{'STATUS':<{STATUS_WIDTH}}  {'NODE':<{node_width}}  {'TARGET':<{target_width}}  FINDINGS"
    )
    for node in nodes:
        status = paint(node.status, f"{node.status.value:<{STATUS_WIDTH}}")
        lines.append(
            f"{status}  {node.node or '-':<{node_width}}  {node.target:<{target_width}}  "
            + _summary(node)
        )
        for check, finding in sorted(node.findings, key=lambda cf: -cf[1].severity.status.rank):
            head = f"{finding.code} on {finding.resource} ({check}), action {finding.action.value}"
            lines += finding_lines(finding, head, paint, width)
    if report.skew:
        lines += ["", "skew (majority value, and the nodes that differ)"]
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
    return "\n".join(lines) + "\n"


def render_view(view: ClusterView, colour: bool = False, width: int | None = None) -> list[str]:
    """The cluster view's lines: the checklist (one line an item, its verdict first), then
    its findings, worst first."""
    paint = painter(colour)
    version = f" (API server {view.version})" if view.version else ""
    lines = ["", f"cluster view {paint(view.status, view.status.value)}{version}"]
    name_width = max(len(i.name) for i in view.items) if view.items else 0
    for item in view.items:
        status = paint(item.status, f"{item.status.value:<{STATUS_WIDTH}}")
        head = f"  {item.name:<{name_width}}  {status}  "
        indent = 2 + name_width + 2 + STATUS_WIDTH + 2
        lines += wrap(head + item.summary, indent, width, first=0)
    for finding in sorted(view.findings, key=lambda f: -f.severity.status.rank):
        head = f"{finding.code} on {finding.resource}, action {finding.action.value}"
        lines += finding_lines(finding, head, paint, width)
    unread = [s for s in view.sources if s.state in ("forbidden", "failed")]
    for source in unread:
        why = f"needs {source.missing}" if source.missing else source.detail
        lines += wrap(f"  not read: {source.name}: {why}", 4, width, first=0)
    return lines


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
    """How many findings the node has, or why it is unreachable."""
    if node.unreachable is not None:
        return f"unreachable ({node.unreachable.failure.value}): {node.unreachable.reason}"
    return counted(len(node.findings), "finding") if node.findings else "-"


def _count(outliers: dict[str, list[str]]) -> int:
    return sum(len(nodes) for nodes in outliers.values())
