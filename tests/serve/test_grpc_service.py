"""The NodeDiagnostics service of an in-process agent on snapshots, through a real gRPC
client: GetReport, RunChecks, WatchReports, ClearFindings, the bandwidth placeholders,
health and reflection."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from conftest import gpuprobe, snapshot
from gpuprobe.checks import registry
from gpuprobe.checks.context import CheckContext
from gpuprobe.client import Client
from gpuprobe.config import Config
from gpuprobe.report import Action, CheckResult, Finding, NodeReport, Severity, parse_time
from gpuprobe.v1 import diagnostics_pb2 as pb
from helpers import config, use_check
from serving import PASSIVE, in_process_agent, wait_for

TOKEN = "s3cret-token"


@pytest.fixture
def token_file(tmp_path: Path) -> str:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return str(path)


def test_get_report_is_the_report_check_json_gives() -> None:
    expected = gpuprobe(
        "check", "--json", "--only", ",".join(PASSIVE), "--snapshot", snapshot("synthetic-gpu-lost")
    ).json()
    with (
        in_process_agent("synthetic-gpu-lost") as agent,
        Client(f"127.0.0.1:{agent.grpc_port}") as client,
    ):
        message = client.get_report_message()
        report = client.get_report()
    got = report.to_dict()
    starts = []
    for d in (got, expected):
        d.pop("time")
        for c in d["checks"]:
            c.pop("duration_seconds")
            if c["name"] == "workloads":
                # when the idle accounting began: the clock second of each run's first round
                since = c["data"]["accounting"].pop("since")
                assert c["data"]["usage"].pop("since") == since
                starts.append(parse_time(since))
    assert got == expected
    assert timedelta(0) <= starts[0] - starts[1] <= timedelta(seconds=30)
    assert message.status == pb.STATUS_CRITICAL
    assert message.agent_version
    assert all(c.time.seconds > 0 for c in message.checks)


def test_get_report_never_runs_checks() -> None:
    with in_process_agent(config=config(serve={"interval_seconds": 3600})) as agent:
        runs = agent.store.current().runs
        with Client(f"127.0.0.1:{agent.grpc_port}") as client:
            for _ in range(20):
                client.get_report()
        assert agent.store.current().runs == runs == dict.fromkeys(PASSIVE, 1)


def test_run_checks_runs_the_named_checks_now(token_file: str) -> None:
    with in_process_agent(token_file=token_file) as agent:
        before = agent.store.current().runs
        with Client(f"127.0.0.1:{agent.grpc_port}", token=TOKEN) as client:
            report = client.run_checks(["gpus"])
        assert [c.name for c in report.checks] == ["gpus"]
        assert report.checks[0].summary == "8 GPUs: NVIDIA H100 80GB HBM3"
        after = agent.store.current().runs
        assert after == {**before, "gpus": before["gpus"] + 1}
        with Client(f"127.0.0.1:{agent.grpc_port}", token=TOKEN) as client:
            assert [c.name for c in client.run_checks().checks] == list(registry.CHECKS)


def test_run_checks_refuses_an_unknown_check(token_file: str) -> None:
    with (
        in_process_agent(token_file=token_file) as agent,
        Client(f"127.0.0.1:{agent.grpc_port}", token=TOKEN) as client,
        pytest.raises(grpc.RpcError) as err,
    ):
        client.run_checks(["gpus", "nonesuch"])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown check 'nonesuch'" in str(err.value.details())


def test_run_checks_is_bounded_by_the_callers_deadline(token_file: str) -> None:
    # GPU 2's memory query hangs for an hour; the config deadline is 30 s, the call's 1.5 s.
    cfg = config(checks={"deadline_seconds": 30}, serve={"interval_seconds": 3600})
    with (
        in_process_agent("synthetic-nvml-hang", cfg, wait=False, token_file=token_file) as agent,
        Client(f"127.0.0.1:{agent.grpc_port}", token=TOKEN) as client,
    ):
        report = client.run_checks(["gpus"], timeout=1.5)
    (gpus,) = report.checks
    assert [f.code for f in gpus.findings] == ["CHECK_TIMEOUT"]
    assert gpus.status.value == "UNKNOWN"
    # The call joined the first round's run of gpus, started a moment earlier.
    assert 1.0 <= gpus.duration_seconds <= 2.0


def test_run_checks_is_rate_limited_per_caller(token_file: str) -> None:
    cfg = config(serve={"calls_burst": 2, "calls_per_minute": 1})
    with (
        in_process_agent(config=cfg, token_file=token_file) as agent,
        Client(f"127.0.0.1:{agent.grpc_port}", token=TOKEN) as client,
    ):
        client.run_checks(["driver"])
        client.run_checks(["driver"])
        with pytest.raises(grpc.RpcError) as err:
            client.run_checks(["driver"])
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert str(err.value.details()).startswith("rate limit: try again in ")


def test_watch_reports_sends_the_report_then_each_change(
    token_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A check whose finding the test turns on and off; statuses change only through it.
    broken = threading.Event()

    def flaky(ctx: CheckContext, cfg: Config) -> CheckResult:
        findings = []
        if broken.is_set():
            findings.append(
                Finding(
                    "NIC_DOWN", Severity.CRITICAL, "eth9 is down", Action.CHECK_NETWORK, "nic:eth9"
                )
            )
        return CheckResult("flaky", "one NIC", findings, data={"reading": 1})

    use_check(monkeypatch, "flaky", flaky)
    cfg = config(serve={"interval_seconds": 3600})
    with (
        in_process_agent(config=cfg, names=["driver", "flaky"], token_file=token_file) as agent,
        Client(f"127.0.0.1:{agent.grpc_port}", token=TOKEN) as client,
    ):
        stream = client.watch_reports(timeout=20)
        first = next(stream)
        assert first.status.value == "OK"
        client.run_checks(["flaky"])  # nothing changed: nothing is sent
        broken.set()
        client.run_checks(["flaky"])
        second = next(stream)
        assert second.status.value == "CRITICAL"
        assert [(c, f.code) for c, f in second.findings()] == [("flaky", "NIC_DOWN")]
        broken.clear()
        client.run_checks(["flaky"])
        third = next(stream)
        assert third.status.value == "OK"
        # Three updates came through RunChecks, plus the first round; two changed.
        assert agent.store.current().version == 4
        assert agent.store.current().change == 3


def test_watch_streams_are_limited() -> None:
    cfg = config(serve={"max_watchers": 1})
    with (
        in_process_agent(config=cfg) as agent,
        Client(f"127.0.0.1:{agent.grpc_port}") as client,
    ):
        first = client.watch_reports(timeout=10)
        next(first)
        with pytest.raises(grpc.RpcError) as err:
            next(client.watch_reports(timeout=10))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_clear_findings_calls_the_clearer_and_reruns_the_xid_check(
    token_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = {0: [79], 3: [48]}  # sticky XIDs by GPU, as the xid check would remember them
    cleared_for: list[int | None] = []

    def xid(ctx: CheckContext, cfg: Config) -> CheckResult:
        return CheckResult(
            "xid",
            f"{sum(map(len, seen.values()))} XIDs",
            [
                Finding("XID", Severity.CRITICAL, f"XID {x}", Action.RESET_GPU, f"gpu:{g}:")
                for g, xs in sorted(seen.items())
                for x in xs
            ],
        )

    def clear_xid(gpu: int | None) -> int:
        cleared_for.append(gpu)
        gone = [g for g in seen if gpu is None or g == gpu]
        count = sum(len(seen.pop(g)) for g in gone)
        return count

    use_check(monkeypatch, "xid", xid)
    cfg = config(serve={"interval_seconds": 3600})
    with (
        in_process_agent(
            config=cfg, names=["driver", "xid"], clear_xid=clear_xid, token_file=token_file
        ) as agent,
        Client(f"127.0.0.1:{agent.grpc_port}", token=TOKEN) as client,
    ):
        assert [f.resource for _, f in client.get_report().findings()] == ["gpu:0:", "gpu:3:"]
        cleared, report = client.clear_findings(gpu=3)
        assert cleared == 1
        assert [f.resource for _, f in report.findings()] == ["gpu:0:"]
        assert [f.resource for _, f in client.get_report().findings()] == ["gpu:0:"]
        cleared, report = client.clear_findings()
        assert cleared == 1
        assert report.findings() == []
        assert report.status.value == "OK"
    assert cleared_for == [3, None]


def test_clear_findings_without_an_xid_check_is_unimplemented(token_file: str) -> None:
    with (
        in_process_agent(token_file=token_file) as agent,
        Client(f"127.0.0.1:{agent.grpc_port}", token=TOKEN) as client,
        pytest.raises(grpc.RpcError) as err,
    ):
        client.clear_findings()
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_health_and_reflection_on_the_same_port() -> None:
    with (
        in_process_agent() as agent,
        grpc.insecure_channel(f"127.0.0.1:{agent.grpc_port}") as channel,
    ):
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "gpuprobe.v1.NodeDiagnostics"):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
        (response,) = reflect.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
        )
        names = sorted(s.name for s in response.list_services_response.service)
    assert names == [
        "gpuprobe.v1.NodeDiagnostics",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    ]


def test_before_the_first_report_get_report_is_unavailable_and_health_not_serving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()

    def slow(ctx: CheckContext, cfg: Config) -> CheckResult:
        release.wait(20)
        return CheckResult("slow", "done")

    use_check(monkeypatch, "slow", slow)
    with (
        in_process_agent(names=["slow"], wait=False) as agent,
        Client(f"127.0.0.1:{agent.grpc_port}") as client,
    ):
        try:
            with pytest.raises(grpc.RpcError) as err:
                client.get_report()
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert client.health("") == "SERVING"
            assert client.health("gpuprobe.v1.NodeDiagnostics") == "NOT_SERVING"
            release.set()
            wait_for(lambda: client.health("gpuprobe.v1.NodeDiagnostics") == "SERVING")
            assert client.get_report().checks[0].summary == "done"
        finally:
            release.set()  # before the agent stops


def test_get_report_answers_while_the_first_storage_test_still_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()

    def storage(ctx: CheckContext, cfg: Config) -> CheckResult:
        release.wait(30)  # a throughput test that takes minutes
        return CheckResult("storage", "measured")

    use_check(monkeypatch, "storage", storage)
    # Without jitter the storage test starts at once, along with the passive round.
    cfg = config(serve={"jitter_fraction": 0, "interval_seconds": 0.1})
    names = ["driver", "gpus", "storage"]
    with (
        in_process_agent(config=cfg, names=names, wait=False) as agent,
        Client(f"127.0.0.1:{agent.grpc_port}") as client,
    ):
        try:
            wait_for(lambda: "storage" in agent.executor.in_flight(), timeout=5)
            report = wait_for(lambda: _report_or_none(client), timeout=5)
            assert [c.name for c in report.checks] == ["driver", "gpus"]
            assert client.health("gpuprobe.v1.NodeDiagnostics") == "SERVING"
            # Passive rounds keep coming while storage runs.
            wait_for(lambda: agent.store.current().runs["gpus"] >= 3, timeout=5)
            assert "storage" in agent.executor.in_flight()
            assert "storage" not in agent.store.current().runs
            release.set()
            report = wait_for(lambda: len(client.get_report().checks) == 3 and client.get_report())
            assert [c.name for c in report.checks] == names
            assert report.checks[2].summary == "measured"
        finally:
            release.set()


def _report_or_none(client: Client) -> NodeReport | None:
    try:
        return client.get_report()
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.UNAVAILABLE
        return None


def test_oversized_requests_are_refused(token_file: str) -> None:
    with (
        in_process_agent(token_file=token_file) as agent,
        Client(f"127.0.0.1:{agent.grpc_port}", token=TOKEN) as client,
        pytest.raises(grpc.RpcError) as err,
    ):
        client.run_checks(["x" * 100_000])
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


@pytest.mark.parametrize(
    ("method", "raw", "reason"),
    [
        ("GetReport", b"\xff", "Wire format was corrupt"),
        ("RunChecks", b"\x0a\x05ab", "Wire format was corrupt"),
        ("RunChecks", b"\x0a\x02\xff\xfe", "String field had bad UTF-8"),
        ("WatchReports", b"\xff", "Wire format was corrupt"),
    ],
)
def test_a_malformed_request_is_invalid_argument(method: str, raw: bytes, reason: str) -> None:
    with (
        in_process_agent() as agent,
        grpc.insecure_channel(f"127.0.0.1:{agent.grpc_port}") as channel,
    ):
        path = f"/gpuprobe.v1.NodeDiagnostics/{method}"
        call = (channel.unary_stream if method == "WatchReports" else channel.unary_unary)(path)
        with pytest.raises(grpc.RpcError) as err:
            answer = call(raw, timeout=10)
            if method == "WatchReports":
                next(iter(answer))
        request = f"gpuprobe.v1.{method}Request"
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details() == (
            f"malformed {method} request: Error parsing message with type '{request}': {reason}"
        )
        # Well-formed bytes on the same channel still get their answer.
        answer = channel.unary_unary("/gpuprobe.v1.NodeDiagnostics/GetReport")(b"", timeout=10)
        assert pb.GetReportResponse.FromString(answer).report.node == agent.host.node_name
