"""nccl-tests (`all_reduce_perf` and friends): run on this node's GPUs, read the result table.

The table is read by its header line, whose columns differ between releases. Current ones
print 13:

    #  size  count  type  redop  root  time  algbw  busbw #wrong  time  algbw  busbw #wrong

older ones fewer, without `root` (and `redop` for the collectives that take none), with a float
`error` (the largest error seen, `0e+00`) where `#wrong` now counts wrong values:

    #  size  count  type  redop  time  algbw  busbw  error  time  algbw  busbw  error
    #  size  count  type  time  algbw  busbw  error  time  algbw  busbw  error

(the second, 11 columns, is what all_gather_perf and alltoall_perf printed before 2021)

(out-of-place, then in-place; bandwidths in GB/s = 1e9 B/s; `#wrong` and `error` are `N/A`
without validation). A row counts when it has as many fields as the header. Old releases count
wrong values only in the footer's `# Out of bounds values : N OK|FAILED`. The footer's `# Avg bus
bandwidth : X` is the mean over every size, small ones included, so the node is judged by the
bus bandwidth at the largest size instead.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import subprocess
from dataclasses import dataclass

from gpuprobe import cleanup

# The footer's average: a number as printf's %g writes it (`373.187`, `1.2e+03`); anything
# else there (`.`, `nan`) is no average.
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)(?![\w.])")
_OUT_OF_BOUNDS = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)")
# The current layout, for output whose header line is missing.
CURRENT_COLUMNS = ["size", "count", "type", "redop", "root"] + 2 * [
    "time",
    "algbw",
    "busbw",
    "#wrong",
]
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
_SIZE = re.compile(r"(\d+)\s*([kKmMgG])?")
_UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3}
_ROUNDING_SLACK = 4096
_SWEEP = re.compile(r"minBytes (\d+) maxBytes (\d+) step: (\d+)\((factor|bytes)\)")


class NcclTestError(Exception):
    """The nccl-tests binary is missing, failed, timed out, or printed no result."""


@dataclass(frozen=True)
class NcclRow:
    """One size's result: out-of-place and in-place bus bandwidth in bytes/s, wrong values."""

    size_bytes: int
    out_of_place_busbw: float
    in_place_busbw: float
    out_of_place_algbw: float
    wrong: int | None  # None when validation was off (N/A)


@dataclass(frozen=True)
class NcclResult:
    """A whole run: its rows and the footer's average bus bandwidth."""

    rows: tuple[NcclRow, ...]
    average_busbw: float | None
    out_of_bounds: int | None = None  # the footer's count (old releases count only there)

    @property
    def largest(self) -> NcclRow:
        """The row of the largest size: the one to judge the node by."""
        return max(self.rows, key=lambda r: r.size_bytes)

    @property
    def wrong_values(self) -> int:
        """Wrong values over every row (validation errors mean corrupted results); the
        footer's out-of-bounds count where the rows count none (old releases)."""
        if any(r.wrong is not None for r in self.rows):
            return sum(r.wrong or 0 for r in self.rows)
        return self.out_of_bounds or 0


def _wrong(token: str) -> int | None:
    return int(token) if token.isdigit() else None


def header_columns(text: str) -> list[str] | None:
    """The column names of the result table's header line (`#wrong` and `error` as printed),
    or None when the output has no header."""
    for line in text.splitlines():
        if not line.lstrip().startswith("#"):
            continue
        names = line.strip().lstrip("#").split()
        if names[:2] == ["size", "count"] and "busbw" in names:
            return names
    return None


def parse_output(text: str) -> NcclResult:
    """The rows and average of an nccl-tests run, read by its header's columns; NcclTestError
    if it printed none."""
    columns = header_columns(text) or CURRENT_COLUMNS
    at = {name: [i for i, c in enumerate(columns) if c == name] for name in set(columns)}
    times, algbws, busbws = at.get("time", []), at.get("algbw", []), at.get("busbw", [])
    wrongs = at.get("#wrong", []) or at.get("error", [])
    counted = "#wrong" in at
    if len(times) != 2 or len(algbws) != 2 or len(busbws) != 2:
        raise NcclTestError(f"nccl-tests printed a table header gpuprobe cannot read: {columns}")
    numeric = [0, 1, *times, *algbws, *busbws]
    rows = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != len(columns) or line.lstrip().startswith("#"):
            continue
        if not all(_NUMBER.match(fields[i]) for i in numeric):
            continue
        found = [_wrong(fields[i]) for i in wrongs] if counted else []
        rows.append(
            NcclRow(
                size_bytes=int(fields[0]),
                out_of_place_algbw=float(fields[algbws[0]]) * 1e9,
                out_of_place_busbw=float(fields[busbws[0]]) * 1e9,
                in_place_busbw=float(fields[busbws[1]]) * 1e9,
                wrong=None if all(w is None for w in found) else sum(w or 0 for w in found),
            )
        )
    if not rows:
        last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "no output")
        raise NcclTestError(f"nccl-tests printed no result row ({last})")
    average = _AVG.search(text)
    bounds = _OUT_OF_BOUNDS.search(text)
    return NcclResult(
        tuple(rows),
        _average(average.group(1)) if average else None,
        int(bounds.group(1)) if bounds else None,
    )


