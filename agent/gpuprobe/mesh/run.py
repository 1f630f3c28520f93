"""Running a bandwidth mesh over agents: who they are, the rounds, the verdicts.

`gpuprobe mesh` (`mesh()`) finds the agents and asks each for its node name, then runs the
schedule's rounds (for RDMA, one mesh per device, rail after rail): the pairs of a round test
in parallel, each pair one direction after the other (A→B, then B→A). Each test opens a sink
on the receiving agent for the sender's address (OpenBandwidthSink) and hands it to the
sending agent (MeasureBandwidth), which sends only there. Quick mode re-tests each suspect
node against a node already known good. The links are judged together (`mesh.verdict`) and
blamed on nodes: a failed test names the side at fault in the failure's details.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import grpc

from gpuprobe import wire
from gpuprobe.audit.fanout import fetch_all
from gpuprobe.client import Client, Credentials, Fetched
from gpuprobe.errors import UsageError
from gpuprobe.measure.bandwidth import MAX_SECONDS, SINK_GRACE_SECONDS, Refused, split_peer
from gpuprobe.measure.perftest import test_seconds
from gpuprobe.mesh import schedule, verdict
from gpuprobe.mesh.verdict import FAILED, LOW, Link, Thresholds
from gpuprobe.report import Action, Finding, Severity, Status, worst
from gpuprobe.targets import discover, parse_targets
from gpuprobe.unreachable import Failure, agents, status_code
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
    """An agent refused a test's parameters (INVALID_ARGUMENT): when no agent took them, the
    mesh's request is wrong for every link, so the run stops with one line instead of blaming
    the nodes."""


@dataclass
class Hearing:
    """What the agents have said of the mesh's credentials and test parameters so far: a
    refusal (a wrong token, parameters refused as invalid) is the caller's fault while no
    agent has taken a guarded call, and one node's (a token or version unlike the others')
    once another agent has. Shared by a round's pairs (a flag set and a list appended to)."""

    accepted: bool = False
    refusals: list[UsageError] = field(default_factory=list)

    def refused(
        self, refusal: Refusal, source: Peer, target: Peer, transport: str, device: str
    ) -> Link:
        """A test one agent refused: its link, FAILED and unavailable, blamed on that agent
        (what `check` raises instead while no agent has taken a call)."""
        self.refusals.append(refusal.error)
        return _failed(source, target, transport, refusal.reason, True, refusal.node, device)

    def check(self) -> None:
        """Raise the first refusal while no agent has taken a guarded call."""
        if self.refusals and not self.accepted:
            raise self.refusals[0]


def mesh(
    targets: str, credentials: Credentials, options: MeshOptions, deadline: float
) -> MeshResult:
    """The whole mesh over the agents `targets` names (as `--targets` takes them): find
    them, learn their node names, run it; the agents that cannot be found or reached are
    findings before the links'. Raises UsageError for a request no agent can serve."""
    if options.transport == "rdma" and not options.rdma_devices:
        raise UsageError("--transport rdma needs --rdma-device")
    if options.seconds + options.warmup > MAX_SECONDS:
        raise UsageError(f"--seconds and --warmup: at most {MAX_SECONDS:g} s together")
    specs = parse_targets(targets)
    named = {spec.address for spec in specs}
    if not any(spec.dns for spec in specs) and len(named) < 2:
        raise UsageError(
            f"--targets names {agents(len(named))}: a mesh measures between two at least"
        )
    found = discover(specs, deadline)
    fetched = fetch_all(found.addresses, credentials, deadline)
    refused = _refused_caller(fetched, credentials)
    if refused is not None:
        raise refused
    peers, unreachable = identify(fetched)
    missing = [verdict.unreachable_finding(str(f.spec), f.reason) for f in found.failures]
    if len({peer.node for peer in peers}) < 2:
        return MeshResult([], missing + unreachable + _too_few(peers, found.addresses))
    result = run_mesh(peers, options, lambda target: Client(target, credentials=credentials))
    result.findings = missing + unreachable + result.findings
    return result


