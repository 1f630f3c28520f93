"""What an NCCL mesh's links say about the nodes, by the mesh's own rules (gpuprobe.mesh.verdict):
low links blamed on a node low with every partner (or on the path between two nodes fine with
others), failures moved to a node that failed with two or more partners and measured nothing.

A failed all-reduce is `NCCL_MESH_FAILED` with NCCL's own words; a test that never started is
`BANDWIDTH_TEST_UNAVAILABLE` with the scheduler's; wrong values (an all-reduce whose result is
not the exact sum) are `NCCL_WRONG_RESULTS`, named on a node when it returned them with two or
more partners.
"""

from __future__ import annotations

from collections import defaultdict

from gpuprobe.mesh import verdict
from gpuprobe.mesh.verdict import FAILED, Link
from gpuprobe.report import Action, Finding, Severity


def nccl_findings(links: list[Link]) -> list[Finding]:
    """The findings of judged NCCL links."""
    measured = [link for link in links if link.bytes_per_second is not None]
    findings = verdict.blame(measured) + wrong_results(measured)
    culprit = verdict.failure_culprits(links)
    for link in links:
        if link.verdict != FAILED:
            continue
        node = culprit(link)
        moved = node != (link.blamed or link.target)
        pair = f"{link.source} ↔ {link.target}"
        if link.unavailable:
            finding = Finding(
                "BANDWIDTH_TEST_UNAVAILABLE",
                Severity.UNKNOWN,
                f"the NCCL test {pair} did not run: {link.error}",
                Action.NONE,
                f"peer:{node}",
            )
        else:
            every = f" ({node} failed with every partner it was tested with)" if moved else ""
            finding = Finding(
                "NCCL_MESH_FAILED",
                Severity.CRITICAL,
                f"the NCCL all-reduce {pair} failed{every}: {link.error}",
                Action.CHECK_NETWORK,
                f"peer:{node}",
            )
        if finding not in findings:
            findings.append(finding)
    return findings


def wrong_results(links: list[Link]) -> list[Finding]:
    """NCCL_WRONG_RESULTS: on a node that returned wrong values with two or more partners,
    else on each pair that did."""
    partners: dict[str, set[str]] = defaultdict(set)
    wrong = [link for link in links if link.wrong_values]
    for link in wrong:
        partners[link.source].add(link.target)
        partners[link.target].add(link.source)
    culprits = sorted(node for node, others in partners.items() if len(others) >= 2)
    findings = [
        Finding(
            "NCCL_WRONG_RESULTS",
            Severity.CRITICAL,
            f"the NCCL all-reduce returned wrong values on {node} with {len(partners[node])} "
            f"partners ({', '.join(sorted(partners[node]))}): its GPUs or NVLink corrupt data",
            Action.HARDWARE_INSPECTION,
            f"peer:{node}",
        )
        for node in culprits
    ]
    for link in wrong:
        if link.source in culprits or link.target in culprits:
            continue
        findings.append(
            Finding(
                "NCCL_WRONG_RESULTS",
                Severity.CRITICAL,
                f"the NCCL all-reduce {link.source} ↔ {link.target} returned {link.wrong_values} "
                "wrong values: a GPU, NVLink or the path between the two corrupts data (a test "
                "of each with a third node tells which)",
                Action.HARDWARE_INSPECTION,
                f"peer:{link.source}",
            )
        )
    return findings
