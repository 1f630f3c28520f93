"""`gpuprobe capture` on a spot node keeps the metadata service's answers (lifecycle.json),
never its session token, and the replay gives the live findings."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import gpuprobe
from metadata_standins import ImdsStandIn, running


@pytest.fixture
def imds() -> Iterator[ImdsStandIn]:
    with running(ImdsStandIn) as service:
        yield service


def test_capture_records_the_answers_and_the_replay_gives_the_same_findings(
    tmp_path: Path, imds: ImdsStandIn
) -> None:
    root = tmp_path / "host"
    (root / "sys/class/dmi/id").mkdir(parents=True)
    (root / "sys/class/dmi/id/sys_vendor").write_text("Amazon EC2\n")
    (root / "sys/class/dmi/id/product_name").write_text("p5.48xlarge\n")
    (root / "var/lib/kubelet").mkdir(parents=True)
    (root / "var/lib/kubelet/config.yaml").write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "cgroupDriver: systemd\n"
    )
    config = tmp_path / "gpuprobe.yaml"
    config.write_text(f"lifecycle:\n  endpoint: {imds.url}\n")
    # Two minutes ahead, as AWS gives it (a time years away is no notice: a bad answer).
    when = (datetime.now(UTC) + timedelta(seconds=120)).strftime("%Y-%m-%dT%H:%M:%SZ")
    imds.spot = {"action": "terminate", "time": when}
    target = tmp_path / "snap"
    out = gpuprobe(
        "capture",
        str(target),
        "--root",
        str(root),
        "--config",
        str(config),
        "--node-name",
        "spot-1",
    )
    assert out.returncode == 0, out.stderr
    recorded = json.loads((target / "lifecycle.json").read_text())
    assert [(a["method"], a["path"], a["status"]) for a in recorded["answers"]] == [
        ("PUT", "/latest/api/token", 200),
        ("GET", "/latest/meta-data/spot/instance-action", 200),
        ("GET", "/latest/meta-data/events/recommendations/rebalance", 404),
        ("GET", "/latest/meta-data/events/maintenance/scheduled", 200),
    ]
    token = next(iter(imds.tokens))
    assert token not in (target / "lifecycle.json").read_text()
    assert (target / "rootfs/sys/class/dmi/id/sys_vendor").read_text() == "Amazon EC2\n"
    live = json.loads((target / "report.json").read_text())
    replay = gpuprobe("check", "--json", "--only", "lifecycle", "--snapshot", str(target))
    assert replay.returncode == 2, replay.stderr
    again = replay.json()["checks"][0]
    before = next(c for c in live["checks"] if c["name"] == "lifecycle")
    assert [(f["code"], f["severity"], f["resource"]) for f in again["findings"]] == [
        ("NODE_PREEMPTION_NOTICE", "CRITICAL", "node"),
        ("GRACEFUL_SHUTDOWN_DISABLED", "WARNING", "file:/var/lib/kubelet/config.yaml"),
    ]
    assert [f["code"] for f in again["findings"]] == [f["code"] for f in before["findings"]]
    assert again["data"]["termination_time"] == when
    assert len(imds.seen()) == 4  # the replay asked nobody
