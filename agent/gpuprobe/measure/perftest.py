"""RDMA bandwidth with perftest's `ib_write_bw`: run the server and the client, read the result.

Server and client take the same options; the client adds the server's address. The result
table reads

    #bytes  #iterations  BW peak[Gb/sec]  BW average[Gb/sec]  MsgRate[Mpps]

with `--report_gbits`, or `[MB/sec]` columns in MiB/s without it ("Report Max/Average BW of
test in Gbit/sec (instead of MiB/sec)", perftest's help); newer perftest names that unit as it
is, `[MiB/sec]` (2^20 bytes per second either way). Warning lines can sit inside the
table. In duration mode (`-D`) perftest measures no peak and prints 0.00 for it, so the peak
is kept only when it was measured. `--out_json --out_json_file F` writes
`{"test_info": {...}, "results": {"MsgSize", "n_iterations", "BW_peak", "BW_average",
"MsgRate"}}` in the same unit as the table; the client asks for it where the installed
perftest offers it (its `--help` names `--out_json`; Debian's 4.5+0.17 does) and reads it
before the table, which stays the fallback.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuprobe.errors import ConfigError

MIB = 1024 * 1024
DEFAULT_PORT = 18515
LISTEN_WAIT = 0.5  # seconds a server side gets to open its device and listen
IB_PORT = 1  # the device port perftest uses without -i (its -i/--ib-port default)
_HEADER = re.compile(
    r"#bytes\s+#iterations\s+BW peak\[(Gb/sec|MB/sec|MiB/sec)\]"
    r"\s+BW average\[(Gb/sec|MB/sec|MiB/sec)\]"
)
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


class PerftestError(Exception):
    """ib_write_bw is missing, found no device, failed, or printed no result."""


@dataclass(frozen=True)
class PerftestResult:
    """One ib_write_bw result row."""

    message_bytes: int
    iterations: int
    average_bytes_per_second: float
    peak_bytes_per_second: float | None
    message_rate_mpps: float

    @property
    def average_gbps(self) -> float:
        """The average in Gb/s, as InfiniBand rates are quoted."""
        return self.average_bytes_per_second * 8 / 1e9


def _to_bytes_per_second(value: float, unit: str) -> float:
    return value * 1e9 / 8 if unit == "Gb/sec" else value * MIB


def parse_output(text: str) -> PerftestResult:
    """The result row of ib_write_bw's text output (the last one, if it printed several)."""
    unit = None
    found = None
    for line in text.splitlines():
        header = _HEADER.search(line)
        if header:
            unit = header.group(2)
            continue
        row = _ROW.match(line) if unit else None
        if row and unit:
            size, iterations, peak, average, rate = row.groups()
            peak_value = float(peak)
            found = PerftestResult(
                int(size),
                int(iterations),
                _to_bytes_per_second(float(average), unit),
                _to_bytes_per_second(peak_value, unit) if peak_value > 0 else None,
                float(rate),
            )
    if found is None:
        raise PerftestError(failure_reason(text))
    return found


def parse_json(text: str, gbits: bool) -> PerftestResult:
    """The result of `--out_json`; `gbits` says whether `--report_gbits` was given."""
    try:
        results = json.loads(text)["results"]
        unit = "Gb/sec" if gbits else "MB/sec"
        peak = float(results.get("BW_peak") or 0)
        return PerftestResult(
            int(results["MsgSize"]),
            int(results.get("n_iterations") or 0),
            _to_bytes_per_second(float(results["BW_average"]), unit),
            _to_bytes_per_second(peak, unit) if peak > 0 else None,
            float(results.get("MsgRate") or 0),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise PerftestError(f"unreadable perftest JSON ({exc})") from None


# What ib_write_bw prints when it cannot use this node's own device: the fault is here, not
# at the other side of the test.
DEVICE_FAULTS = (
    "Unable to find the Infiniband/RoCE device",
    "Did not detect devices",
    "Couldn't get context for the device",
)
NOT_INSTALLED = "is not installed"
LOCAL_FAULTS = (*DEVICE_FAULTS, NOT_INSTALLED)
# The lines worth quoting when ib_write_bw printed no result, the most telling first.
FAILURE_MARKERS = (*DEVICE_FAULTS, "Couldn't connect", "Unable to open", "Failed to")


def is_local(reason: str) -> bool:
    """Whether a failure reason is about this node's own binary or device."""
    return any(marker in reason for marker in LOCAL_FAULTS)


def failure_reason(text: str) -> str:
    """Why ib_write_bw printed no result, from its output."""
    for marker in FAILURE_MARKERS:
        for line in text.splitlines():
            if marker in line:
                return f"ib_write_bw: {line.strip()}"
    last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "no output")
    return f"ib_write_bw printed no result ({last})"


# Bounds on the RDMA test's parameters (an agent refuses a peer's request beyond them too).
MAX_RDMA_MESSAGE_BYTES = 1024 * 1024 * 1024
MAX_RDMA_QUEUE_PAIRS = 256
# ib_write_bw registers a send and a receive buffer of the message size per queue pair
# (perftest's alloc_ctx: size × 2 × queue pairs): bound what it pins too.
MAX_RDMA_BUFFER_BYTES = 4 * 1024 * 1024 * 1024


