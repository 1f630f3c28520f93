"""bench/check_wall_time.py checks out the earlier revision's tree with `git worktree add` and
removes it on every way out: here, stopped by SIGTERM while hyperfine runs (the real git and
hyperfine), nothing is left in the temporary directory or in git's list of worktrees."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT, require_tool

BENCH = ROOT / "bench" / "check_wall_time.py"


def worktrees() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "list", "--porcelain"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def test_the_before_tree_is_removed_when_the_bench_is_stopped(tmp_path: Path) -> None:
    require_tool("hyperfine")
    require_tool("git")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    bench = subprocess.Popen(
        [sys.executable, str(BENCH), "--before", "HEAD", "--runs", "200", "--warmup", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("gpuprobe-before-*/tree/agent/gpuprobe")):
            assert bench.poll() is None, bench.communicate()
            assert time.monotonic() < deadline, "the revision's tree never appeared"
            time.sleep(0.1)
        assert str(tmp_path) in worktrees()
        time.sleep(1.0)  # into hyperfine's runs
        bench.send_signal(signal.SIGTERM)
        _, err = bench.communicate(timeout=60)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    assert bench.returncode != 0 and b"KeyboardInterrupt" in err
    assert list(tmp_path.iterdir()) == []
    assert str(tmp_path) not in worktrees()
