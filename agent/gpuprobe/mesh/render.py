"""The mesh for people: a link matrix (rows send, columns receive) and the findings."""

from __future__ import annotations

from gpuprobe.mesh.run import MeshResult
from gpuprobe.mesh.verdict import FAILED, LOW
from gpuprobe.printable import screen
from gpuprobe.render import wrap

MARKS = {LOW: " LOW", FAILED: "FAILED"}


def render_mesh(result: MeshResult, width: int | None = None) -> str:
    """The matrix in Gbit/s per transport (per device for RDMA; NCCL's bus bandwidth in GB/s),
    then each finding with its action, wrapped to `width` columns with a hanging indent (None:
    not wrapped)."""
    lines = []
    for transport, device in sorted(
        {link.rail for link in result.links}, key=lambda r: (r[0], r[1] or "")
    ):
        links = [link for link in result.links if link.rail == (transport, device)]
        nodes = sorted({n for link in links for n in (link.source, link.target)})
        cells: dict[tuple[str, str], str] = {}
        # NCCL: one all-reduce per pair, its bus bandwidth in GB/s (nccl-tests' unit), shown
        # both ways; the others: each direction in Gbit/s.
        scale = 1e9 if transport == "nccl" else 1e9 / 8
        for link in links:
            if link.bytes_per_second is None:
                text = MARKS[FAILED]
            else:
                text = f"{link.bytes_per_second / scale:.2f}" + MARKS.get(link.verdict, "")
            cells[(link.source, link.target)] = text  # a re-test replaces the earlier figure
            if transport == "nccl":
                cells[(link.target, link.source)] = text
        column = max([6, *(len(n) for n in nodes), *(len(c) for c in cells.values())])
        on = f" on {device}" if device else ""
        if transport == "nccl":
            lines.append("nccl all-reduce bus bandwidth at the largest size, GB/s (each pair)")
        else:
            lines.append(f"{transport} bandwidth{on}, Gbit/s (row sends to column)")
        lines.append(" " * column + "  " + "  ".join(f"{n:>{column}}" for n in nodes))
        for source in nodes:
            row = [cells.get((source, target), "-" if source != target else "") for target in nodes]
            lines.append(f"{source:<{column}}  " + "  ".join(f"{c:>{column}}" for c in row))
        lines.append("")
    lines.append(f"status {result.status.value}")
    for finding in result.findings:
        lines += wrap(f"{finding.severity.value} {finding.code} on {finding.resource}", 4, width, 2)
        lines += wrap(finding.message, 4, width)
        lines += wrap(f"action: {finding.action.value}", 4, width)
    return screen(lines)
