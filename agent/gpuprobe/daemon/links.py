"""The agent's bandwidth tests over its host, and their latest result toward each peer,
published to the report store (for `/metrics`); the gRPC face (`gpuprobe.serve.bandwidth`)
hands them their requests."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from gpuprobe.config import BandwidthConfig
from gpuprobe.daemon.store import LinkResult, ReportStore
from gpuprobe.gpu.nvidia.device import busy_gpus
from gpuprobe.host import Host
from gpuprobe.measure.bandwidth import BandwidthTests, Measurement, PeerSinks
from gpuprobe.measure.perftest import RdmaTestConfig

# Peers an agent remembers results for: the peer's name comes with the sink a caller hands
# over, so a caller must not be able to grow the metrics page without end.
MAX_LINKS = 1024


class LinkBook:
    """The latest result per (peer, transport), published to the report store for metrics;
    at most MAX_LINKS of them (the oldest go first)."""

    def __init__(self, store: ReportStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._results: dict[tuple[str, str], LinkResult] = {}

    def record(self, result: Measurement) -> None:
        """Keep `result` as the latest for its peer and transport."""
        link = LinkResult(result.peer, result.transport, result.bytes_per_second, datetime.now(UTC))
        with self._lock:
            self._results.pop((link.peer, link.transport), None)
            self._results[(link.peer, link.transport)] = link  # newest last
            while len(self._results) > MAX_LINKS:
                del self._results[next(iter(self._results))]
            latest = [self._results[k] for k in sorted(self._results)]
        self._store.update_links(latest)


def bandwidth_tests(
    host: Host,
    store: ReportStore,
    peers: PeerSinks | None,
    rdma_test: RdmaTestConfig | None = None,
    policy: BandwidthConfig | None = None,
    tcp_threads: int | None = None,
) -> BandwidthTests:
    """The agent's bandwidth tests over its host, publishing results to `store`."""
    return BandwidthTests(
        host.node_name,
        host.fs,
        lambda: busy_gpus(host.nvml),
        LinkBook(store).record,
        peers,
        rdma_test,
        policy,
        tcp_threads,
    )