def _average(text: str) -> float | None:
    """The footer's average bus bandwidth in bytes/s (None when it is no finite number)."""
    value = float(text) * 1e9
    return value if math.isfinite(value) else None


def _size(text: str) -> int | None:
    """A size as nccl-tests parses it: a number with an optional K, M or G (powers of 1024)."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        return None
    return (
        int(match.group(1)) * _UNITS[match.group(2).upper()]
        if match.group(2)
        else int(match.group(1))
    )


def _option(args: tuple[str, ...], short: str, long: str) -> str | None:
    """The last value given to `-x V`, `-xV`, `--long V` or `--long=V` in `args`."""
    value = None
    for i, arg in enumerate(args):
        if arg in (short, long):
            value = args[i + 1] if i + 1 < len(args) else None
        elif arg.startswith(long + "="):
            value = arg[len(long) + 1 :]
        elif arg.startswith(short) and not arg.startswith("--") and len(arg) > len(short):
            value = arg[len(short) :]
    return value


def expected_largest(args: tuple[str, ...], output: str = "") -> int | None:
    """The largest size the sweep reaches, as nccl-tests steps it.

    The sweep is the one the binary's header line states (`minBytes .. maxBytes .. step:
    N(factor|bytes)`), else the one `args` ask for: from `-b` (default 32M), times `-f` when
    above 1, else plus `-i` (default 1M), while at most `-e` (default 32M). None when neither
    can be read (the run then is not held to it).
    """
    header = _SWEEP.search(output)
    if header:
        low, high, step_value = (int(header.group(i)) for i in (1, 2, 3))
        factor, step = (step_value, 0) if header.group(4) == "factor" else (1, step_value)
    else:
        read = [
            _size(_option(args, short, long) or default)
            for short, long, default in (
                ("-b", "--minbytes", "32M"),
                ("-e", "--maxbytes", "32M"),
                ("-i", "--stepbytes", "1M"),
                ("-f", "--stepfactor", "1"),
            )
        ]
        if None in read:
            return None
        low, high, step, factor = (int(v or 0) for v in read)
    if low <= 0 or high < low:
        return None
    if factor <= 1:
        # Added steps: the last one within `high`, counted, not walked (a 1-byte step up to
        # 10^12 is 10^12 steps); no step (0) stays at `low`.
        return low + (high - low) // step * step if step > 0 else low
    size = low
    while size * factor <= high:  # at most 40-odd doublings up to any size
        size *= factor
    return size


def _stop(process: subprocess.Popen[str]) -> None:
    """Kill the binary and every process it started (its own process group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def run(binary: str, gpus: int, args: tuple[str, ...], timeout: float) -> NcclResult:
    """Run `binary -g <gpus> <args>` bounded by `timeout` seconds.

    The binary runs in a process group of its own, killed at the timeout and, through
    `cleanup`, when the agent exits first (SIGTERM, Ctrl-C, a check abandoned at its deadline).
    A run that exits non-zero or stops short of its sweep's largest size failed, whatever
    rows it printed.
    """
    command = [binary, "-g", str(gpus), *args]
    try:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",  # a stray byte (a host or GPU name) is no reason to fail
            start_new_session=True,
        )
    except FileNotFoundError:
        raise NcclTestError(f"{binary} is not there") from None
    except PermissionError:
        raise NcclTestError(f"{binary} is not executable") from None
    forget = cleanup.on_exit(lambda: _stop(process))
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(process)
        process.communicate()
        raise NcclTestError(f"{binary} did not finish within {timeout:g} s") from None
    finally:
        _stop(process)
        forget()
    return _judge(binary, process.returncode, stdout, stderr, expected_largest(args, stdout))


def _judge(
    binary: str, returncode: int, stdout: str, stderr: str, expected: int | None
) -> NcclResult:
    tail = (stderr or stdout).strip().splitlines()[-1:] or ["no output"]
    try:
        result = parse_output(stdout)
    except NcclTestError:
        raise NcclTestError(f"{binary} exited {returncode}: {tail[0]}") from None
    if returncode != 0:
        raise NcclTestError(
            f"{binary} exited {returncode} after {len(result.rows)} sizes "
            f"(up to {result.largest.size_bytes} bytes): {tail[0]}"
        )
    # nccl-tests rounds a size down to whole elements per rank: allow a few KiB short.
    if expected is not None and result.largest.size_bytes < expected - _ROUNDING_SLACK:
        raise NcclTestError(
            f"{binary} stopped at {result.largest.size_bytes} bytes, short of the "
            f"{expected} bytes its sweep asks for (-e)"
        )
    return result