class CallerRefused(UsageError):
    """The agents refused this caller's credentials or TLS: the flags are wrong for every
    link, so the mesh stops with one line naming the flag instead of blaming the nodes."""


def _refused_caller(fetched: Sequence[Fetched], credentials: Credentials) -> CallerRefused | None:
    """The first agent that refused the caller's credentials or TLS, as the usage error."""
    for item in fetched:
        why = item.unreachable
        if why is not None and why.failure in (Failure.UNAUTHORISED, Failure.TLS):
            if why.failure == Failure.UNAUTHORISED and credentials.token:
                flag = "--token-file: is it the agents' token?"
            elif why.failure == Failure.UNAUTHORISED:
                flag = "pass the agents' token with --token-file"
            elif "--tls" in why.reason:
                flag = ""  # the reason names the flag already
            else:
                flag = "check --tls-ca (the CA that signed the agents) and --tls-server-name"
            return CallerRefused(f"{item.target}: {why.reason}" + (f" ({flag})" if flag else ""))
    return None


@dataclass(frozen=True)
class Refusal:
    """An agent refused the mesh's token or test parameters: the usage error for the caller
    (when no agent took them), and what it says of the node when others did."""

    node: str
    error: UsageError
    reason: str


def _refusal(node: str, exc: grpc.RpcError) -> Refusal | None:
    """A guarded RPC (OpenBandwidthSink, MeasureBandwidth) an agent refused for the mesh's
    own token (UNAUTHENTICATED: missing or wrong) or parameters (INVALID_ARGUMENT); None for
    any other failure."""
    code, details = status_code(exc), _details(exc)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        error: UsageError = InvalidTest(f"{node} refused the test: {details}")
        reason = (
            f"{node} refused the test, which the other agents took ({details}): it runs "
            "another version or configuration"
        )
        return Refusal(node, error, reason)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        error = CallerRefused(
            f"{node} refused the test: {details}: pass the agents' token with --token-file"
        )
        reason = (
            f"{node} refused the mesh's token, which the other agents took ({details}): its "
            "token file differs from theirs"
        )
        return Refusal(node, error, reason)
    return None


def _too_few(peers: Sequence[Peer], addresses: Sequence[str]) -> list[Finding]:
    """Why nothing was measured with fewer than two agents (none: the unreachable say it)."""
    if not peers:
        return []
    node, answered, found = peers[0].node, len(peers), len(addresses)
    return [
        Finding(
            "BANDWIDTH_TEST_UNAVAILABLE",
            Severity.UNKNOWN,
            f"{node}'s bandwidth could not be tested: it is the only node that answered (at "
            f"{answered} of {found} address{'' if found == 1 else 'es'}), and a mesh measures "
            "between two nodes at least",
            Action.NONE,
            f"peer:{node}",
        )
    ]


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
    hearing = Hearing()
    for device in rails:
        links += _rail(by_node, options, connect, hearing, device)
    judged = verdict.judge(links, options.thresholds)
    return MeshResult(judged, verdict.blame(judged))


