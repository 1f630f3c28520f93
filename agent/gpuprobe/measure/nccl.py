"""nccl-tests (`all_reduce_perf` and friends): run on this node's GPUs, read the result table.

Each result row has 13 fields:

    size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong

(out-of-place, then in-place; bandwidths in GB/s = 1e9 B/s; `#wrong` is `N/A` without
validation). The footer's `# Avg bus bandwidth : X` is the mean over every size, small ones
included, so the node is judged by the bus bandwidth at the largest size instead.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([\d.]+)")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


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

    @property
    def largest(self) -> NcclRow:
        """The row of the largest size: the one to judge the node by."""
        return max(self.rows, key=lambda r: r.size_bytes)

    @property
    def wrong_values(self) -> int:
        """Wrong values over every row (validation errors mean corrupted results)."""
        return sum(r.wrong or 0 for r in self.rows)


def _wrong(token: str) -> int | None:
    return int(token) if token.isdigit() else None


def parse_output(text: str) -> NcclResult:
    """The rows and average of an nccl-tests run; NcclTestError if it printed none."""
    rows = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 13 or line.lstrip().startswith("#"):
            continue
        numeric = [fields[i] for i in (0, 1, 5, 6, 7, 9, 10, 11)]
        if not all(_NUMBER.match(f) for f in numeric):
            continue
        rows.append(
            NcclRow(
                size_bytes=int(fields[0]),
                out_of_place_algbw=float(fields[6]) * 1e9,
                out_of_place_busbw=float(fields[7]) * 1e9,
                in_place_busbw=float(fields[11]) * 1e9,
                wrong=(
                    None
                    if _wrong(fields[8]) is None and _wrong(fields[12]) is None
                    else (_wrong(fields[8]) or 0) + (_wrong(fields[12]) or 0)
                ),
            )
        )
    if not rows:
        last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "no output")
        raise NcclTestError(f"nccl-tests printed no result row ({last})")
    average = _AVG.search(text)
    return NcclResult(tuple(rows), float(average.group(1)) * 1e9 if average else None)


def run(binary: str, gpus: int, args: tuple[str, ...], timeout: float) -> NcclResult:
    """Run `binary -g <gpus> <args>` bounded by `timeout` seconds."""
    command = [binary, "-g", str(gpus), *args]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise NcclTestError(f"{binary} is not there") from None
    except PermissionError:
        raise NcclTestError(f"{binary} is not executable") from None
    except subprocess.TimeoutExpired:
        raise NcclTestError(f"{binary} did not finish within {timeout:g} s") from None
    try:
        return parse_output(done.stdout)
    except NcclTestError:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise NcclTestError(f"{binary} exited {done.returncode}: {tail[0]}") from None
