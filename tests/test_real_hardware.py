"""Snapshots recorded on real hardware (`gpuprobe capture` on the machine named in the
snapshot's folder), replayed: the report is the one the hardware gave, and stays as its golden
file says. Rewrite a golden with GPUPROBE_UPDATE_GOLDEN=1 after an intended change."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from conftest import gpuprobe, schema, snapshot

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("GPUPROBE_UPDATE_GOLDEN") == "1"
RECORDED = ["h200-1gpu-580.159.04"]


# Keys whose values are the replay's own clock: the run's time, timings and accounting spans.
VOLATILE = {"time", "duration_seconds", "since", "idle_seconds"}


def _stable(value: Any) -> Any:
    """The report without the values that change from run to run."""
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


def _verdicts(report: dict[str, Any]) -> dict[str, tuple[str, str, list[str]]]:
    return {
        c["name"]: (c["status"], c["summary"], [f["code"] for f in c["findings"]])
        for c in report["checks"]
    }


@pytest.mark.parametrize("name", RECORDED)
def test_the_replay_gives_the_report_the_hardware_gave(name: str) -> None:
    live = json.loads((Path(snapshot(name)) / "report.json").read_text())
    replay = gpuprobe("check", "--json", "--snapshot", snapshot(name))
    assert replay.returncode == 0, replay.stderr
    report = replay.json()
    jsonschema.validate(report, schema("report.schema.json"))
    replayed = _verdicts(report)
    assert {name: replayed[name] for name in _verdicts(live)} == _verdicts(live)
    golden = GOLDEN / f"{name}.report.json"
    if UPDATE:
        golden.write_text(json.dumps(_stable(report), indent=1, sort_keys=True) + "\n")
    assert _stable(report) == json.loads(golden.read_text())


def test_the_h200_is_seen_as_it_is() -> None:
    report = gpuprobe("check", "--json", "--snapshot", snapshot("h200-1gpu-580.159.04")).json()
    checks = {c["name"]: c for c in report["checks"]}
    driver = checks["driver"]["data"]
    assert (driver["driver_version"], driver["cuda_driver_version"]) == ("580.159.04", "13.0")
    assert driver["kernel_module_type"] == "open"
    (gpu,) = checks["gpus"]["data"]["gpus"]
    assert (gpu["name"], gpu["pci_bus_id"], gpu["memory_total_bytes"]) == (
        "NVIDIA H200",
        "0000:00:06.0",
        150754820096,
    )
    assert (gpu["pcie_link_generation"], gpu["pcie_link_width"]) == (5, 16)
    assert checks["xid"]["summary"] == "no XID errors this boot"
