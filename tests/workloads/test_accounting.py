"""Idle accounting over a replayed series of NVML utilization samples: exact seconds per GPU
and namespace, MIG devices as shares of their GPU, and totals that survive a restart without
counting anything twice."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from conftest import snapshot
from gpuprobe.checks import registry, workloads
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.runner import CheckRunner
from gpuprobe.config import Config
from gpuprobe.gpu.backend import Partition
from gpuprobe.host import snapshot_host
from gpuprobe.report import PodRef
from gpuprobe.workloads.accounting import account, new_ledger
from gpuprobe.workloads.allocations import Grant
from gpuprobe.workloads.attribution import DeviceUse
from helpers import FakeClock, config

UUID = "GPU-5f1c{:04x}-8e2b-4c1d-9a7e-{:012x}"
STATE = "workload-accounting.json"


def totals(result: Any) -> dict[int, tuple[float, float, dict[str, float], float]]:
    """Per GPU: (allocated, busy, idle by namespace, unallocated) seconds."""
    return {
        g["gpu"]: (
            g["allocated_seconds"],
            g["busy_seconds"],
            g["idle_allocated_seconds"],
            g["unallocated_seconds"],
        )
        for g in result.data["accounting"]["gpus"]
    }


def rounds(name: str, times: list[float], cfg: Config) -> list[Any]:
    host = snapshot_host(snapshot(name))
    host.clock = clock = FakeClock()
    # One agent's rounds: one context, whose states the runner keeps between them (a call of
    # `rounds` of its own is a restarted agent).
    ctx = CheckContext(host)
    results = []
    for t in times:
        clock.ticks = t
        results.append(workloads.run(ctx, cfg))
    return results


def test_samples_between_rounds_give_exact_idle_seconds() -> None:
    first, second, third = rounds("synthetic-k8s-utilization-samples", [0.0, 60.0, 120.0], Config())
    assert all(t == (0.0, 0.0, {}, 0.0) for t in totals(first).values())
    busy = (60.0, 60.0, {"ml-team": 0.0}, 0.0)
    assert totals(second) == {
        **{i: busy for i in range(4)},
        4: (60.0, 60.0, {"inference": 0.0}, 0.0),  # samples all at 97 %
        5: (60.0, 60.0, {"inference": 0.0}, 0.0),  # no samples: its process counts it busy
        6: (60.0, 15.0, {"research": 45.0}, 0.0),  # 45 of 60 new samples at 0 %
        7: (0.0, 0.0, {}, 60.0),
    }
    # No new sample in the third minute: GPU 6 has no process and 0 % now, so all idle.
    assert totals(third)[6] == (120.0, 15.0, {"research": 105.0}, 0.0)
    assert totals(third)[4] == (120.0, 120.0, {"inference": 0.0}, 0.0)
    assert totals(third)[7] == (0.0, 0.0, {}, 120.0)


def test_mig_devices_count_as_shares_of_their_gpu() -> None:
    _, result = rounds("synthetic-k8s-mig-mixed", [0.0, 60.0], Config())
    # GPU 0: four MIG devices, three held (eval-2g's without a process), one free.
    assert totals(result)[0] == (45.0, 30.0, {"inference": 0.0, "ml-team": 15.0}, 15.0)
    assert totals(result)[1] == (0.0, 0.0, {}, 60.0)


def test_totals_survive_a_restart_without_counting_twice(tmp_path: Path) -> None:
    cfg = config(workloads={"state_dir": str(tmp_path)})
    _, before = rounds("synthetic-k8s-utilization-samples", [0.0, 60.0], cfg)
    saved = json.loads((tmp_path / "workload-accounting.json").read_text())
    assert saved["format"] == 1 and saved["since"] == before.data["accounting"]["since"]
    assert saved["gpus"][UUID.format(6, 6)] == {
        "gpu": 6,
        "uuid": UUID.format(6, 6),
        "allocated_seconds": 60.0,
        "idle_allocated_seconds": {"research": 45.0},
        "unallocated_seconds": 0.0,
    }
    # A new daemon (fresh memory) an hour later: the downtime is not counted, the totals go on.
    after = rounds("synthetic-k8s-utilization-samples", [3600.0, 3660.0], cfg)
    assert totals(after[0]) == totals(before)
    assert totals(after[1])[7] == (0.0, 0.0, {}, 120.0)
    assert totals(after[1])[0] == (120.0, 120.0, {"ml-team": 0.0}, 0.0)
    assert after[1].data["accounting"]["since"] == saved["since"]
    assert [p.name for p in tmp_path.iterdir()] == ["workload-accounting.json"]


def test_the_runner_keeps_the_ledger_in_its_one_state_directory_across_a_restart(
    tmp_path: Path,
) -> None:
    """The ledger is the runner's durable state: with only `xid.state_dir` set (the one state
    directory) it lands there; a new runner (a restarted daemon) goes on from it; a run that
    adds nothing (a one-shot `check` beside the daemon) leaves the daemon's file alone."""
    host = snapshot_host(snapshot("synthetic-k8s-utilization-samples"))
    host.clock = clock = FakeClock()
    cfg = config(xid={"state_dir": str(tmp_path)})
    (fresh,) = CheckRunner(host, cfg, registry.CHECKS).run(["workloads"])  # a one-shot check
    assert "state_error" not in fresh.result.data["accounting"]
    assert list(tmp_path.iterdir()) == []  # it counted no time: nothing written
    daemon = CheckRunner(host, cfg, registry.CHECKS)
    for t in (0.0, 60.0):
        clock.ticks = t
        (before,) = daemon.run(["workloads"])
    assert before.result.data["accounting"]["state_file"] == str(tmp_path / STATE)
    written = (tmp_path / STATE).read_bytes()
    assert json.loads(written)["gpus"][UUID.format(7, 7)]["unallocated_seconds"] == 60.0
    clock.ticks = 3600.0
    (one_shot,) = CheckRunner(host, cfg, registry.CHECKS).run(["workloads"])
    assert totals(one_shot.result) == totals(before.result)
    assert (tmp_path / STATE).read_bytes() == written
    restarted = CheckRunner(host, cfg, registry.CHECKS)
    for t in (3600.0, 3660.0):
        clock.ticks = t
        (after,) = restarted.run(["workloads"])
    assert totals(after.result)[7] == (0.0, 0.0, {}, 120.0)
    assert after.result.data["accounting"]["since"] == before.result.data["accounting"]["since"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [STATE]


def test_a_missing_state_directory_is_said_each_round_that_counts_and_counting_goes_on(
    tmp_path: Path,
) -> None:
    missing = config(workloads={"state_dir": str(tmp_path / "absent")})
    first, second = rounds("synthetic-k8s-utilization-samples", [0.0, 60.0], missing)
    said = (
        f"workload accounting state directory {tmp_path / 'absent'} does not exist: create it "
        "or set workloads.state_dir"
    )
    # The first round counts no time, so writes nothing; every round after says it.
    assert "state_error" not in first.data["accounting"]
    assert second.data["accounting"]["state_error"] == said
    assert first.data["accounting"]["state_file"] == str(tmp_path / "absent" / STATE)
    assert totals(second)[7] == (0.0, 0.0, {}, 60.0)  # in memory, the round still counts
    assert not (tmp_path / "absent").exists()


def test_an_unknown_allocation_counts_nothing() -> None:
    results = rounds("synthetic-k8s-podresources-refused", [0.0, 60.0], Config())
    assert all(t == (0.0, 0.0, {}, 0.0) for t in totals(results[1]).values())


def test_a_mig_device_whose_processes_are_unknown_counts_no_idle() -> None:
    uuid = UUID.format(0, 0)
    mig_uuid = "MIG-0c6f8a1e-7b2d-5e3f-9a4c-1d2e3f4a5b6c"
    mig = Partition(0, 0, 1, 0, mig_uuid, "NVIDIA H100 80GB HBM3 MIG 1g.10gb")
    grant = Grant(PodRef("ml-team", "eval-0", "eval"), "nvidia.com/mig-1g.10gb", mig_uuid, "x")
    devices = [
        DeviceUse(f"gpu:0:{uuid}", 0, uuid, processes=None),
        DeviceUse("mig:0:1:0", 0, uuid, mig=mig, grants=[grant], processes=None),
    ]
    ledger = new_ledger()
    account(ledger, devices, 0.0, 5.0)
    account(ledger, devices, 60.0, 5.0)
    totals = ledger.gpus[uuid]
    # As a whole GPU in the same state: allocated, and no idle second counted.
    assert (totals.allocated, totals.idle_allocated) == (60.0, {"ml-team": 0.0})


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (
            '{"format": 2, "since": "2026-11-29T08:00:00Z", "gpus": {}}',
            "format 2, this version reads 1",
        ),
        ("{not json", "line 1: Expecting property name enclosed in double quotes"),
        ('{"format": 1, "gpus": {}}', "no 'since'"),
        ("\xff\xfe", "not UTF-8 text"),
    ],
)
def test_a_state_file_it_cannot_read_is_kept_aside_said_and_not_overwritten(
    tmp_path: Path, content: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Never a silent reset: the unreadable ledger is kept as `.bad` (the fresh one written
    after the round never overwrites it), the log says so, and so does the round's data."""
    path = tmp_path / STATE
    path.write_bytes(content.encode("latin-1"))
    cfg = config(workloads={"state_dir": str(tmp_path)})
    with caplog.at_level("WARNING", logger="gpuprobe.state"):
        first, second = rounds("synthetic-k8s-utilization-samples", [0.0, 60.0], cfg)
    assert all(t == (0.0, 0.0, {}, 0.0) for t in totals(first).values())
    said = f"workload accounting state {path}: {why}; kept as {path}.bad; starting afresh"
    assert first.data["accounting"]["state_error"] == said
    assert "state_error" not in second.data["accounting"]  # the fresh ledger is written
    assert (tmp_path / f"{STATE}.bad").read_bytes() == content.encode("latin-1")
    assert json.loads(path.read_text())["gpus"][UUID.format(7, 7)]["unallocated_seconds"] == 60.0
    assert [r.getMessage() for r in caplog.records if r.name == "gpuprobe.state"] == [said]


def test_a_full_state_disk_is_said_once_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    """The GPU-seconds ledger on a disk with no byte left: said in the data every round, in
    the log once (issue 41 item 10)."""
    from mounting import fill, mounted

    caplog.set_level(logging.INFO, logger="gpuprobe.state")
    with mounted("tmpfs", "size=64k") as state:
        fill(state)
        cfg = config(workloads={"state_dir": str(state)})
        results = rounds("synthetic-k8s-utilization-samples", [0.0, 60.0, 120.0], cfg)
    errors = [r.data["accounting"].get("state_error") for r in results]
    full = f"workload accounting state {state / STATE}: no space left on device"
    assert errors == [None, full, full]  # the first round counts nothing: it writes nothing
    logged = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "gpuprobe.state"]
    assert logged == [
        ("WARNING", "state file not written: what it keeps is lost at the next restart")
    ]
