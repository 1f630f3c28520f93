"""ruff and mypy hold the code to the house style."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_ruff_lint() -> None:
    out = run("ruff", "check", "agent", "tests", "bench")
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format() -> None:
    out = run("ruff", "format", "--check", "agent", "tests", "bench")
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_strict() -> None:
    out = run("mypy")
    assert out.returncode == 0, out.stdout + out.stderr
