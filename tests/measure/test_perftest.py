"""perftest's ib_write_bw: its table in both units, its JSON, and its failures."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from conftest import ROOT, require_tool
from gpuprobe.measure.perftest import (
    MIB,
    PerftestError,
    PerftestOptions,
    is_local,
    parse_json,
    parse_output,
    probe,
    run_client,
    start_server,
    stop,
)

FIXTURES = ROOT / "tests" / "fixtures" / "perftest"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_gbits_table_with_a_warning_inside_it() -> None:
    result = parse_output((FIXTURES / "ib_write_bw-ndr-gbits.txt").read_text())
    assert result.message_bytes == 8388608
    assert result.iterations == 58400
    assert result.average_bytes_per_second == pytest.approx(391.87e9 / 8)
    assert result.average_gbps == pytest.approx(391.87)
    assert result.peak_bytes_per_second is None  # duration mode measures no peak
    assert result.message_rate_mpps == pytest.approx(0.005839)


def test_mib_table() -> None:
    result = parse_output((FIXTURES / "ib_write_bw-hdr-mibs.txt").read_text())
    assert result.average_bytes_per_second == pytest.approx(23381.45 * MIB)
    assert result.peak_bytes_per_second == pytest.approx(23387.91 * MIB)
    assert result.average_gbps == pytest.approx(196.14, abs=0.01)


def test_json_report() -> None:
    result = parse_json((FIXTURES / "ib_write_bw-out.json").read_text(), gbits=True)
    assert result.average_bytes_per_second == pytest.approx(391.87e9 / 8)
    assert result.peak_bytes_per_second is None
    assert result.iterations == 58400
    with pytest.raises(PerftestError, match="unreadable perftest JSON"):
        parse_json('{"results": {}}', gbits=True)


def test_no_device_output_says_so() -> None:
    with pytest.raises(PerftestError) as exc:
        parse_output((FIXTURES / "ib_write_bw-no-device.txt").read_text())
    assert str(exc.value) == "ib_write_bw: Unable to find the Infiniband/RoCE device"


def test_options_make_the_documented_command_line() -> None:
    options = PerftestOptions("mlx5_0", port=18600, gid_index=3, queue_pairs=2)
    assert options.arguments() == [
        "ib_write_bw",
        "-d",
        "mlx5_0",
        "-p",
        "18600",
        "-s",
        "8388608",
        "-D",
        "10",
        "-q",
        "2",
        "-F",
        "--report_gbits",
        "-x",
        "3",
    ]


def test_missing_binary_is_a_clear_error() -> None:
    options = PerftestOptions("mlx5_0", binary="ib_write_bw_not_installed")
    with pytest.raises(PerftestError, match="is not installed"):
        run_client(options, "127.0.0.1", timeout=5)


def test_real_perftest_without_an_rdma_device_fails_clearly_and_fast() -> None:
    require_tool("ib_write_bw")
    with pytest.raises(PerftestError, match=r"Did not detect devices|Unable to find"):
        run_client(PerftestOptions("mlx5_0", duration_seconds=1), "127.0.0.1", timeout=20)


def test_the_probe_finds_no_device_before_any_peer_is_asked() -> None:
    require_tool("ib_write_bw")
    with pytest.raises(PerftestError) as raised:
        probe(PerftestOptions("mlx5_0", port=free_port()))
    assert str(raised.value) == "ib_write_bw: Unable to find the Infiniband/RoCE device"
    assert is_local(str(raised.value))
    with pytest.raises(PerftestError, match="is not installed") as missing:
        probe(PerftestOptions("mlx5_0", binary="ib_write_bw_not_installed"))
    assert is_local(str(missing.value))
    assert not is_local("ib_write_bw: Couldn't connect to 10.0.0.8:18515")


def test_the_probe_passes_a_server_still_waiting_for_its_peer(tmp_path: Path) -> None:
    # A stand-in that opened "its device" and waits, as ib_write_bw's server side does.
    waiting = tmp_path / "ib_write_bw"
    waiting.write_text("#!/bin/sh\nexec sleep 30\n")
    waiting.chmod(0o755)
    started = time.monotonic()
    probe(PerftestOptions("mlx5_0", binary=str(waiting)), wait=0.3)
    assert time.monotonic() - started < 3


def test_newer_perftest_names_its_unit_mib() -> None:
    # Newer perftest heads its columns [MiB/sec] (older ones said [MB/sec] for the same unit);
    # the fixture is written after its published output (no such host here).
    result = parse_output((FIXTURES / "ib_write_bw-mibs-synthetic.txt").read_text())
    assert result.message_bytes == 8388608 and result.iterations == 5000
    assert result.average_bytes_per_second == 46557.03 * 2**20
    assert result.peak_bytes_per_second == 46567.34 * 2**20
    assert result.average_gbps == pytest.approx(390.55, abs=0.01)
    assert result.message_rate_mpps == 0.005820


def test_a_server_side_that_exits_says_why_and_one_that_listens_is_handed_back(
    tmp_path: Path,
) -> None:
    failing = tmp_path / "failing"
    failing.write_text(
        "#!/bin/sh\necho ' Couldn'\"'\"'t get context for the device mlx5_9'\nexit 1\n"
    )
    failing.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(PerftestError) as raised:
        start_server(PerftestOptions("mlx5_9", binary=str(failing)), wait=5)
    assert time.monotonic() - started < 3  # an exit ends the wait at once
    assert str(raised.value) == "ib_write_bw: Couldn't get context for the device mlx5_9"
    assert is_local(str(raised.value))
    waiting = tmp_path / "waiting"
    waiting.write_text("#!/bin/sh\nexec sleep 30\n")
    waiting.chmod(0o755)
    server = start_server(PerftestOptions("mlx5_0", binary=str(waiting)), wait=0.3)
    try:
        assert server.poll() is None
    finally:
        stop(server)
    assert server.returncode is not None


def client_stand_in(tmp_path: Path, offers_json: bool, writes: str | None) -> tuple[str, Path]:
    """A stand-in ib_write_bw client: its help offers --out_json or not; it records its
    arguments, writes `writes` to the --out_json_file it is given (if any) and prints the
    NDR table (391.87 Gb/s)."""
    calls = tmp_path / "calls"
    report = tmp_path / "report.json"
    if writes is not None:
        report.write_text(writes)
    help_line = "      --out_json  Save the report in a json file" if offers_json else "usage"
    binary = tmp_path / "ib_write_bw"
    binary.write_text(
        "#!/bin/sh\n"
        f'[ "$1" = --help ] && exec echo "{help_line}"\n'
        f'echo "$*" > {calls}\n'
        'for a in "$@"; do case "$a" in --out_json_file=*) json=${a#*=};; esac; done\n'
        f'[ -n "$json" ] && [ -f {report} ] && cp {report} "$json"\n'
        f"exec cat {FIXTURES / 'ib_write_bw-ndr-gbits.txt'}\n"
    )
    binary.chmod(0o755)
    return str(binary), calls


def test_the_client_reads_perftests_json_report_where_it_writes_one(tmp_path: Path) -> None:
    json_report = (FIXTURES / "ib_write_bw-out.json").read_text().replace("391.87", "100.00")
    binary, calls = client_stand_in(tmp_path, offers_json=True, writes=json_report)
    result = run_client(PerftestOptions("mlx5_0", binary=binary), "10.0.0.8", timeout=10)
    assert result.average_bytes_per_second == 100e9 / 8  # the JSON's figure, not the table's
    assert "--out_json --out_json_file=" in calls.read_text()


@pytest.mark.parametrize(
    ("offers_json", "writes"), [(False, None), (True, None), (True, '{"results": {}}')]
)
def test_the_table_serves_when_there_is_no_usable_json(
    tmp_path: Path, offers_json: bool, writes: str | None
) -> None:
    binary, calls = client_stand_in(tmp_path, offers_json, writes)
    result = run_client(PerftestOptions("mlx5_0", binary=binary), "10.0.0.8", timeout=10)
    assert result.average_bytes_per_second == 391.87e9 / 8
    assert ("--out_json" in calls.read_text()) is offers_json
