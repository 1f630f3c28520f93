"""A snapshot's files are bounded inputs: only regular files are read, each at most 64 MiB;
NaN, Infinity and numbers beyond a float are refused; nesting too deep to parse, counts beyond
any hardware and answers beyond NVML's 64-bit types are clear errors naming the file — never a
hang (a FIFO), a 1.9 GB read (/dev/zero), a RecursionError or a daemon walking 10^7 GPUs."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from conftest import snapshot
from gpuprobe.config import Config
from gpuprobe.errors import SnapshotError
from gpuprobe.host import snapshot_host
from gpuprobe.host.jsonfile import MAX_JSON_BYTES
from gpuprobe.pipeline import run_checks

BASE = "synthetic-ndr-fabric-healthy"  # nvml.json, netlink.json, processes.json, rootfs/


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    target = tmp_path / "snap"
    shutil.copytree(snapshot(BASE), target, symlinks=True)
    return target


def load_within(directory: Path, seconds: float = 5.0) -> object:
    """snapshot_host(directory), failing the test (not hanging it) past `seconds`."""
    outcome: list[object] = []
    thread = threading.Thread(
        target=lambda: outcome.append(_attempt(directory)), daemon=True, name="load"
    )
    thread.start()
    thread.join(seconds)
    assert outcome, f"loading {directory} hung for {seconds} s"
    return outcome[0]


def _attempt(directory: Path) -> object:
    try:
        return snapshot_host(str(directory))
    except Exception as exc:  # the test judges what came out
        return exc


def refusal(directory: Path) -> str:
    outcome = load_within(directory)
    assert isinstance(outcome, SnapshotError), outcome
    assert "\n" not in str(outcome)
    return str(outcome)


def test_a_fifo_as_nvml_json_is_refused_at_once(copy: Path) -> None:
    (copy / "nvml.json").unlink()
    os.mkfifo(copy / "nvml.json")
    assert refusal(copy) == f"{copy}/nvml.json: not a regular file (a FIFO)"


def test_a_snapshot_file_linked_to_dev_zero_is_refused(copy: Path) -> None:
    (copy / "processes.json").unlink()
    (copy / "processes.json").symlink_to("/dev/zero")
    assert refusal(copy) == f"{copy}/processes.json: not a regular file (a character device)"


def test_a_file_over_the_bound_is_refused_before_it_is_read(copy: Path) -> None:
    with open(copy / "netlink.json", "r+b") as f:
        f.truncate(MAX_JSON_BYTES + 1)  # sparse: costs no disk
    started = time.monotonic()
    assert refusal(copy) == f"{copy}/netlink.json: larger than {MAX_JSON_BYTES} bytes"
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"format": 1, "links": [], "x": Infinity}', "Infinity is not a JSON number"),
        ('{"format": 1, "links": [], "x": NaN}', "NaN is not a JSON number"),
        ('{"format": 1, "links": [], "x": -Infinity}', "-Infinity is not a JSON number"),
        ('{"format": 1, "links": [], "x": 1e400}', "1e400 is beyond the range of a number"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"format": 1, "links": [], "x": ' + "7" * 5000 + "}", "Exceeds the limit (4300"),
    ],
)
def test_json_beyond_strict_bounds_is_refused(copy: Path, text: str, message: str) -> None:
    (copy / "netlink.json").write_text(text)
    assert refusal(copy).startswith(f"{copy}/netlink.json: {message}")


def nvml_calls(copy: Path) -> list[dict[str, object]]:
    record = json.loads((copy / "nvml.json").read_text())
    calls: list[dict[str, object]] = record["calls"]
    return calls


def rewrite_nvml(copy: Path, fn: str, ret: object) -> int:
    record = json.loads((copy / "nvml.json").read_text())
    index = next(i for i, c in enumerate(record["calls"]) if c["fn"] == fn)
    record["calls"][index]["ret"] = ret
    (copy / "nvml.json").write_text(json.dumps(record))
    return index


def test_a_device_count_beyond_any_node_is_refused(copy: Path) -> None:
    i = rewrite_nvml(copy, "nvmlDeviceGetCount", 10**7)
    assert refusal(copy) == (
        f"{copy}/nvml.json: calls[{i}]: nvmlDeviceGetCount must answer a count from 0 to 64"
        " (no node has more)"
    )


def test_an_answer_beyond_nvmls_types_is_refused(copy: Path) -> None:
    i = rewrite_nvml(copy, "nvmlDeviceGetPowerUsage", 10**400)
    assert refusal(copy) == (
        f"{copy}/nvml.json: calls[{i}]: nvmlDeviceGetPowerUsage answers a number beyond "
        "NVML's 64-bit types"
    )


def test_a_replay_delay_beyond_an_hour_is_refused(copy: Path) -> None:
    record = json.loads((copy / "nvml.json").read_text())
    record["calls"][0]["delay"] = 1e300  # time.sleep(1e300) raises OverflowError
    (copy / "nvml.json").write_text(json.dumps(record))
    assert refusal(copy) == f"{copy}/nvml.json: calls[0]: delay 1e+300 is over 3600 s"


def test_a_fifo_in_rootfs_costs_no_check_its_deadline(copy: Path) -> None:
    version = copy / "rootfs/proc/driver/nvidia/version"
    version.unlink()
    os.mkfifo(version)  # a reader that opened it would wait for a writer
    host = load_within(copy)
    started = time.monotonic()
    report = run_checks(host, Config(), ["driver"])  # type: ignore[arg-type]
    assert time.monotonic() - started < 2.0
    codes = [f.code for f in report.checks[0].findings]
    assert "CHECK_TIMEOUT" not in codes
