"""The daemon stands without its faces: `Daemon` alone runs its rounds into the store,
re-runs a woken check, and stops, with no port bound and nothing of `gpuprobe.serve` loaded
for it (the faces only read its store and ask its scheduler)."""

from __future__ import annotations

import subprocess
import sys
import time

from conftest import ROOT, snapshot
from gpuprobe.checks.registry import CHECKS
from gpuprobe.config import Config, ServeConfig
from gpuprobe.daemon.core import Daemon
from gpuprobe.host import snapshot_host
from gpuprobe.pipeline import run_checks
from serving import wait_for


def test_the_daemon_alone_makes_the_report_check_makes_and_re_runs_a_woken_check() -> None:
    host = snapshot_host(snapshot("synthetic-h100-8gpu-healthy"))
    names = [n for n in CHECKS if not CHECKS[n].active]
    config = Config(serve=ServeConfig(interval_seconds=3600))
    daemon = Daemon(host, config, names)
    assert daemon.sinks() == [] and daemon.kube is None  # no Kubernetes: no effects loop
    daemon.start()
    try:
        report = wait_for(lambda: daemon.store.current().report)
        once = run_checks(snapshot_host(snapshot("synthetic-h100-8gpu-healthy")), config, names)
        assert [(c.name, c.status, c.findings) for c in report.checks] == [
            (c.name, c.status, c.findings) for c in once.checks
        ]
        daemon.signals.wake(["gpus"], "a test")
        wait_for(lambda: daemon.signals.reruns.get("gpus") == 1)
        assert daemon.store.current().runs["gpus"] == 2
    finally:
        daemon.stop()
        daemon.finish(time.monotonic() + 2.0)
    assert daemon.stopping.is_set()


def test_the_daemon_loads_none_of_the_faces() -> None:
    code = (
        "import sys, gpuprobe.daemon.core, gpuprobe.daemon.links\n"
        "print(sorted(m for m in sys.modules if m.startswith('gpuprobe.serve')))\n"
    )
    env = {"PYTHONPATH": str(ROOT / "agent")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "[]\n"
