"""The rank program (gpuprobe.mesh.nccl_rank): its sweep and bus bandwidth as nccl-tests
computes them, its table read by nccl-tests' own parser, its real output on an H200, and that it
runs where gpuprobe is not installed."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from gpuprobe.measure.nccl import parse_output
from gpuprobe.mesh import nccl_rank
from gpuprobe.mesh.nccl import logs
from gpuprobe.mesh.nccl_rank import Timing, bus_factor, footer, header, row, size_bytes, sweep

FIXTURES = ROOT / "tests" / "fixtures" / "nccl"
MI = 1024**2


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("8", 8),
        ("8M", 8 * MI),
        ("8m", 8 * MI),
        ("1G", 1024**3),
        ("64K", 65536),
        (" 2G ", 2 * 1024**3),
    ],
)
def test_sizes_read_as_nccl_tests_reads_them(text: str, size: int) -> None:
    assert size_bytes(text) == size


@pytest.mark.parametrize("text", ["0", "0M", "x", "1.5G", "G", "-8M", ""])
def test_a_size_that_is_no_size_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        size_bytes(text)


def test_the_sweep_steps_by_its_factor_in_whole_floats() -> None:
    assert list(sweep(MI, 1024 * MI, 4)) == [MI, 4 * MI, 16 * MI, 64 * MI, 256 * MI, 1024 * MI]
    assert list(sweep(8 * MI, 8 * 1024 * MI, 2))[-1] == 8 * 1024**3
    assert list(sweep(10, 40, 2)) == [8, 16, 32]  # whole floats: 10 bytes hold 2
    assert list(sweep(MI, 8 * MI, 1)) == [MI]  # no factor: one size


def test_allreduce_bus_factor_is_two_n_minus_one_over_n() -> None:
    assert bus_factor(1) == 0.0  # one rank moves nothing
    assert bus_factor(2) == 1.0
    assert bus_factor(16) == 1.875


def test_its_row_gives_the_figures_nccl_tests_printed_for_the_same_time() -> None:
    """At 16 ranks, 8 GiB in 47535 µs: nccl-tests printed algbw 180.71 and busbw 338.82 (from
    its unrounded time); the program's row, from the printed time, agrees within rounding."""
    line = row(8 * 1024**3, Timing(47535.0, 0), Timing(47743.0, 0), 16)
    fields = line.split()
    assert fields[:5] == ["8589934592", "2147483648", "float", "sum", "-1"]
    assert fields[5:7] == ["47535", "180.71"]
    assert abs(float(fields[7]) - 338.82) <= 0.01
    assert fields[8] == "0"


def test_its_table_is_read_by_nccl_tests_parser() -> None:
    args = nccl_rank.parse_args(["-b", "1M", "-e", "4M", "-f", "2"])
    rows = [
        (MI, Timing(100.0, 0), Timing(90.0, 0)),
        (2 * MI, Timing(150.0, 0), Timing(140.0, 0)),
        (4 * MI, Timing(250.0, 3), Timing(240.0, 1)),
    ]
    devices = [
        "#  Rank  0 Group  0 Pid    911 on   node-a-0 device  0 [0x18] NVIDIA H100 80GB HBM3"
    ]
    text = "\n".join(
        header(args, 1, devices) + [row(s, o, i, 2) for s, o, i in rows] + footer(rows, 2)
    )
    result = parse_output(text)
    assert [r.size_bytes for r in result.rows] == [MI, 2 * MI, 4 * MI]
    assert result.largest.out_of_place_busbw == pytest.approx(4 * MI / 250e-6, rel=1e-3)
    assert result.wrong_values == 4
    assert logs.rank_hosts(text) == {0: "node-a-0"}
    assert "# Out of bounds values : 4 FAILED" in text


def test_the_sweep_flags_are_checked() -> None:
    with pytest.raises(SystemExit):
        nccl_rank.parse_args(["-b", "2G", "-e", "1G"])
    with pytest.raises(SystemExit):
        nccl_rank.parse_args(["-n", "0"])
    args = nccl_rank.parse_args([])
    assert (args.minbytes, args.maxbytes, args.stepfactor, args.iters, args.warmup_iters) == (
        32 * MI,
        32 * MI,
        2,
        20,
        5,
    )


def test_its_real_output_on_one_h200_parses_with_the_bus_bandwidth_zero_by_definition() -> None:
    """World size 1 on an H200 (tests/fixtures/nccl/README.md): the table parses, every row's
    bus bandwidth is 0 (2(n-1)/n at n = 1), the results are exact."""
    text = (FIXTURES / "rank-program-h200-ws1.txt").read_text()
    result = parse_output(text)
    assert [r.size_bytes for r in result.rows] == [4**k * MI for k in range(6)]
    assert {r.out_of_place_busbw for r in result.rows} == {0.0}
    assert {r.in_place_busbw for r in result.rows} == {0.0}
    assert result.wrong_values == 0
    assert result.average_busbw == 0.0
    assert logs.rank_hosts(text) == {0: "vm"}


def test_it_runs_without_gpuprobe_and_ends_in_one_line_without_torch(tmp_path: Path) -> None:
    """Copied alone (as the ConfigMap mounts it) and run with the standard library only (`-I
    -S`: no site-packages, nothing of this checkout): it imports nothing of gpuprobe, and
    without torch it says so in its one failure line."""
    program = tmp_path / "nccl_rank.py"
    program.write_text(Path(nccl_rank.__file__).read_text())
    out = subprocess.run(
        [sys.executable, "-I", "-S", str(program), "-b", "1M", "-e", "1M"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == f"{nccl_rank.FAILED_MARK} ModuleNotFoundError: No module named 'torch'\n"


class ProcessRaisedError(Exception):
    """What torch.multiprocessing.spawn raises in the parent: the rank's traceback as text."""


# torch.multiprocessing.spawn's text for a failed rank, and torch's DistBackendError with
# NCCL's last error after it (tests/fixtures/nccl/README.md).
SPAWNED = (FIXTURES / "torch-spawn-rank-failed.txt").read_text()
BACKEND = (FIXTURES / "torch-distbackenderror.txt").read_text()


def test_a_ranks_traceback_is_told_by_its_exception_in_one_line() -> None:
    assert nccl_rank.failure_words(ProcessRaisedError(SPAWNED)) == (
        "RuntimeError: Distributed package doesn't have NCCL built in"
    )
    assert nccl_rank.failure_words(ProcessRaisedError(BACKEND)) == (
        "torch.distributed.DistBackendError: NCCL error in: "
        "/pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, remote process exited or there "
        "was a network error, NCCL version 2.21.5 / ncclRemoteError: A call failed possibly due "
        "to a network error or a remote process exiting prematurely. / Last error: / "
        "socketProgressOpt: Call to recv from 172....<33759> failed : Connection reset by peer"
    )
    assert nccl_rank.failure_words(RuntimeError("this pod sees no GPU")) == (
        "RuntimeError: this pod sees no GPU"
    )
    assert nccl_rank.failure_words(KeyboardInterrupt()) == "KeyboardInterrupt"
