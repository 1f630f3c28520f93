"""One NCCL test between nodes: create its objects, follow its pods to an outcome, read the
result, delete everything.

The outcome, by what the pods show (their states are read every poll, more often at first):

- **done**: the launcher (MPIJob) or every rank (Indexed Job) succeeded; the launcher's (rank
  0's) log holds the table, read by nccl-tests' own parser (`gpuprobe.measure.nccl`). The
  link's figure is the out-of-place bus bandwidth at the largest size; a table that spans
  fewer ranks or machines than the test asked for, or stops short of its largest size, is a
  failure, not a figure.
- **failed**: a pod of the test failed (or its Job / MPIJob says so): the link is FAILED with
  NCCL's own words (`NCCL WARN ...`, nccl-tests' `Test NCCL failure ...`) from the logs,
  each named by the node its machine ran on; without such words, the container's end.
- **not run**: the deadline came before the all-reduce started (the launcher, or every rank,
  never ran): the scheduler's words for each pod it could not place (its PodScheduled
  condition, else its FailedScheduling event), or what a placed pod's container waits for
  (an image pull). Never a bandwidth.
- **late**: the all-reduce started and had not finished at the deadline: FAILED, with
  whatever NCCL said so far.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuprobe.errors import UsageError
from gpuprobe.kube.api import KubeError
from gpuprobe.kube.objects import CONFIG_MAPS, EVENTS, JOBS, MPI_JOBS, PODS, SERVICES, ObjectApi
from gpuprobe.kube.reader import Kind
from gpuprobe.measure.nccl import NcclTestError, expected_largest, parse_output
from gpuprobe.mesh.nccl import logs, workload
from gpuprobe.mesh.nccl.ledger import Ledger
from gpuprobe.mesh.nccl.pods import LAUNCHER, RANK, WORKER, PodState, pod_state
from gpuprobe.mesh.verdict import FAILED, Link

MPIJOB, JOB = "mpijob", "job"
CONTAINERS = {
    LAUNCHER: workload.LAUNCHER_CONTAINER,
    WORKER: workload.WORKER_CONTAINER,
    RANK: workload.RANK_CONTAINER,
}
TAIL_LINES = 5000  # of a log: the table and NCCL's words are near its end
FIRST_POLL, MOST_POLL = 0.2, 2.0  # seconds between polls: soon at first, then every 2 s
GONE_SECONDS = 120.0  # how long a deleted test's pods may take to free their GPUs


class Refused(UsageError):
    """The API server refused the test's objects (RBAC, validation, a kind not served): every
    test would meet the same refusal, so the mesh stops with one line."""


@dataclass
class Seen:
    """What the polls saw of the test's pods, kept as they come and go (the MPI Operator
    deletes the workers once the launcher ends)."""

    pods: dict[str, PodState] = field(default_factory=dict)

    def node_of(self, host: str) -> str | None:
        """The node a machine (a pod's hostname) ran on."""
        return next((p.node for p in self.pods.values() if p.hostname == host and p.node), None)


@dataclass(frozen=True)
class Clock:
    """Time, replaceable in tests of the pure parts."""

    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


class PairTest:
    """One test: `run()` gives its link, its objects deleted whatever happens."""

    def __init__(
        self,
        api: ObjectApi,
        ledger: Ledger,
        w: workload.Workload,
        runner: str,
        rank_source: str,
        clock: Clock | None = None,
    ) -> None:
        self.api, self.ledger, self.w, self.runner = api, ledger, w, runner
        self.rank_source = rank_source
        self.clock = clock or Clock()
        self.owner: Kind = MPI_JOBS if runner == MPIJOB else JOBS
        self.seen = Seen()

    def run(self) -> Link:
        """Create, follow, read, delete; the link between the test's first two nodes."""
        try:
            self._create()
            return self._follow()
        finally:
            self._remove()

    # -- creating and removing ----------------------------------------------------------
    def _create(self) -> None:
        w = self.w
        if self.runner == MPIJOB:
            self._make(MPI_JOBS, workload.mpi_job(w))
            return
        job = self._make(JOBS, workload.indexed_job(w))
        owned = workload.owner(job)
        self._make(SERVICES, workload.rank_service(w, owned))
        self._make(CONFIG_MAPS, workload.rank_program(w, owned, self.rank_source))

    def _make(self, kind: Kind, obj: Mapping[str, Any]) -> dict[str, Any]:
        with self.ledger.creating(kind, obj["metadata"]["name"]):
            try:
                return self.api.create(kind, obj)
            except KubeError as exc:
                what = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
                raise Refused(
                    f"the API server did not create {what} {obj['metadata']['name']} in "
                    f"namespace {self.w.namespace}: {exc.code}: {exc.message}"
                ) from None

    def _remove(self) -> None:
        """Delete the test's objects (the owner first: its pods go with it), then wait, a
        bounded time, for its pods to be gone, so the next round finds the GPUs free."""
        held = [(k, n) for k, n in self.ledger.held() if n == self.w.name]
        for kind, name in sorted(held, key=lambda kn: kn[0] != self.owner):
            # A failure leaves it written down: the run's end (or exit) tries again.
            with contextlib.suppress(KubeError):
                self.ledger.delete(self.api, kind, name)
        end = self.clock.now() + GONE_SECONDS
        delay = FIRST_POLL
        while self.clock.now() < end:
            try:
                if not self.api.list(PODS, labels=self.w.selector):
                    return
            except KubeError:
                return
            self.clock.sleep(delay)
            delay = min(delay * 2, MOST_POLL)

    # -- following ------------------------------------------------------------------------
    def _follow(self) -> Link:
        end = self.clock.now() + self.w.deadline_seconds
        delay = FIRST_POLL
        error: KubeError | None = None
        while True:
            try:
                pods = self._poll()
                status = self.api.get(self.owner, self.w.name).get("status") or {}
                error = None
            except KubeError as exc:
                if exc.code in ("401", "403"):
                    raise Refused(f"reading the test {self.w.name}: {exc}") from None
                if exc.code == "404" and exc.verb == "get":
                    return self._link(
                        error=f"{self.owner.kind} {self.w.name} was deleted "
                        "by someone else before it finished"
                    )
                error, pods, status = exc, [], {}
            if error is None and (link := self._outcome(pods, status)) is not None:
                return link
            if self.clock.now() >= end:
                if error is not None:
                    raise Refused(f"the API server did not answer for {self.w.name}: {error}")
                return self._late(pods)
            self.clock.sleep(min(delay, max(0.0, end - self.clock.now())))
            delay = min(delay * 2, MOST_POLL)

    def _poll(self) -> list[PodState]:
        found = []
        for pod in self.api.list(PODS, labels=self.w.selector):
            state = pod_state(pod, _container(pod))
            self.seen.pods[state.name] = state
            found.append(state)
        return found

    def _outcome(self, pods: Sequence[PodState], status: Mapping[str, Any]) -> Link | None:
        """The link once the pods (and the owner's conditions) say the test ended."""
        failed = _condition(status, "Failed")
        if self.runner == MPIJOB:
            leader = [p for p in pods if p.role == LAUNCHER]
            if any(p.succeeded for p in leader):
                return self._done(next(p for p in leader if p.succeeded))
            if failed is not None or any(p.failed for p in pods):
                return self._failed(pods, failed)
            return None
        ranks = [p for p in pods if p.role == RANK]
        if failed is not None or any(p.failed for p in ranks):
            return self._failed(pods, failed)
        complete = _condition(status, "Complete") is not None
        if complete or (len(ranks) == len(self.w.nodes) and all(p.succeeded for p in ranks)):
            zero = [p for p in ranks if p.index == 0]
            if not zero:
                return self._link(error="rank 0's pod is gone: its table cannot be read")
            return self._done(zero[0])
        return None

    def _done(self, pod: PodState) -> Link:
        text = self._log(pod)
        try:
            result = parse_output(text)
        except NcclTestError as exc:
            return self._link(error=f"{pod.name} ({pod.node}) printed no table: {exc}")
        hosts = logs.rank_hosts(text)
        if hosts and (len(hosts) != self.w.ranks or len(set(hosts.values())) != len(self.w.nodes)):
            return self._link(
                error=f"the all-reduce ran {len(hosts)} ranks on {len(set(hosts.values()))} "
                f"machine(s), not {self.w.ranks} on {len(self.w.nodes)}: its figure is not "
                "this link's"
            )
        expected = expected_largest(tuple(self.w.sweep.args()), text)
        largest = result.largest.size_bytes
        if expected is not None and largest < expected - 4096:
            return self._link(
                error=f"the table stops at {largest} bytes, short of the {expected} bytes "
                "its sweep asks for"
            )
        return Link(
            self.w.nodes[0],
            self.w.nodes[1],
            "nccl",
            result.largest.out_of_place_busbw,
            wrong_values=result.wrong_values,
        )

    def _failed(self, pods: Sequence[PodState], condition: str | None) -> Link:
        """A failed test: NCCL's words from the logs of the pods that ran, each named by its
        node; without them, how the failed pods ended."""
        said: list[logs.Said] = []
        ended: list[str] = []
        readers = [p for p in pods if p.started and p.role in (LAUNCHER, RANK)]
        readers += [p for p in pods if p.started and p.role == WORKER and p.failed]
        for pod in sorted(readers, key=lambda p: (not p.failed, p.name)):
            text = self._log(pod)
            said += [logs.Said(s.host or pod.hostname, s.words) for s in logs.failures(text)]
            if pod.failed:
                end = pod.ended or pod.phase
                ended.append(f"{self._where(pod)}: {end}: {logs.telling_words(text)}")
        if said:
            named = [(self._node(s.host), s) for s in logs.first_per_host(said)]
            error = "; ".join(f"{self._label(node, s.host)}: {s.words}" for node, s in named)
            blamed = next((node for node, _ in named if node in self.w.nodes), None)
        else:
            error = "; ".join(ended) or condition or "the test failed"
            blamed = next((p.node for p in pods if p.failed and p.node in self.w.nodes), None)
        return self._link(error=error, blamed=blamed)

    def _late(self, pods: Sequence[PodState]) -> Link:
        """The deadline came: not run (the all-reduce never started), or failed (late)."""
        seconds = f"{self.w.deadline_seconds:g} s"
        if self.runner == MPIJOB:
            started = any(p.role == LAUNCHER and p.started for p in pods)
        else:
            ranks = [p for p in pods if p.role == RANK]
            started = len(ranks) == len(self.w.nodes) and all(p.started for p in ranks)
        if started:
            link = self._failed(pods, None)
            return Link(
                link.source,
                link.target,
                "nccl",
                None,
                FAILED,
                f"the all-reduce did not finish within {seconds}"
                + ("" if link.error == "the test failed" else f": {link.error}"),
                link.blamed,
            )
        return self._not_run(pods, seconds)

    def _not_run(self, pods: Sequence[PodState], seconds: str) -> Link:
        # The GPU pods' nodes (the launcher, without GPUs, may run anywhere).
        placed = {p.node for p in pods if p.node and p.role != LAUNCHER}
        missing = [n for n in self.w.nodes if n not in placed]
        reasons = []
        for pod in pods:
            if pod.node is None:
                words = pod.unschedulable or self._scheduling_event(pod.name)
                reasons.append(f"{pod.name} not scheduled: {words or 'no word from the scheduler'}")
            elif not pod.started:
                reasons.append(f"{self._where(pod)}: {pod.name} waits: {pod.waiting or pod.phase}")
        if not pods:
            reasons.append(self._no_pods())
        elif self.runner == MPIJOB and not any(p.role == LAUNCHER for p in pods):
            unready = [p.name for p in pods if p.role == WORKER and not p.ready]
            reasons.append(
                "the MPI Operator created no launcher: it waits for every worker to be ready"
                + (f" ({', '.join(unready)} not ready)" if unready else "")
            )
        lead = f"not run: its pods did not start within {seconds}"
        if missing:
            lead += f"; {', '.join(missing)} took no pod of it"
        waiting = (p.node for p in pods if not p.started and p.node in self.w.nodes)
        blamed = missing[0] if missing else next(waiting, None)
        return self._link(error=f"{lead}: " + "; ".join(reasons), blamed=blamed, unavailable=True)

    def _no_pods(self) -> str:
        """Why no pod was made: the owner's warning events (the operator's validation), or
        that no controller acted on it."""
        warnings = [
            str(e.get("message", ""))
            for e in self._events(self.w.name)
            if e.get("type") == "Warning"
        ]
        if warnings:
            return f"no pod was created; {self.owner.kind} {self.w.name}: {warnings[-1]}"
        who = "the MPI Operator (is it running?)" if self.runner == MPIJOB else "the Job controller"
        return f"no pod was created: {who} did not act on {self.owner.kind} {self.w.name}"

    def _scheduling_event(self, pod: str) -> str | None:
        found = [e for e in self._events(pod) if e.get("reason") == "FailedScheduling"]
        return str(found[-1].get("message", "")) if found else None

    def _events(self, name: str) -> list[dict[str, Any]]:
        try:
            return self.api.list(EVENTS, fields=f"involvedObject.name={name}")
        except KubeError:
            return []

    # -- words ------------------------------------------------------------------------------
    def _log(self, pod: PodState) -> str:
        try:
            return self.api.log(pod.name, pod.container, TAIL_LINES)
        except KubeError as exc:
            return f"(its log could not be read: {exc})"

    def _node(self, host: str) -> str | None:
        return self.seen.node_of(host)

    def _where(self, pod: PodState) -> str:
        """The node a GPU pod ran on; the launcher (no GPU, on any node) by its role."""
        if pod.role == LAUNCHER:
            return "the launcher"
        return pod.node or pod.name

    @staticmethod
    def _label(node: str | None, host: str) -> str:
        if node and host:
            return f"{node} ({host})"
        return node or host or "a rank"

    def _link(self, error: str, blamed: str | None = None, unavailable: bool = False) -> Link:
        return Link(
            self.w.nodes[0],
            self.w.nodes[1],
            "nccl",
            None,
            FAILED,
            error,
            blamed or self.w.nodes[0],
            unavailable,
        )


def _container(pod: Mapping[str, Any]) -> str:
    role = ((pod.get("metadata") or {}).get("labels") or {}).get("training.kubeflow.org/job-role")
    return CONTAINERS.get(str(role or RANK), workload.RANK_CONTAINER)


def _condition(status: Mapping[str, Any], kind: str) -> str | None:
    """A True condition's words (`Reason: message`), or None."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            reason, message = condition.get("reason") or kind, condition.get("message") or ""
            return f"{reason}: {message}" if message else str(reason)
    return None
