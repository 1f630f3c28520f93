"""Check `nccl`: configured or not, GPUs busy or free, bandwidth against its floor."""

from __future__ import annotations

import stat
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import ROOT
from gpuprobe.checks import nccl
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.registry import CHECKS
from gpuprobe.config import Config
from gpuprobe.errors import ConfigError
from gpuprobe.gpu.own_load import own_gpu_test_running
from gpuprobe.host import snapshot_host
from helpers import codes, config, run_check, snapshot

TABLES = ROOT / "tests" / "fixtures" / "nccl"


def script(tmp_path: Path, body: str) -> str:
    """A stand-in for all_reduce_perf printing a documented table (the real one needs GPUs)."""
    path = tmp_path / "all_reduce_perf"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_not_configured_is_ok_and_says_so() -> None:
    result = run_check("nccl", "synthetic-h100-8gpu-healthy")
    assert (result.status.value, result.summary) == ("OK", "not configured (nccl.binary)")


def test_no_gpus_means_not_run(tmp_path: Path) -> None:
    cfg = config(nccl={"binary": script(tmp_path, "exit 1\n")})
    assert run_check("nccl", "kvm-epyc-nogpu", cfg).summary == "no GPUs: not run"


def test_busbw_at_the_largest_size_against_the_floor(tmp_path: Path) -> None:
    binary = script(tmp_path, f"cat {TABLES / 'all_reduce_perf-8xh100.txt'}\n")
    ok = run_check(
        "nccl",
        "synthetic-h100-8gpu-healthy",
        config(nccl={"binary": binary, "force": True, "min_busbw_gbps": 460}),
    )
    assert ok.findings == []
    assert ok.summary == "busbw 483.8 GB/s at 8589934592 bytes across 8 GPUs"
    assert ok.data["busbw_bytes_per_second"] == 483.77e9
    low = run_check(
        "nccl",
        "synthetic-h100-8gpu-healthy",
        config(nccl={"binary": binary, "force": True, "min_busbw_gbps": 490}),
    )
    assert codes(low) == [("NCCL_BUSBW_LOW", "WARNING", "HARDWARE_INSPECTION", "node")]


def test_wrong_values_are_critical(tmp_path: Path) -> None:
    binary = script(tmp_path, f"cat {TABLES / 'all_reduce_perf-wrong-na.txt'}\n")
    result = run_check(
        "nccl", "synthetic-h100-8gpu-healthy", config(nccl={"binary": binary, "force": True})
    )
    assert codes(result) == [("NCCL_WRONG_RESULTS", "CRITICAL", "HARDWARE_INSPECTION", "node")]


def test_a_missing_binary_and_a_failing_run(tmp_path: Path) -> None:
    missing = run_check(
        "nccl",
        "synthetic-h100-8gpu-healthy",
        config(nccl={"binary": str(tmp_path / "absent"), "force": True}),
    )
    assert codes(missing) == [("NCCL_TEST_FAILED", "UNKNOWN", "FIX_CONFIG", "node")]
    failing = script(tmp_path, "echo 'NCCL WARN NET/IB : Got completion with error' >&2\nexit 1\n")
    failed = run_check(
        "nccl", "synthetic-h100-8gpu-healthy", config(nccl={"binary": failing, "force": True})
    )
    assert codes(failed) == [("NCCL_TEST_FAILED", "CRITICAL", "DRAIN_NODE", "node")]
    assert "exited 1: NCCL WARN NET/IB" in failed.findings[0].message


def test_busy_gpus_keep_the_test_from_running(tmp_path: Path) -> None:
    binary = script(tmp_path, "touch ran\nexit 1\n")
    result = run_check("nccl", "synthetic-h100-8gpu-healthy", config(nccl={"binary": binary}))
    assert result.summary == "not run: GPU processes are active on GPU 0, 1, 2, 3, 4, 5, 6, 7"
    assert result.findings == [] and result.data == {"ran": False}


