"""Registered temporary data is removed on every way out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpuprobe import cleanup


def test_remove_all_removes_files_trees_and_runs_callbacks(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    called = []
    cleanup.register(str(f))
    cleanup.register(str(d))
    cleanup.register(str(tmp_path / "never-made"))
    cleanup.on_exit(lambda: called.append(1))
    forget = cleanup.on_exit(lambda: called.append(2))
    forget()
    cleanup.remove_all()
    assert not f.exists() and not d.exists()
    assert called == [1]
    assert cleanup.pending() == []


def test_unregistered_paths_stay(tmp_path: Path) -> None:
    f = tmp_path / "kept"
    f.write_text("x")
    cleanup.register(str(f))
    cleanup.unregister(str(f))
    cleanup.remove_all()
    assert f.exists()


def test_sigterm_removes_what_is_registered(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    script = (
        "import time, pathlib\n"
        "from gpuprobe import cleanup\n"
        f"p = pathlib.Path({str(victim)!r}); p.write_text('x')\n"
        "cleanup.register(str(p)); cleanup.exit_on_signals()\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    assert victim.exists()
    started = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(10) == 143
    assert time.monotonic() - started < 5
    assert not victim.exists()
