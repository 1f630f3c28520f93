"""Starting the agent and node_exporter side by side for the benchmarks (loopback only)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "tests" / "snapshots" / "synthetic-h100-8gpu-healthy"


def free_port() -> int:
    """A port free on loopback now (node_exporter cannot report an ephemeral one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_agent(
    interval: float, snapshot: Path = SNAPSHOT, extra: Sequence[str] = ()
) -> tuple[subprocess.Popen[str], int]:
    """`gpuprobe serve` on the snapshot (and `extra` flags); returns the process and its
    metrics port."""
    proc, _, metrics_port = serve(["--interval", str(interval), *extra], snapshot)
    return proc, metrics_port


def serve(
    flags: Sequence[str] = (), snapshot: Path = SNAPSHOT, python: str = sys.executable
) -> tuple[subprocess.Popen[str], int, int]:
    """`gpuprobe serve` on the snapshot with `flags`, on ephemeral loopback ports, once it
    listens: the process, its gRPC port and its metrics port."""
    proc = subprocess.Popen(
        [
            *(python, "-m", "gpuprobe", "serve", "--snapshot", str(snapshot)),
            *("--grpc-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", *flags),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        entry = json.loads(line)
        if entry.get("msg") == "listening":
            # Keep reading its log, so a full pipe never blocks the agent.
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, int(entry["grpc_port"]), int(entry["metrics_port"])
    raise RuntimeError("gpuprobe serve exited before listening")


def start_node_exporter() -> tuple[subprocess.Popen[bytes], int]:
    """node_exporter (Debian's prometheus-node-exporter) with its default collectors."""
    binary = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if binary is None:
        raise SystemExit("prometheus-node-exporter is not installed")
    port = free_port()
    proc = subprocess.Popen(
        [binary, f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_http(f"http://127.0.0.1:{port}/metrics")
    return proc, port


def wait_http(url: str, timeout: float = 20) -> None:
    """Wait until `url` answers."""
    end = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop(proc: subprocess.Popen[str] | subprocess.Popen[bytes]) -> int:
    """SIGTERM and wait; returns the exit status."""
    proc.terminate()
    return proc.wait(timeout=15)