def test_the_deadline_follows_the_test_timeout() -> None:
    assert CHECKS["nccl"].deadline(Config()) == 315.0  # nccl.timeout_seconds 300 plus 15
    assert CHECKS["nccl"].deadline(config(nccl={"timeout_seconds": 30})) == 45.0
    raised = config(nccl={"timeout_seconds": 1}, checks={"deadline_seconds": 20})
    assert CHECKS["nccl"].deadline(raised) == 20.0
    told = config(nccl={"timeout_seconds": 600}, checks={"deadlines": {"nccl": 100}})
    assert CHECKS["nccl"].deadline(told) == 100.0
    assert CHECKS["gpus"].deadline(Config()) == 10.0
    assert CHECKS["storage"].deadline(Config()) == 120.0
    with pytest.raises(ConfigError, match="timeout_seconds: 0 must be above 0"):
        config(nccl={"timeout_seconds": 0})


def test_a_lower_deadline_bounds_the_test(tmp_path: Path) -> None:
    binary = script(tmp_path, "sleep 30\n")
    cfg = config(
        nccl={"binary": binary, "force": True, "timeout_seconds": 300},
        checks={"deadlines": {"nccl": 2}},
    )
    result = run_check("nccl", "synthetic-h100-8gpu-healthy", cfg)
    assert codes(result) == [("NCCL_TEST_FAILED", "CRITICAL", "DRAIN_NODE", "node")]
    assert result.findings[0].message.endswith("did not finish within 1 s")


def test_a_non_zero_exit_after_rows_is_a_failed_test(tmp_path: Path) -> None:
    table = TABLES / "all_reduce_perf-8xh100.txt"
    binary = script(tmp_path, f"cat {table}\necho 'NCCL WARN unhandled cuda error' >&2\nexit 2\n")
    result = run_check(
        "nccl", "synthetic-h100-8gpu-healthy", config(nccl={"binary": binary, "force": True})
    )
    assert codes(result) == [("NCCL_TEST_FAILED", "CRITICAL", "DRAIN_NODE", "node")]
    assert result.findings[0].message == (
        f"the NCCL test across 8 GPUs failed: {binary} exited 2 after 4 sizes "
        "(up to 8589934592 bytes): NCCL WARN unhandled cuda error"
    )


def test_the_gpus_count_as_loaded_by_gpuprobe_only_while_its_test_runs(tmp_path: Path) -> None:
    started = tmp_path / "started"
    binary = script(
        tmp_path, f"touch {started}\nsleep 1\ncat {TABLES / 'all_reduce_perf-8xh100.txt'}\n"
    )
    host = snapshot_host(snapshot("synthetic-h100-8gpu-healthy"))
    cfg = config(nccl={"binary": binary, "force": True})
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(nccl.run, CheckContext(host), cfg)
        deadline = time.monotonic() + 10
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert own_gpu_test_running(host)
        assert future.result(timeout=30).data["ran"] is True
    memory = host.memory.of("gpu_load")
    assert memory["own_gpu_tests"] == 0 and "own_gpu_test_ended" in memory  # it ended


def test_an_old_all_gather_table_without_redop_is_judged(tmp_path: Path) -> None:
    # The 11-column layout of nccl-tests before 2021 (no redop, no root): read, not refused
    # as "printed no result row".
    binary = script(tmp_path, f"cat {TABLES / 'all_gather_perf-2019-layout.txt'}\n")
    cfg = config(
        nccl={"binary": binary, "force": True, "args": ["-b", "32M", "-e", "256M", "-f", "2"]}
    )
    result = run_check("nccl", "synthetic-h100-8gpu-healthy", cfg)
    assert (result.status.value, result.findings) == ("OK", [])
    assert result.summary == "busbw 110.2 GB/s at 268435456 bytes across 8 GPUs"


def test_output_that_is_not_utf8_is_read(tmp_path: Path) -> None:
    # Found by fuzzing nccl-tests output: a byte that is not UTF-8 (a host name, a device
    # name) raised UnicodeDecodeError out of the check (CHECK_FAILED).
    table = (TABLES / "all_gather_perf-2019-layout.txt").read_bytes()
    broken = table.replace(b"dgx1-v100", b"dgx1-v\xff00", 1)
    (tmp_path / "table.txt").write_bytes(broken)
    binary = script(tmp_path, f"cat {tmp_path / 'table.txt'}\n")
    cfg = config(
        nccl={"binary": binary, "force": True, "args": ["-b", "32M", "-e", "256M", "-f", "2"]}
    )
    result = run_check("nccl", "synthetic-h100-8gpu-healthy", cfg)
    assert (result.status.value, result.findings) == ("OK", [])
    assert result.summary == "busbw 110.2 GB/s at 268435456 bytes across 8 GPUs"
