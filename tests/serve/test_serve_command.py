"""The real `gpuprobe serve` process: golden /metrics on snapshots (node_exporter style),
promtool, /healthz, JSON logs with the bound ports, SIGTERM, and usage errors."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from conftest import gpuprobe, require_tool, snapshot
from gpuprobe.checks.registry import CHECKS
from gpuprobe.client import Client
from serving import LOOPBACK_FLAGS, PASSIVE, serve_process, wait_for

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("GPUPROBE_UPDATE_GOLDEN") == "1"
# Samples whose values change from run to run: their value is replaced, the line kept.
VOLATILE = re.compile(
    r"^(gpuprobe_check_duration_seconds|gpuprobe_check_timestamp_seconds"
    r"|gpuprobe_report_timestamp_seconds)(\{.*\})? .*$"
)


def normalize(text: str) -> str:
    """The scrape without the process_* families and with volatile values blanked."""
    lines = []
    for line in text.splitlines():
        if re.match(r"^(# (HELP|TYPE) )?process_", line):
            continue
        lines.append(VOLATILE.sub(r"\1\2 <volatile>", line))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "name",
    [
        "synthetic-h100-8gpu-healthy",
        "synthetic-gpu-lost",
        "kvm-epyc-nogpu",
        "synthetic-k8s-ecc-on-training-gpu",
        "synthetic-amd-ras-uncorrectable",
        "h200-1gpu-580.159.04",
    ],
)
def test_metrics_match_the_golden_file_and_pass_promtool(name: str) -> None:
    """Rewrite the golden files with GPUPROBE_UPDATE_GOLDEN=1 after an intended change."""
    promtool = require_tool("promtool")
    # The passive checks only: an active check's first round falls at a random point of its
    # jitter window, now and then within this test's seconds.
    with serve_process(
        "--snapshot", snapshot(name), "--interval", "3600", "--only", ",".join(PASSIVE)
    ) as agent:
        text = agent.report_metrics()
    lint = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert lint.returncode == 0 and lint.stdout + lint.stderr == "", lint.stdout + lint.stderr
    golden = GOLDEN / f"{name}.metrics"
    if UPDATE:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(normalize(text))
    assert normalize(text) == golden.read_text(), (
        f"/metrics differs from {golden.name}; if intended, rerun with GPUPROBE_UPDATE_GOLDEN=1"
    )
    assert "process_resident_memory_bytes" in text


def test_logs_are_json_lines_with_the_bound_ports_and_healthz_answers() -> None:
    with serve_process("--snapshot", snapshot("synthetic-gpu-lost"), "--interval", "3600") as agent:
        listening = agent.logs[-1]
        assert listening["level"] == "info"
        assert listening["grpc_port"] == agent.grpc_port > 0
        assert listening["metrics_port"] == agent.metrics_port > 0
        assert listening["node"] == "synthetic-gpu-lost"
        assert listening["checks"] == list(CHECKS)
        assert (listening["tls"], listening["token"], listening["open_mode"]) == (
            "none",
            False,
            False,
        )
        wait_for(lambda: any(e["msg"] == "report changed" for e in agent.logs))
        changed = next(e for e in agent.logs if e["msg"] == "report changed")
        assert changed["status"] == "CRITICAL"
        assert changed["findings"] == [
            "gpus:GPU_LOST:gpu:5:GPU-5f1c0005-8e2b-4c1d-9a7e-000000000005"
        ]
        status, body = agent.get("/healthz")
        assert status == 200
        lines = body.splitlines()
        assert lines[:3] == ["ok", "node: synthetic-gpu-lost", "status: CRITICAL"]
        assert lines[4:6] == [
            "check driver: OK - driver 550.54.15, CUDA 12.4 (runs toolkits up to 12.4 Update 1)",
            "check gpus: CRITICAL - 1 of 8 GPUs lost",
        ]
        assert [line.split(":")[0] for line in lines[4:]] == [f"check {c}" for c in PASSIVE]
        assert agent.get("/nonesuch")[0] == 404
        code, took = agent.terminate()
    assert code == 0
    assert took < 5
    assert [e["msg"] for e in agent.logs[-2:]] == ["stopping", "stopped"]


def sigterm_caught(pid: int) -> bool:
    """Whether the process has a SIGTERM handler yet (its SigCgt mask in /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    caught = int(re.search(r"^SigCgt:\s*([0-9a-f]+)$", status, re.M).group(1), 16)  # type: ignore[union-attr]
    return bool(caught >> (signal.SIGTERM - 1) & 1)


@pytest.mark.parametrize("delay", [0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.6])
def test_sigterm_while_serve_starts_up_exits_0(delay: float) -> None:
    # From the moment Python runs gpuprobe's code (its first handler), SIGTERM ends serve
    # with 0: while it parses flags, imports gRPC, loads the snapshot or binds its ports.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuprobe",
            "serve",
            *LOOPBACK_FLAGS,
            "--snapshot",
            snapshot("synthetic-h100-8gpu-healthy"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: sigterm_caught(proc.pid) or proc.poll() is not None, every=0.001)
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr


def test_sigterm_during_a_hung_check_exits_0_within_seconds(tmp_path: Path) -> None:
    cfg = tmp_path / "gpuprobe.yaml"
    cfg.write_text("checks:\n  deadline_seconds: 30\n")
    token = tmp_path / "token"
    token.write_text("t0k3n\n")
    with serve_process(
        "--snapshot",
        snapshot("synthetic-nvml-hang"),
        "--config",
        str(cfg),
        "--token-file",
        str(token),
        "--interval",
        "1",
    ) as agent:
        target = agent.grpc_target
        # The gpus check hangs in NVML; a RunChecks call waits on it when SIGTERM comes.
        with Client(target, token="t0k3n") as client:
            future = client._stub.RunChecks.future(
                __import__("gpuprobe.v1.diagnostics_pb2", fromlist=["x"]).RunChecksRequest(),
                timeout=60,
                metadata=[("authorization", "Bearer t0k3n")],
            )
            time.sleep(1.0)
            assert not future.done()
            code, took = agent.terminate()
            with pytest.raises(grpc.RpcError):
                future.result(timeout=10)
    assert code == 0
    assert took < 5
    abandoned = [e for e in agent.logs if e["msg"] == "checks abandoned at shutdown"]
    assert abandoned and abandoned[0]["checks"] == ["gpus"]


def test_the_grpc_port_in_use_is_a_one_line_usage_error() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        out = gpuprobe(
            "serve",
            "--snapshot",
            snapshot("kvm-epyc-nogpu"),
            "--grpc-listen",
            f"127.0.0.1:{port}",
            "--metrics-listen",
            "127.0.0.1:0",
        )
    assert out.returncode == 64
    assert out.stderr == (
        f"gpuprobe: --grpc-listen 127.0.0.1:{port}: cannot listen (Address already in use) "
        "(see gpuprobe serve --help)\n"
    )
    assert len(out.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--grpc-listen", "nonsense"],
            "gpuprobe: 'nonsense' is not HOST:PORT (see gpuprobe serve --help)\n",
        ),
        (
            ["--interval", "0"],
            "gpuprobe: argument --interval: must be above 0: 0 (see gpuprobe serve --help)\n",
        ),
        (
            ["--token-file", "/nonexistent/token"],
            "gpuprobe: --token-file /nonexistent/token: No such file or directory "
            "(see gpuprobe serve --help)\n",
        ),
        (
            ["--tls-cert", "/x"],
            "gpuprobe: --tls-cert and --tls-key go together (see gpuprobe serve --help)\n",
        ),
        (
            ["--only", "nonesuch"],
            f"gpuprobe: unknown check 'nonesuch' (known: {', '.join(CHECKS)}) "
            "(see gpuprobe serve --help)\n",
        ),
    ],
)
def test_bad_flags_are_one_line_usage_errors(args: list[str], message: str) -> None:
    out = gpuprobe("serve", "--snapshot", snapshot("kvm-epyc-nogpu"), *args)
    assert (out.returncode, out.stderr) == (64, message)


