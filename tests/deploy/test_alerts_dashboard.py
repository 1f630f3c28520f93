"""The alerts and the dashboard against a real Prometheus that scrapes real agents.

One `gpuprobe serve` per case below (a snapshot, sometimes with a config), each under its own
node name, scraped by Debian's Prometheus with the alerting rules loaded. Every PromQL
expression of the rules and of the dashboard must evaluate without error; each alert must
select exactly the nodes whose snapshot has its condition (and reach Prometheus' alert list
with its annotations rendered); each dashboard query must return data on the nodes named in
PANEL_DATA, and panels that show a fault none on the healthy node.

To test an expression on another snapshot, add the case to AGENTS and its name to the
expression's entry: one line each. Two alerts need what loopback agents cannot show and get a
Prometheus of their own (ELSEWHERE): no agent at all, and a slow link (agents in network
namespaces, one link capped with tbf).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from conftest import require_root, require_tool, snapshot
from deployment import METRICS_DOC, alerts, dashboard_queries, docs_url, rule_groups
from fabric import Fabric
from gpuprobe.client import Client
from gpuprobe.v1 import diagnostics_pb2 as pb
from promql import Prometheus, metric_names, prometheus
from serving import ServeProcess, serve_process

# Heavy: one xdist worker runs these one after another (see tests/serve/test_serve_load.py).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("heavy")]


@dataclass(frozen=True)
class Agent:
    """A `gpuprobe serve` on a snapshot; its node name is its key in AGENTS. `$TMP` in its
    config is a fresh directory of its own (for the active checks to measure)."""

    snapshot: str
    config: str = ""
    interval: int = 3600
    flags: tuple[str, ...] = ()


LOOPBACK_PEERS = "bandwidth: {peer_networks: [127.0.0.0/8]}\n"
AGENTS = {
    "healthy": Agent("synthetic-h100-8gpu-healthy"),
    "amd-ras": Agent("synthetic-amd-ras-uncorrectable"),
    "remap-pending": Agent("synthetic-remap-pending"),
    "remap-failure": Agent("synthetic-remap-failure"),
    "ecc-uncorrectable": Agent("synthetic-ecc-uncorrectable"),
    "gpu-lost": Agent("synthetic-gpu-lost"),
    "fallen-off-bus": Agent("synthetic-gpu-fallen-off-bus"),
    "xid-critical": Agent("synthetic-xid-critical"),
    "xid-app": Agent("synthetic-xid-app"),
    "library-mismatch": Agent("synthetic-library-mismatch"),
    "no-nvidia-runtime": Agent("synthetic-containerd-no-nvidia-runtime"),
    "cdi-invalid": Agent("synthetic-cdi-spec-invalid"),
    "cdi-stale-warning": Agent("synthetic-cdi-spec-missing-gpu"),
    "driver-535": Agent("synthetic-driver-too-old"),
    "mig-mixed": Agent("synthetic-mig-mixed"),
    "pcie-degraded": Agent("synthetic-pcie-degraded"),
    # GPU_IDLE needs the daemon's memory of how long a GPU has been idle.
    "idle": Agent("synthetic-gpus-idle", "gpus: {idle_window_seconds: 1}\n", interval=1),
    "nvml-hang": Agent("synthetic-nvml-hang", "checks: {deadline_seconds: 1}\n", interval=2),
    # GPU_ALLOCATED_IDLE too: GPU 6 held by a notebook pod with nothing running.
    "allocated-idle": Agent(
        "synthetic-k8s-gpus-by-uuid", "workloads: {idle_window_seconds: 1}\n", interval=1
    ),
    # The storage check measures a directory of its own: 8 MiB against an unreachable floor,
    # and /proc, where no file can be created (its GPUs are idle, so the tests run; a
    # snapshot's path missing here is not measured, and no fault).
    "storage-slow": Agent(
        "synthetic-h100-8gpu-idle",
        "storage: {paths: [$TMP], size_bytes: 8388608, jobs: 1,\n"
        "          min_write_bytes_per_second: 1.0e+15}\n"
        "serve: {intervals: {storage: 2}}\n",
        interval=2,
    ),
    "storage-missing": Agent(
        "synthetic-h100-8gpu-idle",
        "storage: {paths: [/proc]}\nserve: {intervals: {storage: 2}}\n",
        interval=2,
    ),
    # Two agents that test the link between them (no GPUs: nothing holds the test back).
    # They are on loopback, outside the default peer networks (the pod networks' ranges).
    "link-a": Agent("kvm-epyc-nogpu", LOOPBACK_PEERS, flags=("--allow-unauthenticated",)),
    "link-b": Agent("kvm-epyc-nogpu", LOOPBACK_PEERS, flags=("--allow-unauthenticated",)),
    # Scraped, then stopped: `up` turns 0.
    "stopped": Agent("synthetic-h100-8gpu-healthy"),
}
CRITICAL = {
    "storage-missing",
    "remap-pending",
    "remap-failure",
    "ecc-uncorrectable",
    "gpu-lost",
    "fallen-off-bus",
    "xid-critical",
    "library-mismatch",
    "no-nvidia-runtime",
    "cdi-invalid",
    "amd-ras",
}

# Each alert: exactly the nodes it must select.
ALERT_NODES: dict[str, set[str]] = {
    "GpuprobeAgentDown": {"stopped"},
    "GpuprobeCheckTimeout": {"nvml-hang"},
    "GpuprobeNodeCritical": CRITICAL,
    "GpuprobeDriverLibraryMismatch": {"library-mismatch"},
    "GpuprobeContainerToolkitBroken": {"no-nvidia-runtime", "cdi-invalid"},
    "GpuprobeGpuLost": {"gpu-lost"},
    "GpuprobeGpuCountMismatch": {"fallen-off-bus"},
    "GpuprobeXidCritical": {"xid-critical", "fallen-off-bus", "amd-ras"},
    "GpuprobeRowRemapPending": {"remap-pending"},
    "GpuprobeRowRemapFailure": {"remap-failure"},
    "GpuprobeEccUncorrectable": {"ecc-uncorrectable", "amd-ras"},
    "GpuprobeGpuIdle": {"idle"},
    "GpuprobeGpuAllocatedIdle": {"allocated-idle"},
    "GpuprobeStorageThroughputLow": {"storage-slow"},
    "GpuprobeStorageUnavailable": {"storage-missing"},
}
# Each dashboard query: the nodes it must return data for (evaluated with $node = that node),
# and whether it shows a fault (then it must return nothing for the healthy node).
PANEL_DATA: dict[str, tuple[set[str], bool]] = {
    "Nodes by status/O": ({"healthy", "mig-mixed"}, False),
    "Nodes by status/W": ({"pcie-degraded", "xid-app", "cdi-stale-warning"}, True),
    "Nodes by status/C": (CRITICAL, True),
    "Nodes by status/U": ({"nvml-hang"}, True),
    "Agents and GPUs/A": ({"healthy"}, False),
    "Agents and GPUs/B": ({"healthy"}, False),
    "Agents and GPUs/C": ({"amd-ras"}, True),
    "Agents/A": ({"healthy"}, False),
    "Failing checks/A": ({"remap-pending", "pcie-degraded", "nvml-hang"}, True),
    "Findings and actions/A": ({"remap-pending", "no-nvidia-runtime", "idle"}, True),
    "Driver versions in use/A": ({"healthy"}, False),
    "Nodes per driver and CUDA version/A": ({"healthy", "driver-535"}, False),
    "Nodes off the most common driver/A": ({"driver-535"}, True),
    "Driver and CUDA by node/A": ({"healthy", "driver-535"}, False),
    "GPU temperature/A": ({"healthy"}, False),
    "GPU power draw/A": ({"healthy"}, False),
    "GPU utilization/A": ({"healthy"}, False),
    "Uncorrected ECC errors/A": ({"ecc-uncorrectable", "amd-ras"}, True),
    "Remapped rows/A": ({"remap-pending"}, True),
    "Row remap state/A": ({"remap-pending", "remap-failure"}, True),
    "XID errors per second/A": ({"xid-critical", "xid-app"}, True),
    "XIDs since the agent started/A": ({"xid-critical", "xid-app", "fallen-off-bus"}, True),
    "PCIe link width (lanes)/A": ({"healthy"}, False),
    "Degraded PCIe links/A": ({"pcie-degraded"}, True),
    "MIG devices/A": ({"mig-mixed"}, True),
    "MIG profiles per GPU/A": ({"mig-mixed"}, True),
    "Idle GPUs/A": ({"idle"}, True),
    "Idle GPUs by node/A": ({"idle"}, True),
    "Idle allocated GPUs by namespace/A": ({"allocated-idle"}, True),
    "Idle allocated GPUs by namespace/B": ({"allocated-idle"}, False),
    "GPU allocation by node/A": ({"allocated-idle"}, True),
    "variable:cluster": ({"healthy"}, False),
    "variable:node": ({"healthy"}, False),
    "variable:gpu": ({"healthy"}, False),
    "Storage throughput/A": ({"storage-slow"}, False),
    "Link bandwidth (peer matrix)/A": ({"link-a"}, False),
    "variable:transport": ({"link-a"}, False),
}
# Alerts whose condition these agents cannot show, each raised on a Prometheus of its own by a
# test below: every agent gone, and a link slower than the rest (loopback is never throttled).
ELSEWHERE = {
    "GpuprobeAgentsAbsent": "test_agents_absent_fires_when_no_agent_is_scraped",
    "GpuprobeLinkBandwidthLow": "test_link_bandwidth_low_fires_on_the_throttled_link",
}
VARIABLES = {"$__rate_interval": "1m", "$cluster": ".*", "$gpu": ".*", "$transport": "tcp"}
GPU_ALERTS = {
    "GpuprobeGpuLost",
    "GpuprobeXidCritical",
    "GpuprobeRowRemapPending",
    "GpuprobeRowRemapFailure",
    "GpuprobeEccUncorrectable",
    "GpuprobeGpuIdle",
}


def with_variables(expr: str, node: str) -> str:
    """A dashboard query as Grafana sends it for one node (every cluster and GPU)."""
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return expr.replace("$node", node)


def wait(condition: Callable[[], Any], what: str, timeout: float = 90) -> Any:
    """Poll until `condition()` is truthy."""
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.5)


@dataclass
class Cluster:
    """Agents and the Prometheus that scrapes them."""

    prometheus: Prometheus
    agents: dict[str, ServeProcess]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    configs = tmp_path_factory.mktemp("configs")
    with ExitStack() as stack:
        served: dict[str, ServeProcess] = {}
        for node, agent in AGENTS.items():
            args = ["--snapshot", snapshot(agent.snapshot), "--node-name", node]
            args += ["--interval", str(agent.interval), *agent.flags]
            if agent.config:
                scratch = configs / f"{node}-tmp"
                scratch.mkdir()
                path = Path(configs / f"{node}.yaml")
                path.write_text(agent.config.replace("$TMP", str(scratch)))
                args += ["--config", str(path)]
            served[node] = stack.enter_context(serve_process(*args, timeout=60))
        rules = {"groups": rule_groups()}
        server = stack.enter_context(
            prometheus({n: s.metrics_port for n, s in served.items()}, rules)
        )

        def scraped() -> bool:
            nodes = {r["metric"]["node"] for r in server.query("gpuprobe_node_status")}
            findings = {r["metric"]["code"] for r in server.query("gpuprobe_finding")}
            wanted = {"GPU_IDLE", "CHECK_TIMEOUT", "STORAGE_THROUGHPUT_LOW", "STORAGE_UNAVAILABLE"}
            wanted.add("GPU_ALLOCATED_IDLE")
            return nodes == set(AGENTS) and wanted <= findings

        wait(scraped, "every agent's report in Prometheus")
        link_a, link_b = served["link-a"].grpc_target, served["link-b"].grpc_target
        assert measure_link(link_a, link_b, link_b, "127.0.0.1").bytes_per_second > 0
        wait(
            lambda: server.query('gpuprobe_peer_bandwidth_bytes_per_second{peer="link-b"}'),
            "link-a's bandwidth toward link-b in Prometheus",
        )
        code, _ = served["stopped"].terminate()
        assert code == 0
        wait(lambda: server.query('up{node="stopped"} == 0'), "the stopped agent's up == 0")
        time.sleep(2)  # let the rules see it
        yield Cluster(server, served)


def measure_link(
    source: str,
    target: str,
    peer: str,
    sender: str,
    seconds: float = 0.5,
    token: str | None = None,
) -> pb.MeasureBandwidthResponse:
    """What the mesh does for one link: a sink on `target` (gRPC address) for the sender's
    address `sender`, then `source` (gRPC address) sends to it, naming the peer `peer`."""
    sink_request = pb.OpenBandwidthSinkRequest(transport="tcp", streams=1, sender=sender)
    sink_request.duration.FromTimedelta(timedelta(seconds=seconds + 15))
    with Client(target, token=token) as receiver:
        sink = receiver.open_bandwidth_sink(sink_request)
    request = pb.MeasureBandwidthRequest(peer=peer, streams=1, sink=sink)
    request.duration.FromTimedelta(timedelta(seconds=seconds))
    request.warmup.FromTimedelta(timedelta(seconds=0.2))
    with Client(source, token=token) as client:
        return client.measure_bandwidth(request, timeout=30)


def test_every_rule_expression_selects_exactly_its_nodes(cluster: Cluster) -> None:
    rules = alerts()
    assert set(rules) == set(ALERT_NODES) | set(ELSEWHERE)
    for name, rule in rules.items():
        result = cluster.prometheus.query(rule["expr"])
        nodes = {r["metric"].get("node") for r in result}
        assert nodes == ALERT_NODES.get(name, set()), name
        if name in GPU_ALERTS:
            for r in result:
                index, uuid = r["metric"]["gpu"], r["metric"]["uuid"]
                assert r["metric"]["resource"] == f"gpu:{index}:{uuid}", name


def test_prometheus_loads_the_rules_and_raises_the_alerts(cluster: Cluster) -> None:
    groups = cluster.prometheus.rules()
    assert {g["name"] for g in groups} == {g["name"] for g in rule_groups()}
    for group in groups:
        for rule in group["rules"]:
            assert rule["health"] == "ok", (rule["name"], rule.get("lastError"))

    def raised() -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = {}
        for alert in cluster.prometheus.alerts():
            found.setdefault(alert["labels"]["alertname"], []).append(alert)
        complete = all(
            {a["labels"].get("node") for a in found.get(name, [])} == nodes
            for name, nodes in ALERT_NODES.items()
        )
        return found if complete else {}

    found = wait(raised, "every alert pending or firing on its nodes", timeout=30)
    assert set(found) == set(ALERT_NODES)
    for name, raised_alerts in found.items():
        for alert in raised_alerts:
            assert_rendered(name, alert)


def assert_rendered(name: str, alert: dict[str, Any]) -> None:
    """A raised alert's annotations rendered, naming its node (and GPU), with its runbook."""
    assert alert["state"] in ("pending", "firing")
    text = alert["annotations"]["summary"] + " " + alert["annotations"]["description"]
    assert "<no value>" not in text and "<error" not in text, (name, text)
    assert alert["labels"]["node"] in text, (name, text)
    if name in GPU_ALERTS:
        assert f"GPU {alert['labels']['gpu']}" in text, (name, text)
        assert alert["labels"]["uuid"] in alert["annotations"]["description"]
    assert alert["annotations"]["runbook_url"] == f"{docs_url()}deploy.md#{name.lower()}"


