"""The real `gpuprobe check` with workload attribution: live against a kubelet stand-in under
--root, a malformed podresources.json as a usage error, bad workloads settings named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import gpuprobe, snapshot
from gpuprobe.checks.registry import sections
from gpuprobe.config import Config, build
from gpuprobe.errors import ConfigError
from kubelet_standin import kubelet, state_from_json

NAME = "synthetic-k8s-gpus-by-uuid"


def test_check_asks_the_live_kubelet_under_root(short_tmp: Path) -> None:
    recorded = json.loads((Path(snapshot(NAME)) / "podresources.json").read_text())
    with kubelet(short_tmp, state_from_json(recorded)) as state:
        out = gpuprobe("check", "--root", str(short_tmp), "--only", "workloads", "--json")
    assert state.calls == ["List", "GetAllocatableResources"]
    (check,) = out.json()["checks"]
    assert check["data"]["kubelet"] == {
        "socket": "/var/lib/kubelet/pod-resources/kubelet.sock",
        "state": "answered",
        "expected": True,
        "pods": 6,
        "allocatable": {"nvidia.com/gpu": 8},
    }
    # No NVML on this machine: nothing to attribute, and nothing wrong with the kubelet.
    assert check["status"] == "OK" and check["findings"] == []


def test_a_malformed_podresources_file_is_a_one_line_usage_error(tmp_path: Path) -> None:
    target = tmp_path / "snap"
    shutil.copytree(snapshot(NAME), target)
    (target / "podresources.json").write_text('{"list": {"podResources": "nope"}}')
    out = gpuprobe("check", "--snapshot", str(target), "--only", "workloads")
    assert out.returncode == 64
    assert out.stderr.count("\n") == 1 and "podresources.json" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"socket": "kubelet.sock"}, "socket: 'kubelet.sock' is not an absolute host path"),
        ({"timeout_seconds": 0}, "timeout_seconds: 0 must be in (0, 60]"),
        ({"timeout_seconds": float("nan")}, "timeout_seconds: nan is not a finite number"),
        ({"idle_utilization_percent": 101}, "idle_utilization_percent: 101 must be 0 to 100"),
        ({"idle_window_seconds": float("nan")}, "idle_window_seconds: nan is not a finite number"),
        ({"expect_kubelet": "yes"}, "expect_kubelet"),
    ],
)
def test_bad_workloads_settings_are_named(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build(Config, {"workloads": settings}, "test config", sections())
