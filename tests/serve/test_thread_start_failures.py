"""A thread the system refuses (a pids limit reached) costs the work that needed it once, never
for good: the check executor did record a check as running before starting its thread and never
forgot it when the start failed, so every later round reported CHECK_TIMEOUT until a restart."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import require, require_root, snapshot
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.runner import CheckRunner
from gpuprobe.config import Config
from gpuprobe.host import Host, snapshot_host
from gpuprobe.pipeline import run_checks
from gpuprobe.report import CheckResult
from helpers import records
from serving import LOOPBACK_FLAGS, wait_for

REFUSED = "can't start new thread"


@contextmanager
def threads_refused(prefix: str, times: int) -> Iterator[list[str]]:
    """`Thread.start` raises as CPython does when pthread_create fails (EAGAIN), for the next
    `times` threads named `prefix...`; yields the names refused."""
    real = threading.Thread.start
    refused: list[str] = []

    def start(self: threading.Thread) -> None:
        if self.name.startswith(prefix) and len(refused) < times:
            refused.append(self.name)
            raise RuntimeError(REFUSED)
        real(self)

    threading.Thread.start = start  # type: ignore[method-assign]
    try:
        yield refused
    finally:
        threading.Thread.start = real  # type: ignore[method-assign]


def host() -> Host:
    return snapshot_host(snapshot("synthetic-h100-8gpu-healthy"))


def ok(ctx: CheckContext, config: Config) -> CheckResult:
    return CheckResult("a", "fine")


def test_a_check_whose_thread_was_refused_runs_again_next_round() -> None:
    executor = CheckRunner(host(), Config(), records({"a": ok}))
    with threads_refused("check-", 1) as refused:
        (first,) = executor.run(["a"])
    assert refused == ["check-a"]
    assert [f.code for f in first.result.findings] == ["CHECK_FAILED"]
    assert "can't start a thread for the check" in first.result.findings[0].message
    assert executor.in_flight() == []  # not remembered as running
    started = time.monotonic()
    (second,) = executor.run(["a"])
    assert second.result.summary == "fine" and not second.result.findings
    assert time.monotonic() - started < 1.0  # not waited on as a stuck run


def test_the_one_shot_runner_reports_a_refused_thread_as_check_failed() -> None:
    with threads_refused("check-driver", 1):
        report = run_checks(host(), Config(), ["driver", "gpus"])
    driver, gpus = report.checks
    assert [f.code for f in driver.findings] == ["CHECK_FAILED"]
    assert gpus.summary and "CHECK_FAILED" not in [f.code for f in gpus.findings]


PIDS = Path("/sys/fs/cgroup/pids")


@contextmanager
def pids_cgroup() -> Iterator[Path]:
    """A cgroup-v1 pids cgroup of our own (removed afterwards)."""
    require_root()
    require((PIDS / "cgroup.procs").exists(), "no cgroup v1 pids controller to limit threads")
    group = PIDS / f"gpuprobe-test-{os.getpid()}"
    group.mkdir()
    try:
        yield group
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            (PIDS / "cgroup.procs").write_text(pid)  # back to the root before removal
        group.rmdir()


def healthz(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
        return str(response.read().decode())


def report_time(page: str) -> datetime | None:
    for line in page.splitlines():
        if line.startswith("report: 2"):  # "report: none yet" before the first
            return datetime.fromisoformat(line.removeprefix("report: ").split(" (")[0])
    return None


@pytest.mark.slow
def test_the_daemon_recovers_after_a_pids_limit_was_reached(tmp_path: Path) -> None:
    """The real thing: `gpuprobe serve` in a pids cgroup at its limit: check rounds are refused
    their threads meanwhile, idle /metrics connections (no thread each) and /healthz are still
    served; once the limit is lifted, the next report has both checks OK (it had
    CHECK_TIMEOUT for good)."""
    config = tmp_path / "config.yaml"
    config.write_text("checks: {deadline_seconds: 2}\n")
    args = ["--interval", "0.5", "--only", "driver,gpus", "--config", str(config)]
    args += ["--snapshot", snapshot("synthetic-h100-8gpu-healthy")]
    with pids_cgroup() as group:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuprobe", "serve", *LOOPBACK_FLAGS, *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        socks: list[socket.socket] = []
        logs: list[dict[str, object]] = []
        try:
            (group / "cgroup.procs").write_text(str(proc.pid))
            assert proc.stderr is not None
            for line in proc.stderr:
                logs.append(json.loads(line))
                if logs[-1]["msg"] == "listening":
                    break
            port = int(str(logs[-1]["metrics_port"]))

            def drain() -> None:
                for line in proc.stderr or ():
                    logs.append(json.loads(line))

            threading.Thread(target=drain, daemon=True).start()
            current = int((group / "pids.current").read_text())
            (group / "pids.max").write_text(str(current))  # no thread more: rounds are refused
            for _ in range(30):  # idle connections cost no thread: none is refused
                socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))

            def check_refused() -> bool:  # a round's check thread (not only a connection's)
                return any(
                    e["msg"] == "round failed" or str(e.get("thread_name", "")).startswith("check-")
                    for e in logs
                )

            wait_for(check_refused, timeout=10)
            assert healthz(port).startswith("ok\n")  # the liveness probe answers at the limit
            for s in socks:
                s.close()
            socks.clear()
            (group / "pids.max").write_text("max")
            lifted = datetime.now(UTC)
            page = wait_for(
                lambda: (p := healthz(port)) and (report_time(p) or lifted) > lifted and p,
                timeout=15,
            )
            assert "check driver: OK" in page and "check gpus: OK" in page, page
            assert not [e for e in logs if "Traceback" in str(e.get("msg"))]
        finally:
            for s in socks:
                s.close()
            proc.kill()
            proc.wait()


def test_a_storage_job_refused_its_thread_stops_the_others_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """The storage test's jobs: one refused its thread stops those started, which are joined
    before their buffers close (closing them under a running job raised BufferError)."""
    from gpuprobe import cleanup
    from gpuprobe.measure.throughput import MeasureError, Plan, measure

    mib = 1024 * 1024
    with threads_refused("storage-job-2", 1), pytest.raises(MeasureError) as err:
        measure(tmp_path, Plan(mib, 8 * mib, 4, 60.0), "node-a")
    assert str(err.value) == "start: cannot start a thread per job"
    assert os.listdir(tmp_path) == []
    assert cleanup.pending() == []
    assert not [t for t in threading.enumerate() if t.name.startswith("storage-job-")]
