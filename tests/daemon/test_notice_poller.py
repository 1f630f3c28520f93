"""The daemon hears a spot notice between its rounds: the report, /metrics, the node's event
and taint within seconds, whatever --interval is, and the taint goes with the notice."""

from __future__ import annotations

import calendar
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import snapshot
from gpuprobe.checks.lifecycle import LifecycleConfig, LifecycleKept
from gpuprobe.checks.registry import CHECKS
from gpuprobe.config import Config, KubernetesConfig, ServeConfig, TaintConfig
from gpuprobe.daemon.pollers import NoticePoller
from gpuprobe.effects.terminating import TERMINATING_KEY
from gpuprobe.host import snapshot_host
from gpuprobe.host.metadata import LiveMetadata
from gpuprobe.lifecycle.notices import NoticeReading
from gpuprobe.serve.agent import Agent, ServeOptions
from kube_standin import KubeStandIn
from kube_standin import running as kube_running
from metadata_standins import ImdsStandIn
from metadata_standins import running as metadata_running
from serving import wait_for

NODE = "gpu-node-17"


def test_the_poller_calls_on_a_change_only_and_survives_a_failing_look() -> None:
    heard = iter([("a",), ("a",), ("b",), ("b",)])
    changes: list[int] = []
    poller = NoticePoller(lambda: next(heard), lambda: changes.append(1), 0.01)
    assert [poller.step() for _ in range(4)] == [True, False, True, False]
    assert poller.changes == 2 == len(changes)

    def broken() -> tuple[str]:
        raise RuntimeError("a bug")

    stop = threading.Event()
    failing = NoticePoller(broken, lambda: changes.append(1), 0.01)
    thread = threading.Thread(target=failing.run, args=(stop,))
    thread.start()
    time.sleep(0.1)
    assert thread.is_alive()
    stop.set()
    thread.join(2)
    assert not thread.is_alive()


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[KubeStandIn]:
    with kube_running(tmp_path) as stand_in:
        yield stand_in


@pytest.fixture
def imds() -> Iterator[ImdsStandIn]:
    with metadata_running(ImdsStandIn) as service:
        yield service


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def test_a_notice_reaches_report_metrics_event_and_taint_within_seconds(
    kube: KubeStandIn, imds: ImdsStandIn
) -> None:
    host = snapshot_host(snapshot("synthetic-k8s-gpus-by-uuid"), NODE)
    host.metadata = LiveMetadata()
    config = Config(
        serve=ServeConfig(interval_seconds=3600),
        kubernetes=KubernetesConfig(start_jitter_seconds=0, taint=TaintConfig(enabled=True)),
        sections={
            "lifecycle": LifecycleConfig(provider="aws", endpoint=imds.url, poll_seconds=0.5)
        },
    )
    options = ServeOptions(
        grpc_listen="127.0.0.1:0", metrics_listen="127.0.0.1:0", kubeconfig=str(kube.kubeconfig())
    )
    agent = Agent(host, config, list(CHECKS), options)
    agent.start()
    try:
        wait_for(lambda: agent.store.current().report is not None)
        assert len(agent.pollers) == 1  # the lifecycle record's poll: the cloud's notices
        assert not any(t["key"] == TERMINATING_KEY for t in kube.taints(NODE))
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))
        imds.spot = {"action": "terminate", "time": when}
        started = time.monotonic()
        wait_for(lambda: any(t["key"] == TERMINATING_KEY for t in kube.taints(NODE)), timeout=10)
        took = time.monotonic() - started
        assert took < 5  # one poll (0.5 s), the check and one publish, on a loaded machine
        assert {"key": TERMINATING_KEY, "value": "preemption", "effect": "NoSchedule"} in (
            kube.taints(NODE)
        )
        report = agent.store.current().report
        assert report is not None
        result = report.check("lifecycle")
        assert result is not None and result.status.value == "CRITICAL"
        (finding,) = [f for f in result.findings if f.code == "NODE_PREEMPTION_NOTICE"]
        assert [p.pod for p in finding.pods] == [
            "vllm-7d9f8-kq2xp",
            "vllm-7d9f8-mw5tz",
            "llama-pretrain-0",
            "notebook-alice",
        ]
        page = metrics(agent.metrics_port)
        stamp = calendar.timegm(time.strptime(when, "%Y-%m-%dT%H:%M:%SZ"))
        (line,) = [
            x for x in page.splitlines() if x.startswith("gpuprobe_node_termination_timestamp_")
        ]
        assert float(line.split()[1]) == stamp
        assert 'gpuprobe_node_notice_info{kind="preemption",provider="aws"} 1.0' in page
        wait_for(lambda: "NodePreemptionNotice" in {e["reason"] for e in kube.node_events(NODE)})
        imds.spot = None  # taken back: the taint goes, no clear delay
        wait_for(lambda: not any(t["key"] == TERMINATING_KEY for t in kube.taints(NODE)), 10)
        assert "\ngpuprobe_node_termination_timestamp_seconds " not in metrics(agent.metrics_port)
    finally:
        agent.stop(grace=0.5)


