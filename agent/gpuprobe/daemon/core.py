"""The daemon: one long-lived host, its runner, the report store, the scheduler, the event
path, the pollers and the effects loop, wired together and started and stopped as one.

`gpuprobe.serve.agent.Agent` puts the faces around it (gRPC, `/metrics`, `/healthz`): they
read the store, ask the scheduler for a run and clear through the runner's states; nothing
here knows of them. Which check a source wakes, what a poller asks and which findings the
node's effects act on, the checks' records say (`checks.registry`).
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence

from gpuprobe import cleanup
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.rdma import RdmaConfig
from gpuprobe.checks.record import WAKE_KERNEL_LOG, WAKE_NVML_EVENTS
from gpuprobe.checks.registry import (
    CHECKS,
    active,
    clear,
    kernel_kinds,
    refuse_unknown_names,
    section,
    woken_by,
)
from gpuprobe.checks.runner import CheckRunner, Ran
from gpuprobe.checks.state import CheckStates
from gpuprobe.checks.xid.settings import XidConfig
from gpuprobe.config import Config
from gpuprobe.daemon.links import bandwidth_tests
from gpuprobe.daemon.pollers import NoticePoller
from gpuprobe.daemon.scheduler import Scheduler, plan
from gpuprobe.daemon.signals import Signals, kernel_log_source, nvml_source
from gpuprobe.daemon.store import AgentState, ReportStore
from gpuprobe.effects.daemon import EffectsLink, wanted
from gpuprobe.errors import UsageError
from gpuprobe.gpu.kernel_follow import KernelLogFollower
from gpuprobe.gpu.kernel_sources import boot_id, followed_files, kernel_journal
from gpuprobe.host import Host
from gpuprobe.host.nvml_relay import EventRelay
from gpuprobe.kube.api import Access
from gpuprobe.measure.bandwidth import BandwidthTests, PeerSinks
from gpuprobe.pipeline import Sink
from gpuprobe.report import CheckResult, now
from gpuprobe.threads import start_thread

log = logging.getLogger("gpuprobe.serve")

# Forgets the sticky findings of one GPU index (every GPU's when None); how many it forgot.
Clearer = Callable[[int | None], int]


class Daemon:
    """Everything `gpuprobe serve` runs besides its faces, on one host with one
    configuration: rounds of checks, re-runs on the node's events and the cloud's notices,
    the merged report, and (when `kubernetes.enabled` says so) the effects on the cluster."""

    def __init__(
        self,
        host: Host,
        config: Config,
        names: Sequence[str],
        rng: random.Random | None = None,
        states: CheckStates | None = None,
        kubeconfig: str | None = None,
    ) -> None:
        refuse_unknown_names(config)  # the validation `check` and `capture` make too
        self.host = host
        self.config = config
        self.names = list(names)
        self.stopping = threading.Event()
        active_names = active(self.names)
        passive = [n for n in self.names if n not in active_names]
        self.store = ReportStore(host.node_name, self.names, first=passive)
        self.executor = CheckRunner(host, config, CHECKS, states)
        rng = rng or random.Random()
        groups = plan(self.names, config.serve, active_names, time.monotonic(), rng)
        self.scheduler = Scheduler(
            self.executor, self.store, groups, config.serve.jitter_fraction, self.names, rng=rng
        )
        self.signals = self._signals()
        self.pollers = self._pollers()
        self.kube = self._kube_link(kubeconfig, rng)

    def bandwidth_tests(self, peers: PeerSinks | None) -> BandwidthTests:
        """The agent's bandwidth tests over its host (its peers' sinks opened through
        `peers`), their latest results published to the store."""
        return bandwidth_tests(
            self.host,
            self.store,
            peers,
            section(self.config, RdmaConfig).test,
            self.config.bandwidth,
            self.config.serve.bandwidth_threads,
        )

    def sinks(self) -> list[Sink[AgentState]]:
        """The daemon's own sinks of each new state: the effects loop, when it is on."""
        return [self._publish_to_kubernetes] if self.kube is not None else []

    def start(self) -> None:
        """Start the first round of checks, the pollers, the event path and the effects loop
        (when it is on); raises UsageError when the system refuses the threads (a pids limit
        below what the agent needs to start)."""
        if start_thread(self.scheduler.run, "scheduler", (self.stopping,)) is None:
            raise UsageError("cannot start the scheduler's thread (a pids limit reached?)")
        for poller in self.pollers:
            if start_thread(poller.run, "notices", (self.stopping,)) is None:
                raise UsageError("cannot start the notice poller's thread (a pids limit reached?)")
        if not self.signals.start():
            raise UsageError("cannot start the event path's threads (a pids limit reached?)")
        if self.kube is not None and not self.kube.start():
            raise UsageError("cannot start the Kubernetes publisher's thread (a pids limit?)")

    def stop(self) -> None:
        """Stop scheduling, polling, waking and publishing (running checks go on: `finish`)."""
        self.stopping.set()
        self.signals.close()
        if self.kube is not None:
            self.kube.stop()

    def finish(self, deadline: float) -> None:
        """Let running checks finish until `deadline` (monotonic), and remove what active
        checks left behind; a check still running then is abandoned to its thread."""
        while self.executor.in_flight() and time.monotonic() < deadline:
            time.sleep(0.05)
        # The scheduling threads end after their round; one waiting on a stuck check is left.
        lanes = self.scheduler.join(max(0.0, deadline - time.monotonic()))
        stuck = self.executor.in_flight()
        if stuck or lanes:
            log.warning("checks abandoned at shutdown", extra={"checks": stuck, "lanes": lanes})
        cleanup.remove_all()

    def _pollers(self) -> list[NoticePoller]:
        """The checks' own sources polled between rounds (their records' `poll`: the cloud's
        notices, every `lifecycle.poll_seconds`): a change runs the check now, through the
        event path (a burst of changes makes one run), published like a round's. None off
        any known cloud, or without the check."""
        pollers = []
        for name in self.names:
            poll = CHECKS[name].poll
            found = poll(self.executor.context(), self.config) if poll is not None else None
            if found is not None:
                wake = functools.partial(self.signals.wake, [name], found.reason)
                pollers.append(NoticePoller(found.sense, wake, found.seconds))
        return pollers

    def _signals(self) -> Signals:
        """The event path: NVML's events and the kernel log wake the checks whose records
        name them (the xid check) at once (`serve.follow_events`); other sources wake checks
        through `signals.wake`."""
        signals = Signals(self.scheduler.run_now, self.executor.in_flight, self.names)
        if not self.config.serve.follow_events:
            return signals
        woken = woken_by(WAKE_NVML_EVENTS, self.names)
        if woken:
            relay = EventRelay(self.host.nvml)
            self.host.nvml = relay  # the checks drain what the waiting thread received
            signals.add_source(WAKE_NVML_EVENTS, nvml_source(relay, woken))
        kinds = kernel_kinds(self.names)
        if kinds:
            settings = section(self.config, XidConfig)
            follower = KernelLogFollower(
                self.host.fs,
                settings.kernel_logs,
                kmsg=kernel_journal(self.host) if settings.kmsg else None,
                files=followed_files(self.host),
                max_bytes=settings.kernel_log_max_bytes,
            )
            source = kernel_log_source(follower, signals.stop_read, kinds)
            signals.add_source(WAKE_KERNEL_LOG, source)
        return signals

    def _kube_link(self, kubeconfig: str | None, rng: random.Random) -> EffectsLink | None:
        """Node conditions, events and taints, when `kubernetes.enabled` says so."""
        if not wanted(self.config.kubernetes, kubeconfig):
            return None
        try:
            return EffectsLink(
                self.host.node_name,
                self.config.kubernetes,
                Access(kubeconfig=kubeconfig),
                report_own=self._report_own,
                rng=rng,
                remediation=self.config.remediation,
                boot_id=boot_id(self.host),
            )
        except UsageError as exc:
            if self.config.kubernetes.enabled is True or kubeconfig is not None:
                raise
            # auto: credentials that do not work leave the agent as it was without them.
            log.warning("kubernetes off", extra={"error": str(exc)})
            return None

    def _publish_to_kubernetes(self, state: AgentState) -> None:
        """Hand the report to the publishing loop (which never blocks: it publishes it soon)."""
        if self.kube is not None:
            self.kube.loop.offer(state.report)

    def _report_own(self, result: CheckResult) -> None:
        """The agent's own result about its Kubernetes updates joins the report."""
        self.store.update([Ran(result, now())])


def sticky_clearer(ctx: CheckContext, config: Config) -> Clearer:
    """The checks' clearing (`registry.clear`: each record's `clear`, the xid check's) bound
    to this agent's context (its host and the states its runner keeps), so the daemon's
    memory of sticky findings is cleared along with their state files."""

    def clear_sticky(gpu: int | None) -> int:
        """Forget the sticky findings of `gpu` (all when None) on this host."""
        return clear(ctx, config, gpu)

    return clear_sticky