def test_alert_descriptions_name_what_the_agent_found(cluster: Cluster) -> None:
    """The descriptions that query Prometheus for detail render that detail."""
    by_node = {
        (a["labels"]["alertname"], a["labels"]["node"]): a["annotations"]["description"]
        for a in cluster.prometheus.alerts()
    }
    critical = by_node[("GpuprobeNodeCritical", "remap-pending")]
    assert "ROW_REMAP_PENDING on gpu:" in critical and "(action RESET_GPU)" in critical
    xid = by_node[("GpuprobeXidCritical", "xid-critical")]
    assert re.search(r"\(XID \d+: \d+ seen\)", xid), xid
    ecc = by_node[("GpuprobeEccUncorrectable", "ecc-uncorrectable")]
    assert re.search(r"has had \d+ uncorrectable ECC errors", ecc), ecc
    assert "NVML sees 7." in by_node[("GpuprobeGpuCountMismatch", "fallen-off-bus")]
    held = by_node[("GpuprobeGpuAllocatedIdle", "allocated-idle")]
    assert held.startswith(
        "gpu:6:GPU-5f1c0006-8e2b-4c1d-9a7e-000000000006 on node allocated-idle is held by "
        "research/notebook-alice and has had no process"
    ), held


def test_every_dashboard_query_evaluates_and_shows_its_condition(cluster: Cluster) -> None:
    queries = dashboard_queries()
    assert set(queries) == set(PANEL_DATA)
    missing = []
    for key, expr in queries.items():
        cluster.prometheus.query(with_variables(expr, ".*"))  # never an error
        nodes, fault = PANEL_DATA.get(key, (set(), False))
        for node in sorted(nodes):
            if not cluster.prometheus.query(with_variables(expr, node)):
                missing.append((key, node))
        if fault:
            assert cluster.prometheus.query(with_variables(expr, "healthy")) == [], key
    assert missing == []