def spot_asks(imds: ImdsStandIn) -> int:
    """How often the daemon asked for the spot notice (`spot/instance-action`)."""
    return sum(r.path == "/latest/meta-data/spot/instance-action" for r in imds.seen("GET"))


def test_the_metadata_service_is_asked_once_per_notice(imds: ImdsStandIn) -> None:
    """The poller's reading that heard the notice is the one the woken check judges: one ask
    from the notice to the check's result, not one by the poller and one by the check (AWS
    asks for a look every 5 s; each look is a token's use and three GETs)."""
    host = snapshot_host(snapshot("synthetic-k8s-gpus-by-uuid"), NODE)
    host.metadata = LiveMetadata()
    # Rounds and the poller's own looks once an hour: the looks below are the test's.
    lifecycle = LifecycleConfig(provider="aws", endpoint=imds.url, poll_seconds=3600)
    config = Config(serve=ServeConfig(interval_seconds=3600), sections={"lifecycle": lifecycle})
    options = ServeOptions(grpc_listen="127.0.0.1:0", metrics_listen="127.0.0.1:0")
    agent = Agent(host, config, ["lifecycle"], options)
    agent.start()
    try:
        (poller,) = agent.pollers
        # The first round's run and the run the first look woke, both over.
        wait_for(lambda: agent.signals.reruns.get("lifecycle", 0) == 1)
        wait_for(lambda: agent.store.current().runs.get("lifecycle", 0) >= 2)
        wait_for(lambda: not agent.executor.in_flight())

        def status() -> str:
            report = agent.store.current().report
            result = report.check("lifecycle") if report is not None else None
            return result.status.value if result is not None else ""

        assert status() == "OK"
        before = spot_asks(imds)
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))
        imds.spot = {"action": "terminate", "time": when}
        assert poller.step()  # heard: wakes the check through the event path
        wait_for(lambda: agent.signals.reruns["lifecycle"] == 2)
        assert status() == "CRITICAL"
        assert spot_asks(imds) - before == 1  # the poller's look, judged by the check
        imds.spot = None
        assert poller.step()  # taken back: heard, and judged from the same look
        wait_for(lambda: agent.signals.reruns["lifecycle"] == 3)
        assert status() == "OK"
        assert spot_asks(imds) - before == 2
        assert not poller.step()  # nothing new: nothing handed, nothing woken
        agent.scheduler.run_now(["lifecycle"])  # a round asks for itself
        assert spot_asks(imds) - before == 4
        assert agent.signals.reruns["lifecycle"] == 3
    finally:
        agent.stop(grace=0.5)


def test_a_handed_reading_is_taken_once_and_only_while_fresh() -> None:
    reading = NoticeReading("aws", "http://169.254.169.254")
    at = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
    kept = LifecycleKept()
    kept.hand(("heard", True), reading, at)
    assert kept.take(at + timedelta(seconds=5), timedelta(seconds=5)) is reading
    assert kept.take(at + timedelta(seconds=5), timedelta(seconds=5)) is None  # once
    kept.hand(("heard", True), reading, at)
    assert kept.take(at, timedelta(seconds=5)) is None  # heard before: no change, not handed
    kept.hand(("other", True), reading, at)
    assert kept.take(at + timedelta(seconds=6), timedelta(seconds=5)) is None  # too old


def test_off_any_cloud_no_poller_runs_and_a_snapshot_replays_its_notice() -> None:
    from serving import in_process_agent

    with in_process_agent("synthetic-h100-8gpu-healthy") as agent:
        assert agent.pollers == []  # no DMI of a cloud: nobody to ask
    with in_process_agent("synthetic-aws-spot-interruption") as agent:
        (poller,) = agent.pollers
        wait_for(lambda: poller.changes >= 1)
        report = agent.store.current().report
        assert report is not None
        result = report.check("lifecycle")
        assert result is not None
        assert [f.code for f in result.findings] == [
            "NODE_PREEMPTION_NOTICE",
            "NODE_REBALANCE_RECOMMENDED",
        ]
