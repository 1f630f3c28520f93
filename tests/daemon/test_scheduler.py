"""The daemon's scheduling: rounds per interval, active checks apart, jitter, the executor
that never runs a check twice at once, and the store that tells watchers of changes."""

from __future__ import annotations

import logging
import random
import threading
import time
from datetime import UTC, datetime

import pytest

from conftest import snapshot
from gpuprobe.checks import xid
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.runner import STAGGER_SECONDS, CheckRunner, Ran
from gpuprobe.config import Config
from gpuprobe.daemon.scheduler import Group, Scheduler, plan
from gpuprobe.daemon.store import ReportStore
from gpuprobe.host import Host, snapshot_host
from gpuprobe.report import Action, CheckResult, Finding, Severity
from helpers import config, records
from serving import wait_for

T = datetime(2026, 11, 29, 21, 0, tzinfo=UTC)


def host() -> Host:
    return snapshot_host(snapshot("synthetic-h100-8gpu-healthy"))


def test_plan_groups_checks_by_interval_and_delays_active_ones_within_their_jitter() -> None:
    cfg = config(
        serve={
            "interval_seconds": 30,
            "intervals": {"xid": 5},
            "active_interval_seconds": 1800,
            "jitter_fraction": 0.1,
        }
    ).serve
    groups = plan(
        ["driver", "gpus", "xid", "storage"], cfg, frozenset({"storage"}), 1000.0, random.Random(7)
    )
    by_names = {tuple(g.names): g for g in groups}
    assert sorted(by_names) == [("driver", "gpus"), ("storage",), ("xid",)]
    assert (by_names[("driver", "gpus")].interval, by_names[("driver", "gpus")].due) == (30, 1000)
    assert (by_names[("xid",)].interval, by_names[("xid",)].due) == (5, 1000)
    storage = by_names[("storage",)]
    assert storage.interval == 1800
    assert 1000 <= storage.due <= 1000 + 180
    assert [g.active for g in groups] == [g.names == ["storage"] for g in groups]
    # An explicit interval wins for an active check too.
    cfg = config(serve={"intervals": {"storage": 600}, "jitter_fraction": 0}).serve
    (group,) = plan(["storage"], cfg, frozenset({"storage"}), 0.0, random.Random(1))
    assert (group.interval, group.due) == (600, 0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def counting_checks() -> tuple[dict[str, int], dict[str, object]]:
    counts: dict[str, int] = {}

    def make(name: str):  # type: ignore[no-untyped-def]
        def run(ctx: CheckContext, c: Config) -> CheckResult:
            counts[name] = counts.get(name, 0) + 1
            return CheckResult(name, "ran")

        return run

    return counts, {n: make(n) for n in ("fast", "slow")}


def test_rounds_fall_due_by_interval_with_jitter_inside_its_bounds() -> None:
    counts, checks = counting_checks()
    clock = FakeClock()
    executor = CheckRunner(host(), Config(), records(checks))
    store = ReportStore("n", ["fast", "slow"])
    groups = [Group(10, ["fast"], 0.0), Group(100, ["slow"], 0.0)]
    scheduler = Scheduler(executor, store, groups, 0.1, ["fast", "slow"], clock, random.Random(3))
    stop = threading.Event()
    dues: list[float] = []

    def step_until(t: float) -> None:
        # Drive the loop by hand: each wait advances the fake clock to the next due time.
        while clock.now <= t:
            due = [g for g in scheduler.groups if g.due <= clock.now]
            if due:
                names = [n for n in ["fast", "slow"] if any(n in g.names for g in due)]
                scheduler.run_now(names)
                for g in due:
                    g.due = max(g.due + scheduler._next(g.interval), clock.now)
                    if g.names == ["fast"]:
                        dues.append(g.due)
            else:
                clock.now = min(g.due for g in scheduler.groups)

    step_until(200)
    assert counts["slow"] == 2 + (scheduler.groups[1].due <= 200)
    gaps = [b - a for a, b in zip([0.0, *dues], dues, strict=False)]
    assert all(9.0 <= gap <= 11.0 for gap in gaps), gaps
    assert len(set(gaps)) > 1  # jittered, not a fixed beat
    assert store.current().runs["fast"] == counts["fast"] >= 18
    stop.set()


def test_the_scheduler_thread_runs_rounds_and_stops_promptly() -> None:
    counts, checks = counting_checks()
    executor = CheckRunner(host(), Config(), records(checks))
    store = ReportStore("n", ["fast", "slow"])
    now = time.monotonic()
    groups = [Group(0.05, ["fast"], now), Group(3600, ["slow"], now)]
    scheduler = Scheduler(executor, store, groups, 0.0, ["fast", "slow"])
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,))
    thread.start()
    time.sleep(0.5)
    stop.set()
    thread.join(2)
    assert not thread.is_alive()
    assert counts["slow"] == 1
    assert counts["fast"] >= 4
    report = store.current().report
    assert report is not None and [c.name for c in report.checks] == ["fast", "slow"]


