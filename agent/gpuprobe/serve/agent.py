"""The agent: one long-lived host, the scheduler, the gRPC and HTTP servers, wired together.

`Agent.start()` binds both ports and starts the first round of checks; `Agent.stop()` stops
accepting calls, ends the watch streams, gives running checks a moment to finish and removes
the temporary data active checks left. The command-line face (`gpuprobe.serve.main`) adds
signals and logs around it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from gpuprobe import cleanup
from gpuprobe.checks import xid
from gpuprobe.checks.registry import ACTIVE, CHECKS
from gpuprobe.config import Config
from gpuprobe.errors import UsageError
from gpuprobe.host import Host
from gpuprobe.serve import grpc_server
from gpuprobe.serve.bandwidth import Bandwidth, PeerChannel
from gpuprobe.serve.executor import CheckExecutor
from gpuprobe.serve.limits import RateLimiter
from gpuprobe.serve.metrics import ReportCollector
from gpuprobe.serve.metrics_http import MetricsPage, MetricsServer
from gpuprobe.serve.scheduler import Scheduler, plan
from gpuprobe.serve.security import Guard, TokenFile, server_credentials
from gpuprobe.serve.service import SERVICE_NAME, ClearXid, NodeDiagnosticsService
from gpuprobe.serve.state import ReportStore, Snapshot
from gpuprobe.threads import start_thread

log = logging.getLogger("gpuprobe.serve")


@dataclass(frozen=True)
class ServeOptions:
    """What `gpuprobe serve`'s flags say about listening and security."""

    grpc_listen: str = "0.0.0.0:50051"
    metrics_listen: str = "0.0.0.0:9760"
    token_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    allow_unauthenticated: bool = False

    def __post_init__(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise UsageError("--tls-cert and --tls-key go together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise UsageError("--tls-client-ca needs --tls-cert and --tls-key")


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
    ) -> None:
        unknown = sorted(set(config.serve.intervals) - set(CHECKS))
        if unknown:
            raise UsageError(f"serve.intervals: unknown check {unknown[0]!r}")
        self.host = host
        self.config = config
        self.names = list(names)
        self.stopping = threading.Event()
        passive = [n for n in self.names if n not in ACTIVE]
        self.store = ReportStore(host.node_name, self.names, first=passive)
        self.executor = CheckExecutor(host, config, CHECKS)
        rng = rng or random.Random()
        groups = plan(self.names, config.serve, ACTIVE, time.monotonic(), rng)
        self.scheduler = Scheduler(
            self.executor, self.store, groups, config.serve.jitter_fraction, self.names, rng=rng
        )
        self.collector = ReportCollector(host.node_name)
        report_registry, live_registry = CollectorRegistry(), CollectorRegistry()
        report_registry.register(self.collector)
        ProcessCollector(registry=live_registry)
        self.metrics_page = MetricsPage(report_registry, live_registry)
        self.store.add_view(self.collector.update)
        self.store.add_view(self.metrics_page.invalidate)

        token = TokenFile(options.token_file) if options.token_file else None
        peers = PeerChannel(
            token,
            ca_file=options.tls_client_ca or options.tls_cert,
            cert_file=options.tls_cert if options.tls_client_ca else None,
            key_file=options.tls_key if options.tls_client_ca else None,
        )
        self.bandwidth = Bandwidth(
            host, peers, self.store, config.rdma.test, config.serve.bandwidth_threads
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
        self.store.add_view(self._serving)
        self.http = MetricsServer(
            options.metrics_listen, self.metrics_page, self.healthz, self.readyz
        )
        self.metrics_port = self.http.port
        self.tls = "mtls" if mtls else "tls" if credentials is not None else "none"

    def start(self) -> None:
        """Serve, and start the first round of checks; raises UsageError when the system
        refuses the threads (a pids limit below what the agent needs to start)."""
        try:
            self.grpc.start()
            self.http.start()
        except RuntimeError as exc:
            raise UsageError(f"cannot start serving: {exc}") from None
        if start_thread(self.scheduler.run, "scheduler", (self.stopping,)) is None:
            raise UsageError("cannot start the scheduler's thread (a pids limit reached?)")

    def stop(self, grace: float = 2.0) -> None:
        """Stop accepting calls, end the streams, let running checks finish within `grace`
        seconds, and remove what active checks left behind."""
        if self.stopping.is_set():
            return
        self.stopping.set()
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

    def _serving(self, snapshot: Snapshot) -> None:
        if snapshot.report is not None and not self.stopping.is_set():
            from grpc_health.v1 import health_pb2

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
        snapshot = self.store.current()
        report = snapshot.report
        lines = ["ok", f"node: {self.host.node_name}"]
        if report is None:
            lines.append("report: none yet (the first round of checks is running)")
        else:
            age = (datetime.now(UTC) - report.time).total_seconds()
            lines.append(f"status: {report.status.value}")
            lines.append(f"report: {report.time.isoformat()} ({age:.0f} s ago)")
            lines += [f"check {c.name}: {c.status.value} - {c.summary}" for c in report.checks]
        return 200, "\n".join(lines) + "\n"


def xid_clearer(host: Host, config: Config) -> ClearXid:
    """The xid check's `clear(host, config, gpu=None)` bound to this agent's host, so the
    daemon's memory of sticky XIDs is cleared along with the state file."""

    def clear_xid(gpu: int | None) -> int:
        """Forget the sticky XIDs of `gpu` (all when None) on this host."""
        return xid.clear(host, config, gpu=gpu)

    return clear_xid
