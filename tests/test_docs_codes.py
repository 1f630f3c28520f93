"""Every finding code the agent raises is documented, and so are the checks' data keys."""

from __future__ import annotations

import re

import pytest

from conftest import ROOT
from helpers import config, run_check

CHECKS_DOC = (ROOT / "docs/checks.md").read_text()
CODE = re.compile(r'Finding\(\s*"([A-Z_]+)"')


def raised_codes() -> set[str]:
    return {
        code
        for path in (ROOT / "agent/gpuprobe").rglob("*.py")
        for code in CODE.findall(path.read_text())
    }


def test_every_raised_code_has_a_row_in_the_code_table() -> None:
    missing = sorted(c for c in raised_codes() if f"| `{c}` |" not in CHECKS_DOC)
    assert missing == []


@pytest.mark.parametrize(
    ("check", "snapshot_name"),
    [
        ("toolkit", "synthetic-h100-k8s-containerd-healthy"),
        ("cdi", "synthetic-h100-k8s-containerd-healthy"),
        ("device_plugin", "synthetic-h100-k8s-containerd-healthy"),
        ("sharing", "synthetic-h100-k8s-containerd-healthy"),
        ("network", "synthetic-ndr-fabric-healthy"),
        ("rdma", "synthetic-ndr-fabric-healthy"),
        ("xid", "synthetic-nvml-critical-events"),
        ("workloads", "synthetic-k8s-mig-mixed"),
        ("pods", "synthetic-pods-log-signatures"),
    ],
)
def test_data_keys_are_documented_in_the_checks_section(check: str, snapshot_name: str) -> None:
    section = CHECKS_DOC.split(f"## Check `{check}`", 1)[1].split("\n## ", 1)[0]
    cfg = config(device_plugin={"config_file": str(ROOT / "tests/fixtures/device_plugin/mps.yaml")})
    data = run_check(check, snapshot_name, cfg).data
    assert sorted(k for k in data if f"`{k}`" not in section) == []
