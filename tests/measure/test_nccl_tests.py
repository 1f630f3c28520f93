"""nccl-tests output: rows, the average footer, wrong values, and the runner's failures."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from gpuprobe.measure.nccl import NcclTestError, expected_largest, parse_output, run

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


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its reaper does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def leftovers(pids_file: Path) -> list[int]:
    """The processes the stand-in recorded that still run, a moment after the runner returned."""
    pids = [int(p) for p in pids_file.read_text().split()]
    for _ in range(50):
        if not any(alive(p) for p in pids):
            break
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def sleeping(tmp_path: Path) -> tuple[str, Path]:
    """A stand-in that starts a child (as all_reduce_perf's threads and helpers are) and hangs."""
    pids = tmp_path / "pids"
    return fake(tmp_path, f"echo $$ > {pids}\nsleep 60 &\necho $! >> {pids}\nwait\n"), pids


def test_a_timed_out_run_leaves_no_process_behind(tmp_path: Path) -> None:
    binary, pids = sleeping(tmp_path)
    started = time.monotonic()
    with pytest.raises(NcclTestError, match="did not finish within 1 s"):
        run(binary, 8, (), timeout=1)
    assert time.monotonic() - started < 5  # the sleeping grandchild holds no pipe open
    assert len(pids.read_text().split()) == 2
    assert leftovers(pids) == []


def test_sigterm_stops_the_running_binary(tmp_path: Path) -> None:
    binary, pids = sleeping(tmp_path)
    script = (
        "from gpuprobe import cleanup\n"
        "from gpuprobe.measure.nccl import run\n"
        "cleanup.exit_on_signals()\n"
        f"run({binary!r}, 8, (), timeout=60)\n"
    )
    agent = subprocess.Popen([sys.executable, "-c", script])
    for _ in range(100):
        if pids.exists() and len(pids.read_text().split()) == 2:
            break
        time.sleep(0.05)
    assert all(alive(int(p)) for p in pids.read_text().split())
    agent.send_signal(signal.SIGTERM)
    assert agent.wait(10) == 143
    assert leftovers(pids) == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("exit 1", "exited 1 after 4 sizes \\(up to 8589934592 bytes\\): NCCL WARN"),
        ("exit 0", None),
    ],
)
def test_a_failed_exit_fails_even_with_rows(tmp_path: Path, body: str, message: str | None) -> None:
    table = FIXTURES / "all_reduce_perf-8xh100.txt"
    binary = fake(tmp_path, f"cat {table}\necho 'NCCL WARN Cuda failure' >&2\n{body}\n")
    if message is None:
        assert run(binary, 8, (), timeout=10).largest.size_bytes == 2**33
    else:
        with pytest.raises(NcclTestError, match=message):
            run(binary, 8, (), timeout=10)


def test_a_run_stopping_short_of_its_sweep_failed(tmp_path: Path) -> None:
    table = (FIXTURES / "all_reduce_perf-8xh100.txt").read_text()
    cut = tmp_path / "cut.txt"
    cut.write_text(
        "".join(ln for ln in table.splitlines(True) if not ln.startswith("  8589934592"))
    )
    binary = fake(tmp_path, f"cat {cut}\n")
    with pytest.raises(NcclTestError, match="stopped at 4294967296 bytes, short of the 8589934592"):
        run(binary, 8, ("-b", "1G", "-e", "8G", "-f", "2"), timeout=10)


@pytest.mark.parametrize(
    ("args", "largest"),
    [
        (("-b", "1G", "-e", "8G", "-f", "2"), 2**33),
        (("-b", "1G", "-e", "10G", "-f", "2"), 2**33),  # the sweep's last step, not -e itself
        (("--minbytes=8", "--maxbytes=128M", "-f2"), 2**27),
        (("-b", "1M", "-e", "10M", "-i", "3M"), 10 * 2**20),
        ((), 32 * 2**20),  # nccl-tests' defaults: -b 32M -e 32M
        (("-e", "lots"), None),
    ],
)
def test_the_sweep_the_arguments_ask_for(args: tuple[str, ...], largest: int | None) -> None:
    assert expected_largest(args) == largest


def test_the_header_states_the_sweep() -> None:
    header = "# nThread 1 nGpus 4 minBytes 8 maxBytes 134217728 step: 8(factor) warmup iters: 5\n"
    assert expected_largest(("-e", "1G"), header) == 2**27


