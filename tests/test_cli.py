"""`gpuprobe check` as a real process: output, exit statuses and usage errors."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from conftest import SNAPSHOTS, gpuprobe, schema, snapshot

EXIT = {"OK": 0, "WARNING": 1, "CRITICAL": 2, "UNKNOWN": 3}


def test_live_check_on_a_gpu_less_machine_is_contract_valid() -> None:
    out = gpuprobe("check", "--json", env={"NODE_NAME": "ci-node"})
    report = out.json()
    jsonschema.validate(report, schema("report.schema.json"))
    assert report["node"] == "ci-node"
    codes = {f["code"] for c in report["checks"] for f in c["findings"]}
    assert codes & {"NO_GPU", "DRIVER_NOT_FOUND"}
    assert out.returncode == EXIT[report["status"]]
    driver = next(c for c in report["checks"] if c["name"] == "driver")
    assert {"driver_version", "cuda_driver_version"} <= set(driver["data"])


@pytest.mark.parametrize("name", sorted(p.name for p in SNAPSHOTS.iterdir() if p.is_dir()))
def test_every_snapshot_gives_a_valid_report_and_the_matching_exit(name: str) -> None:
    out = gpuprobe("check", "--json", "--snapshot", snapshot(name))
    report = out.json()
    jsonschema.validate(report, schema("report.schema.json"))
    assert out.returncode == EXIT[report["status"]]
    assert report["node"] == json.loads((SNAPSHOTS / name / "snapshot.json").read_text())["node"]


def test_human_report_shows_status_summary_finding_and_action() -> None:
    out = gpuprobe("check", "--snapshot", snapshot("synthetic-gpu-lost"))
    assert out.returncode == 2
    lines = out.stdout.splitlines()
    assert lines[0].startswith("node synthetic-gpu-lost ")
    assert lines[0].endswith("CRITICAL")
    assert any(line.startswith("CRITICAL  gpus           1 of 8 GPUs lost") for line in lines)
    assert "          CRITICAL GPU_LOST on gpu:5:GPU-5f1c0005-8e2b-4c1d-9a7e-000000000005" in lines
    assert "            action: REBOOT_NODE" in lines
    assert "\033[" not in out.stdout


def test_only_runs_the_named_checks() -> None:
    out = gpuprobe(
        "check", "--json", "--only", "gpus", "--snapshot", snapshot("synthetic-gpu-lost")
    )
    assert [c["name"] for c in out.json()["checks"]] == ["gpus"]


def test_expect_gpus_and_node_name_flags() -> None:
    healthy = snapshot("synthetic-h100-8gpu-healthy")
    assert gpuprobe("check", "--snapshot", healthy, "--expect-gpus", "8").returncode == 0
    out = gpuprobe(
        "check", "--json", "--snapshot", healthy, "--expect-gpus", "9", "--node-name", "n9"
    )
    assert out.returncode == 2
    assert out.json()["node"] == "n9"


def test_config_file_is_applied(tmp_path: Path) -> None:
    cfg = tmp_path / "gpuprobe.yaml"
    cfg.write_text("driver:\n  required_cuda: ['13.0']\n")
    out = gpuprobe(
        "check", "--json", "--snapshot", snapshot("synthetic-driver-too-old"), "--config", str(cfg)
    )
    assert out.returncode == 2
    driver = out.json()["checks"][0]
    assert [f["code"] for f in driver["findings"]] == ["DRIVER_TOO_OLD"]


def corrupt_snapshot(tmp_path: Path) -> str:
    path = tmp_path / "corrupt"
    path.mkdir()
    (path / "nvml.json").write_text('{"format": 1, "calls": [{"fn": "nvmlX"')
    return str(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["check", "--bogus"], "unrecognized arguments: --bogus"),
        (["check", "--only", "driver,warp"], "unknown check 'warp'"),
        (["check", "--only", ","], "names no check"),
        (["check", "--expect-gpus", "many"], "not a whole number"),
        (["check", "--snapshot", "/nonexistent/snap"], "/nonexistent/snap: not a directory"),
        (["check", "--config", "/nonexistent.yaml"], "config /nonexistent.yaml: No such file"),
        (["check", "--root", "/nonexistent"], "--root /nonexistent: not a directory"),
        (["check", "--snapshot", "CORRUPT"], "nvml.json: line 1 column"),
        (["check", "--snapshot", "CORRUPT", "--root", "/tmp"], "exclude each other"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "required: command"),
    ],
)
def test_usage_errors_exit_64_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    args = [corrupt_snapshot(tmp_path) if a == "CORRUPT" else a for a in args]
    out = gpuprobe(*args)
    assert out.returncode == 64
    assert out.stdout == ""
    assert len(out.stderr.splitlines()) == 1, out.stderr
    assert message in out.stderr
    assert out.stderr.startswith("gpuprobe: ")


def test_help_and_version() -> None:
    out = gpuprobe("--help")
    assert out.returncode == 0
    assert "check" in out.stdout and "capture" in out.stdout
    assert gpuprobe("--version").stdout.startswith("gpuprobe ")


def on_a_terminal(*args: str, no_color: bool) -> str:
    """What `gpuprobe` prints when its stdout is a terminal (a pseudo-terminal here)."""
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    if no_color:
        env["NO_COLOR"] = "1"
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "gpuprobe", *args],
            stdout=follower,
            stderr=subprocess.PIPE,
            env=env,
            timeout=60,
            check=False,
        )
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    assert proc.returncode == 2, proc.stderr
    return b"".join(chunks).decode()


def test_colour_only_on_a_terminal_and_never_with_no_color() -> None:
    lost = snapshot("synthetic-gpu-lost")
    coloured = on_a_terminal("check", "--snapshot", lost, no_color=False)
    assert coloured.splitlines()[0].endswith("\033[31mCRITICAL\033[0m")
    assert "\033[32mOK      \033[0m" in coloured  # a check that passed, in green
    plain = on_a_terminal("check", "--snapshot", lost, no_color=True)
    assert "\033[" not in plain
    assert plain.splitlines()[0].endswith("  CRITICAL")