def test_passive_rounds_go_on_and_publish_while_an_active_check_hangs() -> None:
    counts, checks = counting_checks()
    release = threading.Event()

    def storage(ctx: CheckContext, c: Config) -> CheckResult:
        release.wait(30)
        return CheckResult("storage", "measured")

    executor = CheckRunner(
        host(), config(checks={"deadline_seconds": 60}), records({**checks, "storage": storage})
    )
    order = ["fast", "slow", "storage"]
    store = ReportStore("n", order)
    now = time.monotonic()
    groups = [
        Group(0.05, ["fast"], now),
        Group(3600, ["slow"], now),
        Group(3600, ["storage"], now, active=True),
    ]
    scheduler = Scheduler(executor, store, groups, 0.0, order)
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,))
    thread.start()
    try:
        # The storage test still runs; the passive rounds go on and each one publishes.
        wait_for(lambda: store.current().runs.get("fast", 0) >= 5, timeout=10)
        assert "storage" in executor.in_flight()  # passive rounds come and go beside it
        snapshot = store.current()
        assert snapshot.runs["fast"] >= 5 and counts["fast"] >= snapshot.runs["fast"]
        assert snapshot.runs["slow"] == 1 and "storage" not in snapshot.runs
        assert snapshot.report is not None
        assert [c.name for c in snapshot.report.checks] == ["fast", "slow"]
        release.set()
        wait_for(lambda: "storage" in store.current().runs, timeout=5)
        report = store.current().report
        assert report is not None and [c.name for c in report.checks] == order
        assert report.checks[2].summary == "measured"
    finally:
        release.set()
        stop.set()
        thread.join(2)
    assert not thread.is_alive()
    assert scheduler.join(2) == []


def test_stop_joins_the_lanes_and_names_one_left_in_a_stuck_round() -> None:
    release = threading.Event()

    def storage(ctx: CheckContext, c: Config) -> CheckResult:
        release.wait(30)
        return CheckResult("storage", "measured")

    cfg = config(checks={"deadline_seconds": 60})
    executor = CheckRunner(host(), cfg, records({"storage": storage}))
    store = ReportStore("n", ["storage"])
    groups = [Group(3600, ["storage"], time.monotonic(), active=True)]
    scheduler = Scheduler(executor, store, groups, 0.0, ["storage"])
    stop = threading.Event()
    thread = threading.Thread(target=scheduler.run, args=(stop,))
    thread.start()
    try:
        wait_for(lambda: executor.in_flight() == ["storage"], timeout=5)
        stop.set()
        thread.join(2)
        assert not thread.is_alive()
        started = time.monotonic()
        assert scheduler.join(0.3) == ["schedule-storage"]
        assert 0.25 <= time.monotonic() - started < 2
    finally:
        release.set()
    assert scheduler.join(5) == []
    assert store.current().runs == {"storage": 1}


