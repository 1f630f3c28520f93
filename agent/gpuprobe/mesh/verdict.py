"""Link verdicts: which measured links are low, and which node is to blame.

A link is LOW when it is below the absolute floor for its transport, or below the
cluster's typical rate by more than k·MAD (median absolute deviation) and by a meaningful
fraction (so that near-identical links, whose MAD is tiny, do not flag each other's
noise). The typical rate is the median over nodes of each node's median link: in a small
cluster a slow node touches half of all links, which would drag a plain median of links
down to its level. A node whose links
are low with two or more distinct partners is the culprit; a link low with one partner only
points at the path between the two. A link that would be low, but whose test ran out of CPU
at one end (the test, not the link, set its figure), is not called LOW: the node whose CPU
capped it is named instead.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpuprobe.report import Action, Finding, Severity

OK, LOW, FAILED = "OK", "LOW", "FAILED"


@dataclass(frozen=True)
class Link:
    """One directed measurement: source sent to target over a transport."""

    source: str
    target: str
    transport: str
    bytes_per_second: float | None  # None: the test failed
    verdict: str = OK
    error: str | None = None
    # For a failed test: the node it is blamed on, and whether it merely could not run there
    # (GPU processes active, no RDMA device) rather than the peer being unreachable.
    blamed: str | None = None
    unavailable: bool = False
    device: str | None = None  # RDMA: the device (rail) both ends tested on
    # TCP: the node whose CPU capped the test (None: the link set the figure, or unknown).
    cpu_limited_by: str | None = None
    # Judged low, but the test was capped by cpu_limited_by's CPU: not the link's fault.
    cpu_capped: bool = False
    # NCCL: elements the all-reduce got wrong, over every size (None: not counted).
    wrong_values: int | None = None

    @property
    def rail(self) -> tuple[str, str | None]:
        """The links judged together: one transport, and for RDMA one device."""
        return (self.transport, self.device)

    def to_dict(self) -> dict[str, object]:
        """The link as `mesh --json` writes it."""
        d: dict[str, object] = {
            "source": self.source,
            "target": self.target,
            "transport": self.transport,
            "bytes_per_second": self.bytes_per_second,
            "verdict": self.verdict,
        }
        if self.device:
            d["device"] = self.device
        if self.error:
            d["error"] = self.error
        if self.cpu_limited_by:
            d["cpu_limited_by"] = self.cpu_limited_by
        if self.wrong_values is not None:
            d["wrong_values"] = self.wrong_values
        return d


@dataclass(frozen=True)
class Thresholds:
    """What makes a link low."""

    floor_bytes_per_second: float | None = None
    mad_k: float = 3.0
    min_relative_drop: float = 0.10


def judge(links: list[Link], thresholds: Thresholds) -> list[Link]:
    """Each link with its verdict, judged against the others of its transport (and for
    RDMA, of its device: each rail among itself)."""
    judged = []
    per_node: dict[tuple[str, str | None], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for link in links:
        if link.bytes_per_second is not None:
            per_node[link.rail][link.source].append(link.bytes_per_second)
            per_node[link.rail][link.target].append(link.bytes_per_second)
    by_rail = {
        rail: [statistics.median(rates) for rates in nodes.values()]
        for rail, nodes in per_node.items()
    }
    for link in links:
        if link.bytes_per_second is None:
            judged.append(replace(link, verdict=FAILED))
            continue
        low = _low(link.bytes_per_second, by_rail.get(link.rail, []), thresholds)
        if low and link.cpu_limited_by:
            judged.append(replace(link, verdict=OK, cpu_capped=True))
        else:
            judged.append(replace(link, verdict=LOW if low else OK))
    return judged


def _low(value: float, population: list[float], t: Thresholds) -> bool:
    if t.floor_bytes_per_second is not None and value < t.floor_bytes_per_second:
        return True
    if len(population) < 3:
        return False  # fewer than three nodes: no majority to compare against
    median = statistics.median(population)
    mad = statistics.median(abs(x - median) for x in population)
    return value < median - t.mad_k * mad and value < median * (1 - t.min_relative_drop)


def blame(links: list[Link]) -> list[Finding]:
    """Findings from judged links: culprit nodes, suspect paths, unreachable peers; each
    rail's links blamed among themselves. A node unreachable on several rails is named once
    (by the first rail's reason, which may differ in its words); a finding repeated word for
    word on several rails is given once."""
    findings: list[Finding] = []
    for rail in sorted({link.rail for link in links}, key=lambda r: (r[0], r[1] or "")):
        for finding in _blame([link for link in links if link.rail == rail]):
            if finding in findings or (
                finding.code == "PEER_UNREACHABLE"
                and any(f.code == finding.code and f.resource == finding.resource for f in findings)
            ):
                continue
            findings.append(finding)
    return findings


def _blame(links: list[Link]) -> list[Finding]:
    partners: dict[str, set[str]] = defaultdict(set)
    unreachable: dict[str, str] = {}
    unavailable: dict[str, str] = {}
    at_fault = failure_culprits(links)
    for link in links:
        if link.verdict == LOW:
            partners[link.source].add(link.target)
            partners[link.target].add(link.source)
        elif link.verdict == FAILED:
            node = at_fault(link)
            book = unavailable if link.unavailable else unreachable
            book.setdefault(node, link.error or "the test failed")
    culprits = {node for node, others in partners.items() if len(others) >= 2}
    findings = [
        Finding(
            "LINK_BANDWIDTH_LOW",
            Severity.WARNING,
            f"{node} is low with {len(partners[node])} partners "
            f"({', '.join(sorted(partners[node]))}){_on(links)}: its NIC, cable or switch port "
            "is the likely cause",
            Action.CHECK_NETWORK,
            f"peer:{node}",
        )
        for node in sorted(culprits)
    ]
    reported = set()
    for link in links:
        pair = tuple(sorted((link.source, link.target)))
        if (
            link.verdict != LOW
            or link.source in culprits
            or link.target in culprits
            or pair in reported
        ):
            continue
        reported.add(pair)
        if _fine_with_others(link.source, link.target, links) and _fine_with_others(
            link.target, link.source, links
        ):
            message = (
                f"the link {link.source} → {link.target} ({link.transport}{_on(links)}) is "
                "low while both nodes are fine with others: check the path between them"
            )
        else:
            # Two nodes alone (or one without a good link elsewhere): either node, or the
            # path, fits the figures alike.
            message = (
                f"the pair {link.source} ↔ {link.target} ({link.transport}{_on(links)}) is "
                "low, with too few other peers to compare: blame cannot be assigned between "
                "the two nodes and the path; add a third agent to the mesh"
            )
        findings.append(
            Finding(
                "LINK_BANDWIDTH_LOW",
                Severity.WARNING,
                message,
                Action.CHECK_NETWORK,
                f"peer:{link.source}",
            )
        )
    findings += _cpu_capped(links)
    findings += [unreachable_finding(node, why) for node, why in sorted(unreachable.items())]
    findings += [
        Finding(
            "BANDWIDTH_TEST_UNAVAILABLE",
            Severity.UNKNOWN,
            f"{node}'s bandwidth could not be tested: {why}",
            Action.NONE,
            f"peer:{node}",
        )
        for node, why in sorted(unavailable.items())
        if node not in unreachable
    ]
    return findings


def _fine_with_others(node: str, partner: str, links: list[Link]) -> bool:
    """Whether `node` has a link judged OK with a node other than `partner` (a test its CPU
    capped tells nothing of the link)."""
    return any(
        link.verdict == OK
        and not link.cpu_capped
        and {node, partner} & {link.source, link.target} == {node}
        for link in links
    )


def _cpu_capped(links: list[Link]) -> list[Finding]:
    """BANDWIDTH_TEST_CPU_LIMITED for each node whose CPU capped tests that look low."""
    capped: dict[str, list[Link]] = defaultdict(list)
    for link in links:
        if link.cpu_capped and link.cpu_limited_by:
            capped[link.cpu_limited_by].append(link)
    findings = []
    for node, its in sorted(capped.items()):
        named = ", ".join(
            f"{link.source} → {link.target} at {(link.bytes_per_second or 0) * 8 / 1e9:.1f} Gbit/s"
            for link in its
        )
        findings.append(
            Finding(
                "BANDWIDTH_TEST_CPU_LIMITED",
                Severity.UNKNOWN,
                f"{node}'s CPU, not the link, capped the test of {named} ({its[0].transport}): "
                "the link's own rate is unknown; test again while the node is less busy, or "
                "give the test more threads (serve.bandwidth_threads)",
                Action.NONE,
                f"peer:{node}",
            )
        )
    return findings


def failure_culprits(links: list[Link]) -> Callable[[Link], str]:
    """Who a failed test is blamed on. A sender tells which side failed as well as it can
    see, but a sender whose own data NIC is dead sees every peer's sink as unreachable. So a
    failure blamed on a node that measured fine with others is moved to the other end when
    that end failed with two or more partners and measured nothing: the two-partner rule of
    low links, for failed ones."""
    measured: dict[str, set[str]] = defaultdict(set)
    failing: dict[str, set[str]] = defaultdict(set)
    for link in links:
        if link.bytes_per_second is not None:
            measured[link.source].add(link.target)
            measured[link.target].add(link.source)
        elif link.verdict == FAILED and not link.unavailable:
            failing[link.source].add(link.target)
            failing[link.target].add(link.source)

    def culprit(link: Link) -> str:
        node = link.blamed or link.target
        other = link.source if node == link.target else link.target
        if (
            not link.unavailable
            and measured[node]
            and not measured[other]
            and len(failing[other]) >= 2
        ):
            return other
        return node

    return culprit


def unreachable_finding(node: str, why: str) -> Finding:
    """PEER_UNREACHABLE for a node (or a target that never answered with its name)."""
    return Finding(
        "PEER_UNREACHABLE",
        Severity.CRITICAL,
        f"{node} could not be tested: {why}",
        Action.CHECK_NETWORK,
        f"peer:{node}",
    )


def _on(links: list[Link]) -> str:
    """The rail's device for one RDMA rail's links (" on mlx5_0"), else nothing."""
    device = links[0].device if links else None
    return f" on {device}" if device else ""
