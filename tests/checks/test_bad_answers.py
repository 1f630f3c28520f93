"""Garbage from NVML, the kernel log or the state file never breaks the health checks."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import snapshot
from gpuprobe.host import snapshot_host
from gpuprobe.host.nvml import COUNTS
from gpuprobe.pipeline import run_checks
from helpers import config

GARBAGE: list[Any] = [
    "x",
    "",
    [],
    {},
    None,
    -1,
    10**12,
    [1],
    [None, "a", {}, 2.5],
    {"a": "b"},
    True,
    1.5,
]


def broken_copy(tmp_path: Path, ret: Any) -> Path:
    """The MIG snapshot with every NVML answer past the device count replaced by `ret`, and
    random bytes for a kernel log."""
    dest = tmp_path / "broken"
    shutil.copytree(snapshot("synthetic-mig-mixed"), dest)
    record = json.loads((dest / "nvml.json").read_text())
    # Counts are held to what hardware can have when the snapshot loads (a count out of
    # range is a SnapshotError, tested in tests/host): garbage there never reaches a check.
    kept = {*COUNTS, "nvmlSystemGetDriverVersion"}
    for call in record["calls"]:
        if call["fn"] not in kept:
            call.pop("error", None)
            call["ret"] = ret
    (dest / "nvml.json").write_text(json.dumps(record))
    noise = random.Random(0).randbytes(64 * 1024)
    (dest / "rootfs/var/log/syslog").write_bytes(noise + b"\nNVRM: Xid (PCI:zz): 79\n" + noise)
    return dest


@pytest.mark.parametrize("ret", GARBAGE, ids=[repr(g)[:20] for g in GARBAGE])
def test_garbage_answers_give_results_not_failures(tmp_path: Path, ret: Any) -> None:
    host = snapshot_host(str(broken_copy(tmp_path, ret)))
    (tmp_path / "state").mkdir()
    (tmp_path / "state/xid-state.json").write_text(
        json.dumps(
            {
                "format": 1,
                "boot_id": "3f0c5a8e-6a1d-4f0b-9a57-2b8c1e7d4f10",
                "cleared": {"GPU-x|48": {"count": "many", "last_seen": 7}},
                "sticky": {"junk": {"gpu": "three", "xid": "z"}, "odd": {"xid": 79, "count": 1}},
            }
        )
    )
    cfg = config(xid={"state_dir": str(tmp_path / "state")})
    report = run_checks(host, cfg, ["gpus", "mig", "xid"])
    failed = [
        (c.name, c.summary)
        for c in report.checks
        if c.findings and c.findings[0].code in ("CHECK_FAILED", "CHECK_TIMEOUT")
    ]
    assert failed == []
    json.dumps(report.to_dict())  # the report stays JSON
