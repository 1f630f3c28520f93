"""nccl-tests output: rows, the average footer, wrong values, and the runner's failures."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from conftest import ROOT
from gpuprobe.measure.nccl import NcclTestError, parse_output, run

FIXTURES = ROOT / "tests" / "fixtures" / "nccl"


def test_eight_gpu_all_reduce() -> None:
    result = parse_output((FIXTURES / "all_reduce_perf-8xh100.txt").read_text())
    assert [r.size_bytes for r in result.rows] == [2**30, 2**31, 2**32, 2**33]
    assert result.largest.size_bytes == 8589934592
    assert result.largest.out_of_place_busbw == pytest.approx(483.77e9)
    assert result.largest.in_place_busbw == pytest.approx(483.96e9)
    assert result.largest.out_of_place_algbw == pytest.approx(276.44e9)
    assert result.average_busbw == pytest.approx(477.970e9)
    assert result.wrong_values == 0


def test_wrong_values_are_summed() -> None:
    result = parse_output((FIXTURES / "all_reduce_perf-wrong-na.txt").read_text())
    assert result.wrong_values == 5
    assert result.largest.out_of_place_busbw == pytest.approx(169.48e9)


def test_without_validation_wrong_is_unknown() -> None:
    result = parse_output((FIXTURES / "all_reduce_perf-no-validation.txt").read_text())
    assert result.rows[0].wrong is None
    assert result.wrong_values == 0


def test_no_rows_is_an_error() -> None:
    with pytest.raises(NcclTestError, match="printed no result row"):
        parse_output("# nThread 1 nGpus 8\nNCCL error: unhandled system error\n")


def fake(tmp_path: Path, body: str) -> str:
    """A stand-in for the binary: a script printing a documented output (nccl-tests needs GPUs)."""
    path = tmp_path / "all_reduce_perf"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_runner_passes_the_gpu_count_and_reads_the_table(tmp_path: Path) -> None:
    table = FIXTURES / "all_reduce_perf-8xh100.txt"
    binary = fake(tmp_path, f'[ "$1 $2" = "-g 8" ] || exit 9\ncat {table}\n')
    result = run(binary, 8, ("-b", "1G"), timeout=10)
    assert result.largest.size_bytes == 2**33


def test_runner_failures(tmp_path: Path) -> None:
    with pytest.raises(NcclTestError, match="is not there"):
        run(str(tmp_path / "absent"), 8, (), timeout=5)
    failing = fake(tmp_path, "echo 'NCCL failure common.cu:958 unhandled cuda error' >&2\nexit 3\n")
    with pytest.raises(NcclTestError, match="exited 3: NCCL failure"):
        run(failing, 8, (), timeout=5)
    os.remove(failing)
    hanging = fake(tmp_path, "sleep 30\n")
    with pytest.raises(NcclTestError, match="did not finish within 1 s"):
        run(hanging, 8, (), timeout=1)
