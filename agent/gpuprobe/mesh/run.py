"""Running a bandwidth mesh over agents: who they are, the rounds, the verdicts.

`gpuprobe mesh` asks every agent for its node name, then runs the schedule's rounds (for RDMA,
one mesh per device, rail after rail): the pairs
of a round test in parallel, each pair one direction after the other (A→B, then B→A), each test
asked of the sending agent with MeasureBandwidth. Quick mode re-tests each suspect node against
a node already known good. The links are judged together (`mesh.verdict`) and blamed on nodes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import grpc

from gpuprobe.client import Client, Fetched
from gpuprobe.errors import UsageError
from gpuprobe.mesh import schedule, verdict
from gpuprobe.mesh.verdict import FAILED, LOW, Link, Thresholds
from gpuprobe.report import Finding, Status, worst
from gpuprobe.serve.bandwidth import PEER_FAULT
from gpuprobe.v1 import diagnostics_pb2 as pb


@dataclass(frozen=True)
class Peer:
    """An agent taking part: where to reach it and the node it runs on."""

    target: str
    node: str


@dataclass(frozen=True)
class MeshOptions:
    """How the mesh runs."""

    transport: str = "tcp"
    mode: str = "full"  # full | quick
    seconds: float = 10.0
    warmup: float = 1.0
    streams: int = 4
    matchings: int = 3  # quick mode: random perfect matchings before the re-test
    rdma_devices: tuple[str, ...] = ()  # RDMA: the rails, each meshed in turn
    force: bool = False
    thresholds: Thresholds = field(default_factory=Thresholds)
    seed: int | None = None


@dataclass
class MeshResult:
    """The judged links and what they say about the nodes."""

    links: list[Link]
    findings: list[Finding]

    @property
    def status(self) -> Status:
        """The worst severity among the findings (OK when there are none)."""
        return worst(f.severity.status for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        """The contract's `mesh --json` object."""
        return {
            "status": self.status.value,
            "links": [link.to_dict() for link in self.links],
            "findings": [f.to_dict() for f in self.findings],
        }


ClientFactory = Callable[[str], Client]


class InvalidTest(UsageError):
    """An agent refused a test's parameters (INVALID_ARGUMENT): the mesh's request is wrong
    for every link, so the run stops with one line instead of blaming the nodes."""


def identify(fetched: Sequence[Fetched]) -> tuple[list[Peer], list[Finding]]:
    """The agents that answered with their report, by node name; the others as findings."""
    peers, findings = [], []
    for item in fetched:
        if item.report is None:
            why = item.unreachable.reason if item.unreachable else "no report"
            findings.append(verdict.unreachable_finding(item.target, why))
        else:
            peers.append(Peer(item.target, item.report.node))
    return peers, findings


def run_mesh(peers: Sequence[Peer], options: MeshOptions, connect: ClientFactory) -> MeshResult:
    """Run the rounds (for RDMA, each rail's in turn), judge the links, name the culprits."""
    by_node = {p.node: p for p in peers}
    rails = options.rdma_devices if options.transport == "rdma" else ("",)
    links: list[Link] = []
    for device in rails:
        links += _rail(by_node, options, connect, device)
    judged = verdict.judge(links, options.thresholds)
    return MeshResult(judged, verdict.blame(judged))


def _rail(
    by_node: dict[str, Peer], options: MeshOptions, connect: ClientFactory, device: str
) -> list[Link]:
    """The links of one mesh over the nodes: TCP, or one RDMA device (`device`)."""
    names = list(by_node)
    if options.mode == "full":
        rounds = schedule.circle_rounds(names)
    elif options.mode == "quick":
        rounds = schedule.random_matchings(names, options.matchings, options.seed)
    else:
        raise ValueError(f"unknown mesh mode {options.mode!r}")
    links: list[Link] = []
    for pairs in rounds:
        links += _round(pairs, by_node, options, connect, device)
    if options.mode == "quick":
        judged = verdict.judge(links, options.thresholds)
        suspects = sorted(
            {
                n
                for link in judged
                if link.verdict in (LOW, FAILED)
                for n in (link.source, link.target)
            }
        )
        good = [n for n in names if n not in suspects]
        links += _round(schedule.retest_round(suspects, good), by_node, options, connect, device)
    return links


def _round(
    pairs: Sequence[schedule.Pair],
    by_node: dict[str, Peer],
    options: MeshOptions,
    connect: ClientFactory,
    device: str = "",
) -> list[Link]:
    """One round: its pairs side by side, each pair both ways, one after the other."""
    found: list[list[Link]] = [[] for _ in pairs]
    invalid: list[InvalidTest] = []

    def pair(i: int, a: str, b: str) -> None:
        try:
            found[i] = [
                _measure(by_node[a], by_node[b], options, connect, device),
                _measure(by_node[b], by_node[a], options, connect, device),
            ]
        except InvalidTest as exc:
            invalid.append(exc)

    threads = [
        threading.Thread(target=pair, args=(i, a, b), daemon=True) for i, (a, b) in enumerate(pairs)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if invalid:
        raise invalid[0]
    return [link for links in found for link in links]


def _measure(
    source: Peer, target: Peer, options: MeshOptions, connect: ClientFactory, device: str
) -> Link:
    request = pb.MeasureBandwidthRequest(
        peer=target.target,
        transport=options.transport,
        streams=options.streams,
        rdma_device=device,
        force=options.force,
    )
    request.duration.FromTimedelta(timedelta(seconds=options.seconds))
    request.warmup.FromTimedelta(timedelta(seconds=options.warmup))
    budget = options.seconds + options.warmup + 30
    try:
        with connect(source.target) as client:
            response = client.measure_bandwidth(request, timeout=budget)
    except grpc.RpcError as exc:
        if hasattr(exc, "code") and exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
            raise InvalidTest(f"{source.node} refused the test: {_details(exc)}") from None
        return _failed(source, target, options.transport, exc, device or None)
    ends = {"sender": source.node, "sink": target.node}
    return Link(
        source.node,
        target.node,
        options.transport,
        response.bytes_per_second,
        device=device or None,
        cpu_limited_by=ends.get(response.cpu_limited_side),
    )


def _failed(
    source: Peer, target: Peer, transport: str, exc: grpc.RpcError, device: str | None
) -> Link:
    """A failed test, blamed on the node at fault.

    An error the sending agent reports about its peer (`peer: ...`) is the peer's: it refused
    a sink, or its sink cut the test. FAILED_PRECONDITION means the test could not run there
    (GPU processes active, no RDMA device or perftest); anything else means the node could not
    be reached or tested. Without that mark the error is the sending agent's own: it refused
    (FAILED_PRECONDITION), or the mesh could not reach it.
    """
    why = _details(exc)
    code = exc.code() if hasattr(exc, "code") else None
    unavailable = code == grpc.StatusCode.FAILED_PRECONDITION
    if why.startswith(PEER_FAULT):
        blamed, why = target.node, why.removeprefix(PEER_FAULT)
    else:
        blamed = source.node
    return Link(source.node, target.node, transport, None, FAILED, why, blamed, unavailable, device)


def _details(exc: grpc.RpcError) -> str:
    details = exc.details() if hasattr(exc, "details") else None
    return str(details or exc)