def test_a_hung_check_is_joined_not_started_again() -> None:
    release = threading.Event()
    started: list[float] = []

    def hangs(ctx: CheckContext, c: Config) -> CheckResult:
        started.append(time.monotonic())
        release.wait(30)
        return CheckResult("hangs", "finally")

    cfg = config(checks={"deadline_seconds": 0.2})
    executor = CheckRunner(host(), cfg, records({"hangs": hangs}))
    try:
        for _ in range(3):
            (ran,) = executor.run(["hangs"])
            assert [f.code for f in ran.result.findings] == ["CHECK_TIMEOUT"]
            assert ran.result.duration_seconds == 0.2
        assert len(started) == 1
        assert executor.in_flight() == ["hangs"]
        assert [t.name for t in threading.enumerate()].count("check-hangs") == 1
    finally:
        release.set()
    deadline = time.monotonic() + 5
    while executor.in_flight() and time.monotonic() < deadline:
        time.sleep(0.01)
    (ran,) = executor.run(["hangs"])  # the stuck run has finished; a fresh one runs
    assert ran.result.summary == "finally"
    assert len(started) == 2
    assert executor.in_flight() == []


def test_the_callers_deadline_cuts_a_run_short_and_exceptions_become_unknown() -> None:
    def slow(ctx: CheckContext, c: Config) -> CheckResult:
        time.sleep(1.0)
        return CheckResult("slow", "done")

    def broken(ctx: CheckContext, c: Config) -> CheckResult:
        raise ValueError("bad reading")

    executor = CheckRunner(host(), Config(), records({"slow": slow, "broken": broken}))
    slow_ran, broken_ran = executor.run(["slow", "broken"], within=0.2)
    assert [f.code for f in slow_ran.result.findings] == ["CHECK_TIMEOUT"]
    assert slow_ran.timed_out
    assert [f.code for f in broken_ran.result.findings] == ["CHECK_FAILED"]
    assert broken_ran.result.summary == "check failed: ValueError: bad reading"
    assert not broken_ran.timed_out


def finding(resource: str, message: str = "m") -> Finding:
    return Finding("NIC_DOWN", Severity.CRITICAL, message, Action.CHECK_NETWORK, resource)


def test_the_store_counts_a_change_only_when_a_status_or_finding_changes() -> None:
    store = ReportStore("n", ["a", "b"])
    assert store.current().report is None
    s1 = store.update([Ran(CheckResult("a", "x", data={"t": 1}), T)])
    s2 = store.update([Ran(CheckResult("a", "y", data={"t": 2}), T)])  # data/summary only
    s3 = store.update([Ran(CheckResult("a", "y", [finding("nic:eth0")]), T)])
    s4 = store.update([Ran(CheckResult("a", "y", [finding("nic:eth0", "other words")]), T)])
    s5 = store.update([Ran(CheckResult("b", "new check"), T)])
    assert [s.version for s in (s1, s2, s3, s4, s5)] == [1, 2, 3, 4, 5]
    assert [s.change for s in (s1, s2, s3, s4, s5)] == [1, 1, 2, 2, 3]
    assert s5.report is not None and [c.name for c in s5.report.checks] == ["a", "b"]
    assert s5.runs == {"a": 4, "b": 1}


