"""Shared test helpers: snapshot paths, the CLI as a real process, and required tools."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = ROOT / "tests" / "snapshots"
SCHEMAS = ROOT / "tests" / "schema"
REQUIRE_ALL = os.environ.get("GPUPROBE_REQUIRE_ALL") == "1"


def require(condition: bool, why: str) -> None:
    """Skip when `condition` fails, or fail under GPUPROBE_REQUIRE_ALL=1 (as CI runs)."""
    if condition:
        return
    if REQUIRE_ALL:
        pytest.fail(f"required for this test: {why}")
    pytest.skip(why)


def require_tool(name: str) -> str:
    """The path of a command-line tool the test needs."""
    path = shutil.which(name)
    require(path is not None, f"{name} is not installed")
    assert path is not None
    return path


def require_root() -> None:
    """The test needs root (network namespaces, mounts)."""
    require(os.geteuid() == 0, "needs root")


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory with a short path (unix socket paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="gp-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class Completed:
    """A finished gpuprobe process."""

    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def gpuprobe(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Completed:
    """Run the real `gpuprobe` command (as `python -m gpuprobe`) and wait for it."""
    full_env = {**os.environ, "NO_COLOR": "1", **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "gpuprobe", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        check=False,
    )
    return Completed(proc.returncode, proc.stdout, proc.stderr)


def snapshot(name: str) -> str:
    """The path of a committed snapshot."""
    path = SNAPSHOTS / name
    assert path.is_dir(), f"no snapshot {name}"
    return str(path)


def schema(name: str) -> dict[str, Any]:
    """A JSON Schema of the contract."""
    return json.loads((SCHEMAS / name).read_text())  # type: ignore[no-any-return]
