"""`gpuprobe mesh --transport nccl`: the all-reduce between nodes, run by Kubernetes, pair by
pair, judged by the mesh's rules (docs/mesh.md, "NCCL between nodes").

The nodes (named, or every GPU node with a gpuprobe agent) are paired as the mesh pairs agents
(gpuprobe.mesh.schedule): every pair by the circle method (full), or random matchings and a
re-test of the suspects (quick). The pairs of a round run side by side, each its own workload
(an MPIJob where the MPI Operator is installed, else an Indexed Job running gpuprobe's rank
program), each pod asking for its node's GPUs through the scheduler; a round ends when its
tests' pods are gone, so the next round finds the GPUs free.
"""

from __future__ import annotations

import itertools
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuprobe.errors import UsageError
from gpuprobe.kube.api import Access, KubeError
from gpuprobe.kube.objects import ObjectApi
from gpuprobe.mesh import nccl_rank, schedule, verdict
from gpuprobe.mesh.nccl import nodes as node_choice
from gpuprobe.mesh.nccl.findings import nccl_findings
from gpuprobe.mesh.nccl.ledger import Ledger
from gpuprobe.mesh.nccl.nodes import GpuNode
from gpuprobe.mesh.nccl.pair import JOB, MPIJOB, PairTest
from gpuprobe.mesh.nccl.workload import Sweep, Toleration, Workload
from gpuprobe.mesh.run import MeshResult
from gpuprobe.mesh.verdict import FAILED, LOW, Link, Thresholds

RUNNERS = ("auto", MPIJOB, JOB)
REQUEST_TIMEOUT = 30.0  # one API request


@dataclass(frozen=True)
class NcclOptions:
    """How the NCCL mesh runs."""

    image: str
    namespace: str = "gpuprobe"
    nodes: tuple[str, ...] = ()  # none: every GPU node with a gpuprobe agent
    runner: str = "auto"  # auto (MPIJob where the MPI Operator is) | mpijob | job
    tolerations: tuple[Toleration, ...] = ()
    resources: tuple[tuple[str, str], ...] = ()
    binary: str = "all_reduce_perf"
    sweep: Sweep = field(default_factory=Sweep)
    deadline: float = 300.0  # each test, from its creation to its result
    mode: str = "full"
    matchings: int = 3
    seed: int | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)


@dataclass
class NcclRun:
    """The mesh's result, and what could not be deleted (in words; empty when nothing)."""

    result: MeshResult
    left_behind: list[str]


def nccl_mesh(access: Access, options: NcclOptions) -> NcclRun:
    """Run the NCCL mesh; raises UsageError for a request the cluster cannot serve (no such
    node, fewer than two, the objects refused)."""
    api = ObjectApi(access, options.namespace, REQUEST_TIMEOUT)
    ledger = Ledger(access, options.namespace)
    try:
        result = _mesh(api, ledger, options)
    finally:
        left = ledger.close(api)
        api.close()
    return NcclRun(result, left)


def choose_runner(api: ObjectApi, wanted: str) -> str:
    """MPIJob where the API serves the MPI Operator's kubeflow.org/v2beta1 `mpijobs`
    (discovery), else the Indexed Job; `wanted` forces one."""
    if wanted == JOB:
        return JOB
    try:
        served = "mpijobs" in api.served("kubeflow.org", "v2beta1")
    except KubeError as exc:
        raise UsageError(f"discovering the MPI Operator (kubeflow.org/v2beta1): {exc}") from None
    if wanted == MPIJOB and not served:
        raise UsageError(
            "--nccl-runner mpijob: the API server does not serve kubeflow.org/v2beta1 mpijobs "
            "(the MPI Operator v2 is not installed)"
        )
    return MPIJOB if served else JOB


def _mesh(api: ObjectApi, ledger: Ledger, options: NcclOptions) -> MeshResult:
    runner = choose_runner(api, options.runner)
    if options.nodes:
        found, findings = node_choice.named(api, options.nodes)
    else:
        found, findings = node_choice.with_agents(api), []
        if len(found) < 2:
            seen = ", ".join(n.name for n in found) or "none"
            raise UsageError(
                f"{len(found)} GPU node(s) with a gpuprobe agent in namespace "
                f"{options.namespace} ({seen}): a mesh tests two at least; name them with --nodes"
            )
    if len(found) < 2:
        return MeshResult([], findings + [node_choice.alone(n.name) for n in found])
    by_name = {n.name: n for n in found}
    source = Path(nccl_rank.__file__).read_text()
    run = secrets.token_hex(3)
    counter, lock = itertools.count(), threading.Lock()

    def test(pair: schedule.Pair) -> Link:
        with lock:
            number = next(counter)
        w = _workload(options, run, number, (by_name[pair[0]], by_name[pair[1]]))
        return PairTest(api, ledger, w, runner, source).run()

    names = [n.name for n in found]
    if options.mode == "full":
        rounds = schedule.circle_rounds(names)
    else:
        rounds = schedule.random_matchings(names, options.matchings, options.seed)
    links: list[Link] = []
    for pairs in rounds:
        links += _round(pairs, test)
    if options.mode == "quick":
        judged = verdict.judge(links, options.thresholds)
        suspects = sorted(
            {n for lk in judged if lk.verdict in (LOW, FAILED) for n in (lk.source, lk.target)}
        )
        good = [n for n in names if n not in suspects]
        links += _round(schedule.retest_round(suspects, good), test)
    judged = verdict.judge(links, options.thresholds)
    return MeshResult(judged, findings + nccl_findings(judged))


def _workload(
    options: NcclOptions, run: str, number: int, pair: tuple[GpuNode, GpuNode]
) -> Workload:
    """One test's workload: both nodes ask for as many GPUs as the smaller one offers (one pod
    template serves every rank)."""
    return Workload(
        name=f"gpuprobe-nccl-{run}-{number}",
        namespace=options.namespace,
        nodes=(pair[0].name, pair[1].name),
        gpus=min(pair[0].gpus, pair[1].gpus),
        image=options.image,
        run=run,
        tolerations=options.tolerations,
        resources=options.resources,
        binary=options.binary,
        sweep=options.sweep,
        deadline_seconds=options.deadline,
    )


def _round(pairs: Sequence[schedule.Pair], test: Callable[[schedule.Pair], Link]) -> list[Link]:
    """The pairs of a round side by side; the first error of any (a refusal) raised once all
    have ended (and deleted their objects)."""
    found: list[Link | None] = [None] * len(pairs)
    errors: list[BaseException] = []

    def one(i: int, pair: schedule.Pair) -> None:
        try:
            found[i] = test(pair)
        except BaseException as exc:  # re-raised in the caller's thread below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i, p), daemon=True) for i, p in enumerate(pairs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [link for link in found if link is not None]