def test_the_report_changed_line_names_each_finding_once_and_xids_by_number(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # GPU 6 has Xid 119 and Xid 154, both CRITICAL RESET_GPU on the same resource: the line
    # must tell them apart, and say each once.
    executor = CheckRunner(
        snapshot_host(snapshot("synthetic-xid-critical")), Config(), records({"xid": xid.run})
    )
    scheduler = Scheduler(executor, ReportStore("n", ["xid"]), [], 0.0, ["xid"])
    with caplog.at_level(logging.INFO, logger="gpuprobe.serve"):
        scheduler.run_now(["xid"])
    (changed,) = [r for r in caplog.records if r.getMessage() == "report changed"]
    gpu2 = "gpu:2:GPU-5f1c0002-8e2b-4c1d-9a7e-000000000002"
    gpu6 = "gpu:6:GPU-5f1c0006-8e2b-4c1d-9a7e-000000000006"
    assert changed.findings == [  # type: ignore[attr-defined]
        f"xid:XID 48:{gpu2}",
        f"xid:XID 63:{gpu2}",
        f"xid:XID 119:{gpu6}",
        f"xid:XID 154:{gpu6}",
    ]


def test_watchers_wake_on_change_and_time_out_otherwise() -> None:
    store = ReportStore("n", ["a"])
    store.update([Ran(CheckResult("a", "ok"), T)])
    assert store.wait_change(after=1, timeout=0.05) is None
    woke: list[int] = []

    def watch() -> None:
        snapshot = store.wait_change(after=1, timeout=5)
        woke.append(snapshot.change if snapshot else -1)

    thread = threading.Thread(target=watch)
    thread.start()
    time.sleep(0.1)
    store.update([Ran(CheckResult("a", "broken", [finding("nic:eth1")]), T)])
    thread.join(5)
    assert woke == [2]


@pytest.mark.parametrize(
    ("serve", "error"),
    [
        ({"interval_seconds": 0}, "interval_seconds: 0 must be above 0"),
        ({"intervals": {"gpus": -1}}, "intervals.gpus: -1 must be above 0"),
        ({"jitter_fraction": 0.9}, "jitter_fraction: 0.9 is not within 0-0.5"),
        ({"calls_burst": 0}, "calls_burst: 0 must be at least 1"),
        ({"max_watchers": 0}, "max_watchers: 0 must be at least 1"),
        ({"interval": 5}, "unknown key 'interval'"),
        ({"intervals": {"gpus": "often"}}, "intervals.gpus: expected a number, got a string"),
    ],
)
def test_bad_serve_config_is_a_one_line_error(serve: dict[str, object], error: str) -> None:
    from gpuprobe.errors import ConfigError

    with pytest.raises(ConfigError, match=error):
        config(serve=serve)


def test_serve_config_intervals() -> None:
    cfg = config(serve={"interval_seconds": 20, "intervals": {"xid": 5}}).serve
    assert cfg.interval("xid", active=False) == 5
    assert cfg.interval("gpus", active=False) == 20
    assert cfg.interval("storage", active=True) == 3600


def test_the_executor_runs_checks_in_turn_and_a_stuck_one_holds_nothing_back() -> None:
    times: dict[str, tuple[float, float]] = {}
    release = threading.Event()

    def make(name: str, seconds: float) -> object:
        def run(ctx: CheckContext, c: Config) -> CheckResult:
            started = time.monotonic()
            if name == "stuck":
                release.wait(30)
            time.sleep(seconds)
            times[name] = (started, time.monotonic())
            return CheckResult(name, "ran")

        return run

    checks = {"a": make("a", 0.05), "b": make("b", 0.05), "stuck": make("stuck", 0)}
    cfg = config(checks={"deadlines": {"stuck": 1}})
    executor = CheckRunner(host(), cfg, records(checks))
    try:
        executor.run(["a", "b"])
        assert times["a"][1] <= times["b"][0]  # in turn
        called = time.monotonic()
        first = executor.run(["stuck", "a"])  # a waits for the stagger, not the deadline
        assert STAGGER_SECONDS - 0.05 <= times["a"][0] - called < STAGGER_SECONDS + 0.5
        assert [r.timed_out for r in first] == [True, False]
        started = time.monotonic()
        again = executor.run(["stuck", "a"])  # joined in flight: no stagger at all
        assert time.monotonic() - started < 1.5
        assert times["a"][0] - started < STAGGER_SECONDS
        assert [r.timed_out for r in again] == [True, False]
        release.set()
        started = time.monotonic()
        executor.run(["b", "a"], within=5)  # a caller's deadline: all at once
        assert times["a"][0] - started < times["b"][1] - started
    finally:
        release.set()


def test_the_first_report_waits_for_every_passive_check() -> None:
    store = ReportStore("n", ["driver", "gpus", "storage"], first=["driver", "gpus"])
    assert store.update([Ran(CheckResult("storage", "measured"), T)]).report is None
    assert store.update([Ran(CheckResult("driver", "ok"), T)]).report is None
    report = store.update([Ran(CheckResult("gpus", "ok"), T)]).report
    assert report is not None
    assert [c.name for c in report.checks] == ["driver", "gpus", "storage"]
    later = store.update([Ran(CheckResult("storage", "again"), T)]).report
    assert later is not None and later.check("storage").summary == "again"  # type: ignore[union-attr]
