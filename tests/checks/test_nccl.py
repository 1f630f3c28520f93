"""Check `nccl`: configured or not, GPUs busy or free, bandwidth against its floor."""

from __future__ import annotations

import stat
from pathlib import Path

from conftest import ROOT
from helpers import codes, config, run_check

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
