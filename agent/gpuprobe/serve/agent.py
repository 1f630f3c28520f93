"""The agent: the daemon (`gpuprobe.daemon`) with its faces, the gRPC and HTTP servers.

`Agent.start()` binds both ports and starts the daemon's first round of checks;
`Agent.stop()` stops accepting calls, ends the watch streams, gives running checks a moment
to finish and removes the temporary data active checks left. The command-line face
(`gpuprobe.serve.main`) adds signals and logs around it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from grpc_health.v1 import health_pb2
from prometheus_client import CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from gpuprobe.checks.state import CheckStates
from gpuprobe.config import Config
from gpuprobe.credentials import TokenFile, check_key_pair
from gpuprobe.daemon.core import Daemon
from gpuprobe.daemon.store import AgentState
from gpuprobe.errors import UsageError
from gpuprobe.host import Host
from gpuprobe.pipeline import Sink
from gpuprobe.serve import grpc_server
from gpuprobe.serve.bandwidth import PeerChannel
from gpuprobe.serve.limits import RateLimiter
from gpuprobe.serve.metrics import ReportCollector
from gpuprobe.serve.metrics_http import MetricsPage, MetricsServer
from gpuprobe.serve.security import Guard, server_credentials
from gpuprobe.serve.service import SERVICE_NAME, ClearXid, NodeDiagnosticsService


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
    """Everything `gpuprobe serve` runs, on one host with one configuration: the daemon
    (`gpuprobe.daemon.core.Daemon`) and the faces that answer from it."""

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
        self.daemon = Daemon(host, config, names, rng, states, options.kubeconfig)
        self.host = host
        self.config = config
        self.names = self.daemon.names
        self.stopping = self.daemon.stopping
        self.store = self.daemon.store
        self.executor = self.daemon.executor
        self.scheduler = self.daemon.scheduler
        self.signals = self.daemon.signals
        self.pollers = self.daemon.pollers
        self.kube = self.daemon.kube
        self.collector = ReportCollector(host.node_name)
        report_registry, live_registry = CollectorRegistry(), CollectorRegistry()
        report_registry.register(self.collector)
        ProcessCollector(registry=live_registry)
        self.metrics_page = MetricsPage(report_registry, live_registry)
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
        self.bandwidth = self.daemon.bandwidth_tests(peers)
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
        """Serve, and start the daemon: the first round of checks (and the effects loop when
        it is on); raises UsageError when the system refuses the threads (a pids limit below
        what the agent needs to start)."""
        try:
            self.grpc.start()
            self.http.start()
        except RuntimeError as exc:
            raise UsageError(f"cannot start serving: {exc}") from None
        self.daemon.start()

    def stop(self, grace: float = 2.0) -> None:
        """Stop accepting calls, end the streams, let running checks finish within `grace`
        seconds, and remove what active checks left behind."""
        if self.stopping.is_set():
            return
        self.daemon.stop()
        # NOT_SERVING for the health checks and each Watch (queued: a Watch's worker sends it).
        self.health.enter_graceful_shutdown()
        self.store.wake_all()
        done = self.grpc.stop(grace)
        self.http.stop()
        self.daemon.finish(time.monotonic() + grace)
        done.wait(grace)

    def _sinks(self) -> list[Sink[AgentState]]:
        """Where each new state of the report goes, in order: the metric families, the
        `/metrics` page, the daemon's own (the effects loop), the gRPC answers, and the
        health state (SERVING once the answers hold the first report)."""
        sinks: list[Sink[AgentState]] = [self.collector.update, self.metrics_page.invalidate]
        return [*sinks, *self.daemon.sinks(), self.service.render, self._serving]

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
