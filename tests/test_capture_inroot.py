"""A pod log planted as a link out of the host's tree (`0.log -> /etc/shadow`) is read as
the host's path, inside `--root` or a snapshot: capture copies nothing of the agent's own
files, and no line of them reaches the report that GetReport serves."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import snapshot
from gpuprobe.capture import prepare_target, write_snapshot
from gpuprobe.config import Config
from gpuprobe.host import recording_host, snapshot_host
from gpuprobe.host.nvml import RecordingNvml, ReplayNvml, load_record
from gpuprobe.pipeline import run_checks
from kubelet_standin import kubelet, state_from_json

SOURCE = "synthetic-pods-log-signatures"
LOG = "var/log/pods/ml-team_sample-check-0_7c1e003d-2d4b-4a8e-9f3c-00000000003d/samples/0.log"
# A line the pods check would quote as the container's last words, were it read.
LEAKED = (
    "2026-11-29T20:44:00.000100009Z stderr F "
    "CUDA driver version is insufficient for CUDA runtime version AGENT-ONLY-7f3a\n"
)


def every_byte(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file())


@pytest.fixture
def agent_file(short_tmp: Path) -> Path:
    path = short_tmp / "agent-only.log"
    path.write_text(LEAKED)
    return path


@pytest.mark.parametrize("target", ["agent file", "/etc/shadow"])
def test_capture_under_root_keeps_nothing_outside_it(
    short_tmp: Path, agent_file: Path, target: str
) -> None:
    outside = str(agent_file) if target == "agent file" else target
    source = Path(snapshot(SOURCE))
    root = short_tmp / "host"
    shutil.copytree(source / "rootfs", root)
    (root / LOG).unlink()
    (root / LOG).symlink_to(outside)
    snap = short_tmp / "snap"
    with kubelet(root, state_from_json(json.loads((source / "podresources.json").read_text()))):
        host = recording_host(str(root), "gpu-node-3")
        host.nvml = RecordingNvml(ReplayNvml(load_record(str(source / "nvml.json"))))
        live = run_checks(host, Config(), ["pods"])
        write_snapshot(prepare_target(snap), host, live)
    agent_bytes = Path(outside).read_bytes()
    assert agent_bytes not in every_byte(snap)
    assert not (snap / "rootfs" / outside.lstrip("/")).exists()
    assert not (snap / "rootfs" / LOG).exists()  # unreadable on the host: not kept
    report = json.dumps(live.to_dict())
    assert "AGENT-ONLY-7f3a" not in report
    messages = [f.message for f in live.checks[0].findings]
    assert not any("pod ml-team/sample-check-0" in m for m in messages)
    assert any("pod inference/vllm-0" in m for m in messages)  # the others still read


def test_a_snapshot_link_out_of_its_rootfs_is_not_read(short_tmp: Path, agent_file: Path) -> None:
    snap = short_tmp / "snap"
    shutil.copytree(snapshot(SOURCE), snap)
    (snap / "rootfs" / LOG).unlink()
    (snap / "rootfs" / LOG).symlink_to(agent_file)
    report = run_checks(snapshot_host(str(snap)), Config(), ["pods"])
    assert "AGENT-ONLY-7f3a" not in json.dumps(report.to_dict())
    messages = [f.message for f in report.checks[0].findings]
    assert not any("pod ml-team/sample-check-0" in m for m in messages)
    # A link that stays inside the snapshot still reads.
    (snap / "rootfs/var/log/elsewhere.log").write_text(LEAKED.replace("AGENT-ONLY", "INSIDE"))
    (snap / "rootfs" / LOG).unlink()
    (snap / "rootfs" / LOG).symlink_to("/var/log/elsewhere.log")
    report = run_checks(snapshot_host(str(snap)), Config(), ["pods"])
    messages = [f.message for f in report.checks[0].findings]
    assert [m for m in messages if "pod ml-team/sample-check-0" in m and "INSIDE-7f3a" in m]