def _rail(
    by_node: dict[str, Peer],
    options: MeshOptions,
    connect: ClientFactory,
    hearing: Hearing,
    device: str,
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
        links += _round(pairs, by_node, options, connect, hearing, device)
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
        retests = schedule.retest_round(suspects, good)
        links += _round(retests, by_node, options, connect, hearing, device)
    return links


def _round(
    pairs: Sequence[schedule.Pair],
    by_node: dict[str, Peer],
    options: MeshOptions,
    connect: ClientFactory,
    hearing: Hearing,
    device: str = "",
) -> list[Link]:
    """One round: its pairs side by side, each pair both ways, one after the other; raises the
    first refusal of the mesh's credentials or parameters while no agent has taken them."""
    found: list[list[Link]] = [[] for _ in pairs]

    def pair(i: int, a: str, b: str) -> None:
        found[i] = [
            _measure(by_node[a], by_node[b], options, connect, device, hearing),
            _measure(by_node[b], by_node[a], options, connect, device, hearing),
        ]

    threads = [
        threading.Thread(target=pair, args=(i, a, b), daemon=True) for i, (a, b) in enumerate(pairs)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    hearing.check()
    return [link for links in found for link in links]


def _measure(
    source: Peer,
    target: Peer,
    options: MeshOptions,
    connect: ClientFactory,
    device: str,
    hearing: Hearing,
) -> Link:
    """One test, source → target: a sink on the target for the source's address, then the
    source sends to it. What each agent says of the credentials and parameters goes to
    `hearing`."""
    seconds = options.seconds + options.warmup
    sink_request = pb.OpenBandwidthSinkRequest(
        transport=options.transport, streams=options.streams, force=options.force
    )
    if options.transport == "rdma":
        sink_request.rdma_device = device
        sink_request.test_seconds = test_seconds(options.seconds)
        seconds = sink_request.test_seconds
    sink_request.duration.FromTimedelta(timedelta(seconds=seconds + SINK_GRACE_SECONDS))
    try:
        sink_request.sender = _address(source.target)
        with connect(target.target) as receiver:
            sink = receiver.open_bandwidth_sink(sink_request, timeout=10)
    except (OSError, Refused):  # the source's address does not resolve
        return _failed(source, target, options.transport, "", False, source.node, device)
    except grpc.RpcError as exc:
        if refusal := _refusal(target.node, exc):
            return hearing.refused(refusal, source, target, options.transport, device)
        unavailable = status_code(exc) == grpc.StatusCode.FAILED_PRECONDITION
        # A precondition names the node and what it lacks; other refusals need the name.
        why = _details(exc) if unavailable else f"{target.node} refused a sink: {_details(exc)}"
        return _failed(source, target, options.transport, why, unavailable, target.node, device)
    hearing.accepted = True
    request = pb.MeasureBandwidthRequest(
        peer=target.target,
        transport=options.transport,
        streams=options.streams,
        rdma_device=device,
        force=options.force,
        sink=sink,
    )
    request.duration.FromTimedelta(timedelta(seconds=options.seconds))
    request.warmup.FromTimedelta(timedelta(seconds=options.warmup))
    budget = options.seconds + options.warmup + 30
    try:
        with connect(source.target) as sender:
            response = sender.measure_bandwidth(request, timeout=budget)
    except grpc.RpcError as exc:
        # The sending agent names the side at fault; without that, the fault is its own.
        peer_side = wire.failed_side(exc) == pb.TEST_SIDE_PEER
        blamed = target.node if peer_side else source.node
        # (a peer refusing the sending agent's own credentials is not the mesh's token)
        token_refused = status_code(exc) == grpc.StatusCode.UNAUTHENTICATED
        if not (peer_side and token_refused) and (refusal := _refusal(blamed, exc)):
            return hearing.refused(refusal, source, target, options.transport, device)
        unavailable = status_code(exc) == grpc.StatusCode.FAILED_PRECONDITION
        return _failed(
            source, target, options.transport, _details(exc), unavailable, blamed, device
        )
    ends = {"sender": source.node, "sink": target.node}
    return Link(
        source.node,
        target.node,
        options.transport,
        response.bytes_per_second,
        device=device or None,
        cpu_limited_by=ends.get(response.cpu_limited_side),
    )


def _address(target: str) -> str:
    """The IP address an agent's target names (resolved once, here): the sink's sender."""
    host, port = split_peer(target)
    return str(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0])


def _failed(
    source: Peer,
    target: Peer,
    transport: str,
    why: str,
    unavailable: bool,
    blamed: str,
    device: str,
) -> Link:
    """A failed test, blamed on the node at fault.

    FAILED_PRECONDITION means the test could not run there (GPU processes active, no RDMA
    device or perftest): `unavailable`; anything else means the node could not be reached or
    tested.
    """
    why = why or f"{source.node}'s address {source.target} does not resolve"
    return Link(
        source.node, target.node, transport, None, FAILED, why, blamed, unavailable, device or None
    )


def _details(exc: grpc.RpcError) -> str:
    details = exc.details() if hasattr(exc, "details") else None
    return str(details or exc)
