"""`gpuprobe check` wall time, this tree against an earlier revision's, in one hyperfine run.

    .venv/bin/python bench/check_wall_time.py --before 928624c
    .venv/bin/python bench/check_wall_time.py --before main --snapshot synthetic-xid-critical

The revision's tree is checked out with `git worktree add --detach` into a temporary
directory, removed again (`git worktree remove`, then the directory) on every way out: a
finished run, a failed one, Ctrl-C or SIGTERM (held back while git adds or removes the
tree). For each snapshot (from this tree, so both trees replay the same node; default
`synthetic-h100-8gpu-healthy`) one hyperfine run times `python -m gpuprobe check --snapshot S
--json` with each tree's `agent/` on PYTHONPATH and the same interpreter (this one), with
`--warmup` warm-ups and `--runs` runs each; a check's exit status (1 or 2 with findings) is
not a failure (`-i`). Prints one JSON object: per snapshot, before and after mean and
standard deviation in milliseconds, and after / before with its error (as hyperfine
propagates it). Needs hyperfine and git on PATH.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = ROOT / "tests" / "snapshots"


STOPPING = {signal.SIGINT, signal.SIGTERM}


@contextmanager
def revision_tree(revision: str) -> Iterator[Path]:
    """The tree of `revision`, checked out in a temporary directory for the block's life.
    Ctrl-C and SIGTERM wait while git adds the tree and while it is taken away again (a git
    killed halfway leaves a locked worktree entry and a half-written tree)."""
    parent = Path(tempfile.mkdtemp(prefix="gpuprobe-before-"))
    tree = parent / "tree"
    try:
        with _signals_held():
            _git("worktree", "add", "--detach", str(tree), revision)
        yield tree
    finally:
        with _signals_held():
            if _git("worktree", "remove", "--force", "--force", str(tree), check=False):
                _git("worktree", "unlock", str(tree), check=False)
            shutil.rmtree(parent, ignore_errors=True)
            _git("worktree", "prune", check=False)


@contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM held back for the block, then delivered."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING)


def _git(*args: str, check: bool = True) -> int:
    """Run git on this repository; its exit status (raises on failure with `check`)."""
    ran = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if check and ran.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {ran.stderr.strip()}")
    return ran.returncode


def check_command(tree: Path, snapshot: Path) -> str:
    """The shell-free command hyperfine runs: one `gpuprobe check` of `tree`'s code."""
    return (
        f"env PYTHONPATH={tree / 'agent'} {sys.executable} -m gpuprobe check "
        f"--snapshot {snapshot} --json"
    )


def measure(before: Path, snapshot: Path, runs: int, warmup: int, out: Path) -> dict[str, Any]:
    """One hyperfine run of both trees' `check` on `snapshot`; their means and the ratio."""
    command = [
        "hyperfine",
        "-N",
        "-i",
        "--style",
        "none",
        "-w",
        str(warmup),
        "-r",
        str(runs),
        "--export-json",
        str(out),
        "-n",
        "before",
        check_command(before, snapshot),
        "-n",
        "after",
        check_command(ROOT, snapshot),
    ]
    # In a session of its own, so that a stop takes hyperfine's running check with it (an
    # orphaned check would write bytecode into the tree being removed).
    hyperfine = subprocess.Popen(command, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        if hyperfine.wait() != 0:
            raise SystemExit(f"hyperfine failed on {snapshot.name} (exit {hyperfine.returncode})")
    finally:
        if hyperfine.poll() is None:
            os.killpg(hyperfine.pid, signal.SIGKILL)
            hyperfine.wait()
    results = {r["command"]: r for r in json.loads(out.read_text())["results"]}
    b, a = results["before"], results["after"]
    ratio = a["mean"] / b["mean"]
    # hyperfine's propagation of the two standard deviations into the ratio's.
    error = ratio * math.sqrt((a["stddev"] / a["mean"]) ** 2 + (b["stddev"] / b["mean"]) ** 2)
    return {
        "snapshot": snapshot.name,
        "runs": runs,
        "before_ms": [round(b["mean"] * 1000, 1), round(b["stddev"] * 1000, 1)],
        "after_ms": [round(a["mean"] * 1000, 1), round(a["stddev"] * 1000, 1)],
        "after_over_before": [round(ratio, 3), round(error, 3)],
    }


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through `revision_tree`'s clean-up


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the git revision to compare against")
    parser.add_argument("--snapshot", action="append", help="a snapshot under tests/snapshots/")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    snapshots = [SNAPSHOTS / name for name in args.snapshot or ["synthetic-h100-8gpu-healthy"]]
    for snapshot in snapshots:
        if not snapshot.is_dir():
            parser.error(f"no snapshot {snapshot.name} under {SNAPSHOTS}")
    signal.signal(signal.SIGTERM, _stop)
    revision = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", args.before],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    after = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with revision_tree(revision) as before, tempfile.TemporaryDirectory() as scratch:
        measured = [
            measure(before, s, args.runs, args.warmup, Path(scratch) / "hyperfine.json")
            for s in snapshots
        ]
    print(json.dumps({"before": revision, "after": f"{after} (and its working tree)",
                      "results": measured}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
