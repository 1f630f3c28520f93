"""ruff and mypy hold the code to the house style."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, check=False
    )


def test_ruff_lint() -> None:
    out = run("ruff", "check", "agent", "tests", "bench")
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format() -> None:
    out = run("ruff", "format", "--check", "agent", "tests", "bench")
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_strict_from_a_fresh_checkout(tmp_path: Path) -> None:
    """Plain `mypy` in a copy of the checkout: there the package is not the installed one
    (which would hide errors in the generated code the checkout holds)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tmp_path / name)
    out = run("mypy", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("Success: no issues found"), out.stdout
