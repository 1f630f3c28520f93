"""What a check's summary line says, held across every committed snapshot."""

from __future__ import annotations

import pytest

from conftest import SNAPSHOTS
from gpuprobe.checks.registry import CHECKS, active
from gpuprobe.config import Config
from gpuprobe.host import snapshot_host
from gpuprobe.pipeline import run_checks
from gpuprobe.report import Status

# Made to hang in NVML: its checks time out, which is not what this test looks at.
HANGS = {"synthetic-nvml-hang"}


@pytest.mark.parametrize(
    "name", sorted(p.name for p in SNAPSHOTS.iterdir() if p.is_dir() and p.name not in HANGS)
)
def test_an_ok_summary_says_what_is_known(name: str) -> None:
    """A check that passed says what it found, never that it does not know (a check that
    cannot judge is UNKNOWN, with a finding that says why)."""
    passive = [c for c in CHECKS if c not in active(CHECKS)]
    report = run_checks(snapshot_host(str(SNAPSHOTS / name)), Config(), passive)
    vague = [
        (c.name, c.summary)
        for c in report.checks
        if c.status == Status.OK and "unknown" in c.summary.lower()
    ]
    assert vague == []