def test_the_old_layout_without_root_and_with_a_float_error_is_read_by_its_header() -> None:
    # Releases before the `root` column (12 fields, `error` the largest error as a float):
    # the columns are found by the header line, not by counting.
    text = (FIXTURES / "all_reduce_perf-old-layout.txt").read_text()
    result = parse_output(text)
    assert [r.size_bytes for r in result.rows] == [2**23, 2**24, 2**25, 2**26, 2**27]
    assert result.largest.out_of_place_busbw == pytest.approx(254.94e9)
    assert result.largest.in_place_busbw == pytest.approx(255.08e9)
    assert result.largest.out_of_place_algbw == pytest.approx(145.68e9)
    assert result.rows[0].wrong is None  # a float error is no count
    assert (result.out_of_bounds, result.wrong_values) == (0, 0)
    assert result.average_busbw == pytest.approx(212.519e9)


def test_the_old_layouts_wrong_values_come_from_its_footer() -> None:
    text = (FIXTURES / "all_reduce_perf-old-layout.txt").read_text()
    broken = text.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 12 FAILED")
    assert parse_output(broken).wrong_values == 12


def test_both_layouts_name_their_columns_in_the_header() -> None:
    from gpuprobe.measure.nccl import header_columns

    new = header_columns((FIXTURES / "all_reduce_perf-8xh100.txt").read_text())
    old = header_columns((FIXTURES / "all_reduce_perf-old-layout.txt").read_text())
    assert new is not None and len(new) == 13 and new[4] == "root" and new[8] == "#wrong"
    assert old is not None and len(old) == 12 and "root" not in old and old[7] == "error"


def test_the_11_column_layout_without_redop_is_read_by_its_header() -> None:
    # nccl-tests before 2021 printed no `redop` (nor `root`) for the collectives that take
    # none (all_gather_perf, alltoall_perf): `print_header` with "size", "count", "type",
    # then time, algbw, busbw and a float error twice, rows `%12li  %12li  %6s` and
    # `  %7s  %6.2f  %6.2f  %5.0le` out of place and in place.
    from gpuprobe.measure.nccl import header_columns

    text = (FIXTURES / "all_gather_perf-2019-layout.txt").read_text()
    columns = header_columns(text)
    assert columns == ["size", "count", "type"] + 2 * ["time", "algbw", "busbw", "error"]
    result = parse_output(text)
    assert [r.size_bytes for r in result.rows] == [2**25, 2**26, 2**27, 2**28]
    assert result.largest.out_of_place_busbw == pytest.approx(110.18e9)
    assert result.largest.in_place_busbw == pytest.approx(110.41e9)
    assert result.largest.out_of_place_algbw == pytest.approx(125.93e9)
    assert result.rows[0].wrong is None and result.wrong_values == 0
    assert result.average_busbw == pytest.approx(103.85e9)  # both places, every size


@pytest.mark.parametrize(
    ("footer", "average"),
    [
        ("# Avg bus bandwidth    : .", None),  # was ValueError: could not convert '.'
        ("# Avg bus bandwidth    : nan", None),
        ("# Avg bus bandwidth    : 1.2.3", None),
        ("# Avg bus bandwidth    : 1e+400", None),  # past a float: no finite average
        ("# Avg bus bandwidth    : 373.187", 373.187e9),
        ("# Avg bus bandwidth    : 1.5e+02", 150e9),
    ],
)
def test_a_footer_that_is_no_number_is_no_average(footer: str, average: float | None) -> None:
    text = (FIXTURES / "all_reduce_perf-8xh100.txt").read_text()
    lines = [footer if "Avg bus bandwidth" in line else line for line in text.splitlines()]
    result = parse_output("\n".join(lines))
    assert result.average_busbw == (pytest.approx(average) if average else None)
    assert result.largest.size_bytes == 2**33  # the rows are read as before


def test_a_one_byte_step_up_to_a_terabyte_is_counted_not_walked() -> None:
    """`-b 1 -e 1000000000000 -i 1` hung the parser (10^12 steps walked one by one)."""
    started = time.monotonic()
    assert expected_largest(("-b", "1", "-e", "1000000000000", "-i", "1")) == 10**12
    header = "# nThread 1 nGpus 8 minBytes 1 maxBytes 1000000000000 step: 1(bytes) warmup\n"
    assert expected_largest((), header) == 10**12
    assert expected_largest(("-b", "5", "-e", "1000000000000", "-i", "7")) == (
        5 + (10**12 - 5) // 7 * 7
    )
    assert expected_largest(("-b", "1", "-e", "1000000000000000000", "-f", "2")) == 2**59
    assert expected_largest(("-b", "8", "-e", "8", "-i", "0")) == 8
    assert time.monotonic() - started < 1.0