def test_a_config_naming_an_unknown_check_interval_is_a_usage_error(tmp_path: Path) -> None:
    cfg = tmp_path / "gpuprobe.yaml"
    cfg.write_text("serve:\n  intervals: {nonesuch: 5}\n")
    out = gpuprobe("serve", "--snapshot", snapshot("kvm-epyc-nogpu"), "--config", str(cfg))
    assert (out.returncode, out.stderr) == (
        64,
        "gpuprobe: serve.intervals: unknown check 'nonesuch' (see gpuprobe serve --help)\n",
    )


def runs(text: str) -> dict[str, float]:
    found = {}
    for line in text.splitlines():
        if line.startswith("gpuprobe_check_runs_total{"):
            found[line.split('"')[1]] = float(line.split()[-1])
    return found


def test_interval_flag_and_per_check_intervals_drive_the_rounds(tmp_path: Path) -> None:
    cfg = tmp_path / "gpuprobe.yaml"
    cfg.write_text("serve:\n  intervals: {driver: 0.3}\n  jitter_fraction: 0\n")
    with serve_process(
        "--snapshot",
        snapshot("synthetic-h100-8gpu-healthy"),
        "--config",
        str(cfg),
        "--interval",
        "3600",
    ) as agent:
        agent.report_metrics()

        def driver_ran_five_times() -> dict[str, float] | None:
            counted = runs(agent.metrics())
            return counted if counted.get("driver", 0) >= 5 else None

        counted = wait_for(driver_ran_five_times)
    assert counted["gpus"] == 1  # --interval 3600: only the first round