def rdma_buffer_bytes(message_bytes: int, queue_pairs: int) -> int:
    """The memory ib_write_bw registers for a test: a send and a receive buffer per QP."""
    return 2 * message_bytes * queue_pairs


@dataclass(frozen=True)
class RdmaTestConfig:
    """How this agent's `ib_write_bw` runs in a mesh RDMA test."""

    # Message size and queue pairs of the tests this agent sends (the peer's server takes
    # them from the request, so both sides agree): perftest's -s and -q.
    message_bytes: int = 8 * MIB
    queue_pairs: int = 1
    # This node's GID index (-x) for RoCE, on both sides of its tests; None: perftest's own
    # choice. RoCEv2 fabrics need the index of the RoCEv2 GID of the routable address.
    gid_index: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.message_bytes <= MAX_RDMA_MESSAGE_BYTES:
            raise ConfigError(
                f"message_bytes: {self.message_bytes} is not between 1 and {MAX_RDMA_MESSAGE_BYTES}"
            )
        if not 1 <= self.queue_pairs <= MAX_RDMA_QUEUE_PAIRS:
            raise ConfigError(
                f"queue_pairs: {self.queue_pairs} is not between 1 and {MAX_RDMA_QUEUE_PAIRS}"
            )
        pinned = rdma_buffer_bytes(self.message_bytes, self.queue_pairs)
        if pinned > MAX_RDMA_BUFFER_BYTES:
            raise ConfigError(
                f"2 × message_bytes × queue_pairs (the buffers ib_write_bw registers): {pinned} "
                f"is more than {MAX_RDMA_BUFFER_BYTES}"
            )
        if self.gid_index is not None and self.gid_index < 0:
            raise ConfigError(f"gid_index: {self.gid_index} is negative")


@dataclass(frozen=True)
class PerftestOptions:
    """The options both sides of an ib_write_bw test share."""

    device: str
    port: int = DEFAULT_PORT
    message_bytes: int = 8 * MIB
    duration_seconds: int = 10
    queue_pairs: int = 1
    gid_index: int | None = None
    binary: str = "ib_write_bw"

    def arguments(self) -> list[str]:
        """The command line, without the server address."""
        args = [
            self.binary,
            "-d",
            self.device,
            "-p",
            str(self.port),
            "-s",
            str(self.message_bytes),
            "-D",
            str(self.duration_seconds),
            "-q",
            str(self.queue_pairs),
            "-F",
            "--report_gbits",
        ]
        if self.gid_index is not None:
            args += ["-x", str(self.gid_index)]
        return args


def test_seconds(seconds: float) -> int:
    """A test's duration as perftest's `-D` takes it: whole seconds, at least one."""
    return max(1, round(seconds))


def _binary(options: PerftestOptions) -> str:
    path = shutil.which(options.binary)
    if path is None:
        raise PerftestError(f"{options.binary} {NOT_INSTALLED} (Debian/Ubuntu package perftest)")
    return path


def start_server(options: PerftestOptions, wait: float = LISTEN_WAIT) -> subprocess.Popen[str]:
    """Start the ib_write_bw server side; the caller bounds and stops it.

    perftest opens the device before it listens for its peer, so a server still running after
    `wait` seconds found its device and is listening; one that exited raises PerftestError
    saying why.
    """
    _binary(options)
    process = subprocess.Popen(
        options.arguments(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        process.wait(wait)
    except subprocess.TimeoutExpired:
        return process
    raise PerftestError(failure_reason(stop(process)))


def probe(options: PerftestOptions, wait: float = LISTEN_WAIT) -> None:
    """Raise PerftestError unless ib_write_bw can open `options.device` on this node: a
    server side started on `options.port` (see `start_server`), then stopped."""
    stop(start_server(options, wait))


_WRITES_JSON: dict[str, bool] = {}


def writes_json(binary: str) -> bool:
    """Whether this perftest binary offers `--out_json` (its help names it). A help that
    could not be read says no for now, and is asked again next time."""
    if binary in _WRITES_JSON:
        return _WRITES_JSON[binary]
    try:
        done = subprocess.run(
            [binary, "--help"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    _WRITES_JSON[binary] = offered = "--out_json" in done.stdout + done.stderr
    return offered


def run_client(options: PerftestOptions, server: str, timeout: float) -> PerftestResult:
    """Run the client side toward `server`, bounded by `timeout` seconds; the result from
    perftest's JSON report where it writes one, else from its table."""
    binary = _binary(options)
    with tempfile.TemporaryDirectory(prefix="gpuprobe-perftest-") as scratch:
        report = Path(scratch) / "result.json"
        extra = ["--out_json", f"--out_json_file={report}"] if writes_json(binary) else []
        try:
            done = subprocess.run(
                [*options.arguments(), *extra, server],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise PerftestError(f"ib_write_bw did not finish within {timeout:g} s") from None
        if extra and report.is_file():
            try:
                return parse_json(report.read_text(errors="replace"), gbits=True)
            except PerftestError:
                pass  # a partial or odd report: the table says the same
    return parse_output(done.stdout + done.stderr)


def stop(process: subprocess.Popen[Any], grace: float = 2.0) -> str:
    """Stop a server process (terminate, then kill) and return what it printed."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    out = process.stdout.read() if process.stdout else ""
    return str(out or "")
