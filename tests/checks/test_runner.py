"""The check runner: deadlines, failures and order."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import gpuprobe, snapshot
from gpuprobe.checks import registry
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check, CheckFn
from gpuprobe.checks.runner import STAGGER_SECONDS, CheckRunner
from gpuprobe.config import Config
from gpuprobe.host import snapshot_host
from gpuprobe.pipeline import run_checks
from gpuprobe.report import CheckResult, Status
from helpers import config, use_check


def hanging_snapshot(tmp_path: Path, delay: float) -> Path:
    """The healthy snapshot with NVML's device count hanging for `delay` seconds."""
    src = Path(snapshot("synthetic-h100-8gpu-healthy"))
    dest = tmp_path / "hang"
    dest.mkdir()
    for name in ("snapshot.json", "processes.json"):
        (dest / name).write_text((src / name).read_text())
    (dest / "rootfs").symlink_to(src / "rootfs")
    record = json.loads((src / "nvml.json").read_text())
    for call in record["calls"]:
        if call["fn"] == "nvmlDeviceGetCount":
            call["delay"] = delay
    (dest / "nvml.json").write_text(json.dumps(record))
    return dest


def test_a_hung_check_is_cut_at_its_deadline_and_the_rest_completes(tmp_path: Path) -> None:
    host = snapshot_host(str(hanging_snapshot(tmp_path, 30)))
    started = time.monotonic()
    report = run_checks(host, config(checks={"deadlines": {"gpus": 0.5}}), ["driver", "gpus"])
    elapsed = time.monotonic() - started
    assert elapsed < 5
    gpus = report.check("gpus")
    assert gpus is not None and gpus.status is Status.UNKNOWN
    assert [f.code for f in gpus.findings] == ["CHECK_TIMEOUT"]
    assert gpus.summary == "did not finish within its 0.5 s deadline"
    driver = report.check("driver")
    assert driver is not None and driver.status is Status.OK


def test_the_cli_exits_at_the_deadline_without_waiting_for_the_hung_call(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("checks: {deadline_seconds: 1}\n")
    started = time.monotonic()
    out = gpuprobe(
        "check",
        "--json",
        "--only",
        "driver,gpus",
        "--snapshot",
        str(hanging_snapshot(tmp_path, 60)),
        "--config",
        str(cfg),
    )
    assert time.monotonic() - started < 20
    assert out.returncode == 3
    statuses = {c["name"]: c["status"] for c in out.json()["checks"]}
    assert statuses == {"driver": "OK", "gpus": "UNKNOWN"}


def test_an_exception_becomes_an_unknown_result_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(ctx: CheckContext, cfg: Config) -> CheckResult:
        raise KeyError("busId")

    use_check(monkeypatch, "gpus", broken)
    host = snapshot_host(snapshot("synthetic-h100-8gpu-healthy"))
    report = run_checks(host, Config(), ["driver", "gpus"])
    gpus = report.check("gpus")
    assert gpus is not None
    assert gpus.status is Status.UNKNOWN
    assert gpus.summary == "check failed: KeyError: 'busId'"
    assert [(f.code, f.severity.value) for f in gpus.findings] == [("CHECK_FAILED", "UNKNOWN")]
    assert [c.name for c in report.checks] == ["driver", "gpus"]


def test_durations_are_measured() -> None:
    host = snapshot_host(snapshot("synthetic-h100-8gpu-healthy"))
    report = run_checks(host, Config(), ["driver", "gpus"])
    assert all(0 < c.duration_seconds < 5 for c in report.checks)


def test_registry_resolves_names_in_report_order() -> None:
    assert registry.resolve(["gpus", "driver"]) == ["driver", "gpus"]
    with pytest.raises(KeyError):
        registry.resolve(["nope"])


def recording(times: dict[str, tuple[float, float]], name: str, seconds: float) -> CheckFn:
    """A stand-in check that sleeps `seconds` and records when it started and ended."""

    def check(ctx: CheckContext, cfg: Config) -> CheckResult:
        started = time.monotonic()
        time.sleep(seconds)
        times[name] = (started, time.monotonic())
        return CheckResult(name, "ok")

    return check


def test_quick_checks_run_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    times: dict[str, tuple[float, float]] = {}
    for name in ("driver", "gpus", "mig"):
        use_check(monkeypatch, name, recording(times, name, 0.05))
    host = snapshot_host(snapshot("synthetic-h100-8gpu-healthy"))
    run_checks(host, Config(), ["driver", "gpus", "mig"])
    assert times["driver"][1] <= times["gpus"][0]
    assert times["gpus"][1] <= times["mig"][0]


def test_a_slow_check_holds_the_next_back_only_for_the_stagger(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    times: dict[str, tuple[float, float]] = {}
    use_check(monkeypatch, "driver", recording(times, "driver", 2.0))
    use_check(monkeypatch, "gpus", recording(times, "gpus", 0.0))
    host = snapshot_host(snapshot("synthetic-h100-8gpu-healthy"))
    report = run_checks(host, Config(), ["driver", "gpus"])
    waited = times["gpus"][0] - times["driver"][0]
    assert STAGGER_SECONDS - 0.05 <= waited < STAGGER_SECONDS + 0.5
    assert [c.status for c in report.checks] == [Status.OK, Status.OK]


def loading_checks(loads_gpus: bool, seconds: float) -> tuple[dict[str, Check[Any]], list[int]]:
    """Two active checks, each `seconds` long, and the most of them seen running at once."""
    running: list[int] = [0]
    most: list[int] = [0]
    lock = threading.Lock()

    def load(ctx: CheckContext, config: Config) -> CheckResult:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(seconds)
        with lock:
            running[0] -= 1
        return CheckResult("load", "loaded")

    checks = {
        name: Check(name, load, active=True, loads_gpus=loads_gpus) for name in ("load_a", "load_b")
    }
    return checks, most


def test_active_checks_that_load_the_gpus_never_run_at_once() -> None:
    host = snapshot_host(snapshot("synthetic-h100-8gpu-healthy"))
    checks, most = loading_checks(loads_gpus=True, seconds=0.3)
    runner = CheckRunner(host, Config(), checks)
    started = time.monotonic()
    ran = runner.run(["load_a", "load_b"], within=5.0)  # both started at once (RunChecks)
    assert [r.result.summary for r in ran] == ["loaded", "loaded"]
    assert most == [1]
    assert time.monotonic() - started >= 0.6  # the second waited for the first
    # Without the declaration the same checks overlap: what the runner serialises is the
    # GPU load, not every active check.
    checks, most = loading_checks(loads_gpus=False, seconds=0.3)
    CheckRunner(host, Config(), checks).run(["load_a", "load_b"], within=5.0)
    assert most == [2]


def test_the_checks_that_load_the_gpus_say_so_and_are_active() -> None:
    loading = [c.name for c in registry.ORDER if c.loads_gpus]
    assert loading == ["nccl"]
    assert all(registry.CHECKS[name].active for name in loading)
