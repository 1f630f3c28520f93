"""A capture keeps what the `pods` check read — the runtimes' OCI specs and the pod logs'
tails under rootfs/ — so replaying the capture judges every container and log the same."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import snapshot
from gpuprobe.capture import prepare_target, write_snapshot
from gpuprobe.config import Config
from gpuprobe.host import recording_host, snapshot_host
from gpuprobe.host.nvml import RecordingNvml, ReplayNvml, load_record
from gpuprobe.pipeline import run_checks
from kubelet_standin import kubelet, state_from_json

NAMES = ["synthetic-pods-log-signatures", "synthetic-pods-crio-require-clauses"]


def test_capture_keeps_specs_and_log_tails_then_replays(short_tmp: Path) -> None:
    for name in NAMES:
        source = Path(snapshot(name))
        root = short_tmp / name / "host"
        shutil.copytree(source / "rootfs", root)
        recorded = json.loads((source / "podresources.json").read_text())
        target = short_tmp / name / "snap"
        with kubelet(root, state_from_json(recorded)):
            host = recording_host(str(root), "gpu-node-3")
            host.nvml = RecordingNvml(ReplayNvml(load_record(str(source / "nvml.json"))))
            live = run_checks(host, Config(), ["pods"])
            write_snapshot(prepare_target(target), host, live)
        specs = sorted(p.relative_to(source) for p in source.glob("rootfs/run/**/config.json"))
        assert specs and specs == sorted(
            p.relative_to(target) for p in target.glob("rootfs/run/**/config.json")
        )
        logs = sorted(p.relative_to(source) for p in source.glob("rootfs/var/log/pods/*/*/*"))
        for log in logs:
            assert (target / log).read_bytes() == (source / log).read_bytes(), log
        replay = run_checks(snapshot_host(str(target)), Config(), ["pods"])
        assert replay.checks[0].data == live.checks[0].data
        assert replay.checks[0].findings == live.checks[0].findings