def test_queries_use_only_metrics_the_agent_exports(cluster: Cluster) -> None:
    """Every metric a dashboard query or a rule reads is documented in docs/metrics.md (the
    rules may also read Prometheus' own `up`), and the real agents served it."""
    documented = set(re.findall(r"`((?:gpuprobe|process)_[a-z0-9_]+)`", METRICS_DOC.read_text()))
    served = cluster.prometheus.metric_names()
    for key, expr in dashboard_queries().items():
        names = metric_names(expr)
        assert names and names <= documented, (key, names - documented)
        assert names <= served, (key, names - served)
    for name, rule in alerts().items():
        names = metric_names(rule["expr"])
        assert names and names <= documented | {"up"}, (name, names - documented)


def test_agents_absent_fires_when_no_agent_is_scraped() -> None:
    """A Prometheus with the rules and no agent at all: GpuprobeAgentsAbsent is raised, and
    GpuprobeAgentDown (which needs an `up` series) is not."""
    with prometheus({}, {"groups": rule_groups()}) as server:
        (series,) = wait(lambda: server.query(alerts()["GpuprobeAgentsAbsent"]["expr"]), "absent")
        assert series["metric"] == {"job": "gpuprobe"}

        def raised() -> list[dict[str, Any]]:
            return [a for a in server.alerts() if a["labels"]["alertname"].startswith("Gpuprobe")]

        (alert,) = wait(raised, "GpuprobeAgentsAbsent pending", timeout=30)
        assert alert["labels"] == {
            "alertname": "GpuprobeAgentsAbsent",
            "job": "gpuprobe",
            "severity": "warning",
        }
        assert alert["state"] == "pending"  # for: 10m
        assert alert["annotations"]["runbook_url"] == f"{docs_url()}deploy.md#gpuprobeagentsabsent"


