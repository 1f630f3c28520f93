"""The agent: one long-lived host, the scheduler, the gRPC and HTTP servers, wired together.

`Agent.start()` binds both ports and starts the first round of checks; `Agent.stop()` stops
accepting calls, ends the watch streams, gives running checks a moment to finish and removes
the temporary data active checks left. The command-line face (`gpuprobe.serve.main`) adds
signals and logs around it.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from grpc_health.v1 import health_pb2
from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from gpuprobe import cleanup
from gpuprobe.checks import rdma
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import WAKE_KERNEL_LOG, WAKE_NVML_EVENTS
from gpuprobe.checks.registry import CHECKS, active, clear, refuse_unknown_names, woken_by
from gpuprobe.checks.runner import CheckRunner, Ran
from gpuprobe.checks.state import CheckStates
from gpuprobe.checks.xid.settings import xid_settings
from gpuprobe.config import Config
from gpuprobe.credentials import TokenFile, check_key_pair
from gpuprobe.effects.daemon import EffectsLink, wanted
from gpuprobe.errors import UsageError
from gpuprobe.gpu.kernel_follow import KernelLogFollower
from gpuprobe.gpu.kernel_sources import boot_id, kernel_journal
from gpuprobe.host import Host
from gpuprobe.host.nvml_relay import EventRelay
from gpuprobe.kube.api import Access
from gpuprobe.pipeline import Sink
from gpuprobe.report import CheckResult, now
from gpuprobe.serve import grpc_server
from gpuprobe.serve.bandwidth import PeerChannel, bandwidth_tests
from gpuprobe.serve.limits import RateLimiter
from gpuprobe.serve.metrics import ReportCollector
from gpuprobe.serve.metrics_http import MetricsPage, MetricsServer
from gpuprobe.serve.notices import NoticePoller
from gpuprobe.serve.scheduler import Scheduler, plan
from gpuprobe.serve.security import Guard, server_credentials
from gpuprobe.serve.service import SERVICE_NAME, ClearXid, NodeDiagnosticsService
from gpuprobe.serve.signals import KERNEL_MARKERS, Signals, kernel_log_source, nvml_source
from gpuprobe.serve.state import AgentState, ReportStore
from gpuprobe.threads import start_thread

log = logging.getLogger("gpuprobe.serve")


@dataclass(frozen=True)
class ServeOptions:
    """What `gpuprobe serve`'s flags say about listening and security."""

    grpc_listen: str = "[::]:50051"
    metrics_listen: str = "[::]:9760"
    token_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    allow_unauthenticated: bool = False
    # The certificate this agent presents to peers that require one (mTLS); without it, the
    # server certificate (which then needs the clientAuth extended key usage too).
    tls_client_cert: str | None = None
    tls_client_key: str | None = None
    # Kubernetes access from outside a pod (else in-cluster credentials, when present).
    kubeconfig: str | None = None

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise UsageError("--tls-cert and --tls-key go together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise UsageError("--tls-client-ca needs --tls-cert and --tls-key")
        if (self.tls_client_cert is None) != (self.tls_client_key is None):
            raise UsageError("--tls-client-cert and --tls-client-key go together")
        if self.tls_client_cert is not None and self.tls_client_ca is None:
            raise UsageError("--tls-client-cert needs --tls-client-ca (the mTLS fleet's CA)")

    def peer_certificate(self) -> tuple[str | None, str | None]:
        """The certificate and key this agent presents when it calls a peer (mTLS only)."""
        if self.tls_client_ca is None:
            return None, None
        if self.tls_client_cert is not None:
            return self.tls_client_cert, self.tls_client_key
        return self.tls_cert, self.tls_key


class Agent:
    """Everything `gpuprobe serve` runs, on one host with one configuration."""

    def __init__(
        self,
        host: Host,
        config: Config,
        names: Sequence[str],
        options: ServeOptions,
        clear_xid: ClearXid | None = None,
        rng: random.Random | None = None,
        states: CheckStates | None = None,
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
        self.collector = ReportCollector(host.node_name)
        report_registry, live_registry = CollectorRegistry(), CollectorRegistry()
        report_registry.register(self.collector)
        ProcessCollector(registry=live_registry)
        self.metrics_page = MetricsPage(report_registry, live_registry)
        self.pollers = self._pollers()
        self.kube = self._kube_link(options.kubeconfig, rng)
        if self.kube is not None:
            live_registry.register(self.kube.collector)

        token = TokenFile(options.token_file) if options.token_file else None
        cert_file, key_file = options.peer_certificate()
        if options.tls_client_cert is not None and options.tls_client_key is not None:
            check_key_pair(
                options.tls_client_cert,
                options.tls_client_key,
                "--tls-client-cert",
                "--tls-client-key",
            )
        peers = PeerChannel(
            token,
            ca_file=options.tls_client_ca or options.tls_cert,
            cert_file=cert_file,
            key_file=key_file,
            server_certificate_as_client=cert_file is not None and cert_file == options.tls_cert,
        )
        self.bandwidth = bandwidth_tests(
            host,
            self.store,
            peers,
            config.section(rdma.NAME, rdma.RdmaConfig).test,
            config.bandwidth,
            config.serve.bandwidth_threads,
        )
        mtls = options.tls_client_ca is not None
        self.guard = Guard(token, mtls=mtls, open_mode=options.allow_unauthenticated)
        credentials = None
        if options.tls_cert is not None and options.tls_key is not None:
            credentials = server_credentials(
                options.tls_cert, options.tls_key, options.tls_client_ca
            )
        self.service = NodeDiagnosticsService(
            self.store,
            self.scheduler,
            self.names,
            self.guard,
            RateLimiter(config.serve.calls_burst, config.serve.calls_per_minute),
            config.serve.max_watchers,
            self.stopping,
            clear_xid,
            self.bandwidth,
        )
        self.grpc, self.grpc_port, self.health, self.streams = grpc_server.build(
            self.service, options.grpc_listen, credentials, config.serve.max_watchers
        )
        for sink in self._sinks():
            self.store.add_sink(sink)
        self.http = MetricsServer(
            options.metrics_listen, self.metrics_page, self.healthz, self.readyz
        )
        self.metrics_port = self.http.port
        self.tls = "mtls" if mtls else "tls" if credentials is not None else "none"

    def start(self) -> None:
        """Serve, and start the first round of checks (and the effects loop when it
        is on); raises UsageError when the system refuses the threads (a pids limit below what
        the agent needs to start)."""
        try:
            self.grpc.start()
            self.http.start()
        except RuntimeError as exc:
            raise UsageError(f"cannot start serving: {exc}") from None
        if start_thread(self.scheduler.run, "scheduler", (self.stopping,)) is None:
            raise UsageError("cannot start the scheduler's thread (a pids limit reached?)")
        for poller in self.pollers:
            if start_thread(poller.run, "notices", (self.stopping,)) is None:
                raise UsageError("cannot start the notice poller's thread (a pids limit reached?)")
        if not self.signals.start():
            raise UsageError("cannot start the event path's threads (a pids limit reached?)")
        if self.kube is not None and not self.kube.start():
            raise UsageError("cannot start the Kubernetes publisher's thread (a pids limit?)")

    def stop(self, grace: float = 2.0) -> None:
        """Stop accepting calls, end the streams, let running checks finish within `grace`
        seconds, and remove what active checks left behind."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.signals.close()
        if self.kube is not None:
            self.kube.stop()
        # NOT_SERVING for the health checks and each Watch (queued: a Watch's worker sends it).
        self.health.enter_graceful_shutdown()
        self.store.wake_all()
        done = self.grpc.stop(grace)
        self.http.stop()
        deadline = time.monotonic() + grace
        while self.executor.in_flight() and time.monotonic() < deadline:
            time.sleep(0.05)
        # The scheduling threads end after their round; one waiting on a stuck check is left.
        lanes = self.scheduler.join(max(0.0, deadline - time.monotonic()))
        stuck = self.executor.in_flight()
        if stuck or lanes:
            log.warning("checks abandoned at shutdown", extra={"checks": stuck, "lanes": lanes})
        cleanup.remove_all()
        done.wait(grace)

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
        woken = woken_by(WAKE_KERNEL_LOG, self.names)
        if woken:
            settings = xid_settings(self.config)
            follower = KernelLogFollower(
                self.host.fs,
                settings.kernel_logs,
                kmsg=kernel_journal(self.host) if settings.kmsg else None,
                markers=KERNEL_MARKERS,
            )
            source = kernel_log_source(follower, signals.stop_read, woken)
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

    def _sinks(self) -> list[Sink[AgentState]]:
        """Where each new state of the report goes, in order: the metric families, the
        `/metrics` page, the effects loop, the gRPC answers, and the health state
        (SERVING once the answers hold the first report)."""
        sinks: list[Sink[AgentState]] = [self.collector.update, self.metrics_page.invalidate]
        if self.kube is not None:
            sinks.append(self._publish_to_kubernetes)
        return [*sinks, self.service.render, self._serving]

    def _publish_to_kubernetes(self, state: AgentState) -> None:
        """Hand the report to the publishing loop (which never blocks: it publishes it soon)."""
        if self.kube is not None:
            self.kube.loop.offer(state.report)

    def _report_own(self, result: CheckResult) -> None:
        """The agent's own result about its Kubernetes updates joins the report."""
        self.store.update([Ran(result, now())])

    def _serving(self, state: AgentState) -> None:
        if state.report is not None and not self.stopping.is_set():
            self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)

    def readyz(self) -> tuple[int, str]:
        """The `/readyz` page: 200 once the first report exists (what the gRPC health of
        gpuprobe.v1.NodeDiagnostics says), 503 before it and while stopping."""
        if self.stopping.is_set():
            return 503, "stopping\n"
        if self.store.current().report is None:
            return 503, "not ready: the first round of checks is running\n"
        return 200, "ready\n"

    def healthz(self) -> tuple[int, str]:
        """The `/healthz` page: 200 while serving (503 when stopping), and what the agent
        knows, for a human with curl."""
        if self.stopping.is_set():
            return 503, "stopping\n"
        report = self.store.current().report
        lines = ["ok", f"node: {self.host.node_name}"]
        if report is None:
            lines.append("report: none yet (the first round of checks is running)")
        else:
            age = (datetime.now(UTC) - report.time).total_seconds()
            lines.append(f"status: {report.status.value}")
            lines.append(f"report: {report.time.isoformat()} ({age:.0f} s ago)")
            lines += [f"check {c.name}: {c.status.value} - {c.summary}" for c in report.checks]
        return 200, "\n".join(lines) + "\n"


def sticky_clearer(ctx: CheckContext, config: Config) -> ClearXid:
    """The checks' clearing (`registry.clear`: each record's `clear`, the xid check's) bound
    to this agent's context (its host and the states its runner keeps), so the daemon's
    memory of sticky findings is cleared along with their state files."""

    def clear_sticky(gpu: int | None) -> int:
        """Forget the sticky findings of `gpu` (all when None) on this host."""
        return clear(ctx, config, gpu)

    return clear_sticky