# GpuprobeLinkBandwidthLow: agents in network namespaces joined by a bridge (tests/fabric.py),
# node 3's link capped by tbf. They measure 1→2 and 2→1 at veth speed and 1→3 through the cap.
FABRIC_TOKEN = "alerts-fabric-token"
FABRIC_GRPC_PORT, FABRIC_METRICS_PORT = 50051, 9760
CAP_BITS_PER_SECOND = 50e6
FABRIC_LINKS = [(1, 2), (2, 1), (1, 3)]


def fabric_agents(net: Fabric, token: Path) -> None:
    """`gpuprobe serve` as node `fabric-<k>` in each node namespace; returns once all listen."""
    for node in range(1, len(net.node_ns) + 1):
        net.serve(
            node,
            f"fabric-{node}",
            snapshot("kvm-epyc-nogpu"),
            str(token),
            FABRIC_GRPC_PORT,
            f"{net.address(node)}:{FABRIC_METRICS_PORT}",
        )


def test_link_bandwidth_low_fires_on_the_throttled_link(tmp_path: Path) -> None:
    """Of the measured links, the rule selects exactly the one through the cap, and Prometheus
    raises the alert with both ends and the measured figure in its annotations."""
    require_root()
    require_tool("tc")
    token = tmp_path / "token"
    token.write_text(FABRIC_TOKEN)
    with Fabric(3) as net:
        net.slow(3, f"{CAP_BITS_PER_SECOND / 1e6:.0f}mbit")
        fabric_agents(net, token)
        grpc = {node: net.forward(node, FABRIC_GRPC_PORT) for node in (1, 2, 3)}
        for source, target in FABRIC_LINKS:
            response = measure_link(
                f"127.0.0.1:{grpc[source]}",
                f"127.0.0.1:{grpc[target]}",
                f"{net.address(target)}:{FABRIC_GRPC_PORT}",
                net.address(source),
                seconds=1,
                token=FABRIC_TOKEN,
            )
            assert (response.peer, response.transport) == (f"fabric-{target}", "tcp")
        targets = {f"fabric-{n}": net.forward(n, FABRIC_METRICS_PORT) for n in (1, 2, 3)}
        with prometheus(targets, {"groups": rule_groups()}) as server:
            links = "gpuprobe_peer_bandwidth_bytes_per_second"
            wait(lambda: len(server.query(links)) == len(FABRIC_LINKS), "every link scraped")
            figures = {
                (r["metric"]["node"], r["metric"]["peer"]): float(r["value"][1])
                for r in server.query(links)  # node: the target label
            }
            (slow,) = server.query(alerts()["GpuprobeLinkBandwidthLow"]["expr"])
            assert (slow["metric"]["node"], slow["metric"]["peer"]) == ("fabric-1", "fabric-3")
            assert slow["metric"]["transport"] == "tcp"
            value = float(slow["value"][1])
            assert value == figures[("fabric-1", "fabric-3")] < CAP_BITS_PER_SECOND / 8 * 1.1
            assert value < 0.5 * min(
                figures[("fabric-1", "fabric-2")], figures[("fabric-2", "fabric-1")]
            )

            def raised() -> list[dict[str, Any]]:
                return [
                    a
                    for a in server.alerts()
                    if a["labels"]["alertname"] == "GpuprobeLinkBandwidthLow"
                ]

            (alert,) = wait(raised, "GpuprobeLinkBandwidthLow pending", timeout=30)
            assert_rendered("GpuprobeLinkBandwidthLow", alert)
            summary = alert["annotations"]["summary"]
            assert summary == "Low tcp bandwidth from fabric-1 to fabric-3"
            description = alert["annotations"]["description"]
            shown = re.search(
                r"from node fabric-1 to fabric-3 measured ([\d.]+)([kM]?)B/s", description
            )
            assert shown, description
            scale = {"": 1, "k": 1e3, "M": 1e6}[shown.group(2)]
            assert float(shown.group(1)) * scale == pytest.approx(value, rel=1e-3)
    assert net.namespaces_left() == []


def test_metric_names_reads_through_promql() -> None:
    expr = (
        'count by (driver_version) (a_b{x="y(z)"} * on(job) group_left(node) c[5m]) '
        "unless on(v) topk(1, sum without (k) (rate(d_total[$__rate_interval]))) > bool 2"
    )
    assert metric_names(expr) == {"a_b", "c", "d_total"}
