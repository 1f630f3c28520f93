"""The synthetic spot and maintenance snapshots replay to their exact findings, each naming
every GPU pod of the node."""

from __future__ import annotations

import pytest

from conftest import snapshot
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.registry import CHECKS
from gpuprobe.config import Config
from gpuprobe.host import snapshot_host
from gpuprobe.pipeline import run_checks

PODS = [
    ("inference", "vllm-7d9f8-kq2xp"),
    ("inference", "vllm-7d9f8-mw5tz"),
    ("ml-team", "llama-pretrain-0"),
    ("research", "notebook-alice"),
]


@pytest.mark.parametrize(
    ("name", "expected", "termination"),
    [
        (
            "synthetic-aws-spot-interruption",
            [
                (
                    "NODE_PREEMPTION_NOTICE",
                    "CRITICAL",
                    "spot terminate at 2026-11-29T21:02:00Z (in 120 s)",
                ),
                ("NODE_REBALANCE_RECOMMENDED", "WARNING", "rebalance"),
            ],
            "2026-11-29T21:02:00Z",
        ),
        (
            "synthetic-gce-maintenance",
            [("NODE_MAINTENANCE_SCHEDULED", "WARNING", "TERMINATE_ON_HOST_MAINTENANCE")],
            None,
        ),
        (
            "synthetic-azure-preempt",
            [
                (
                    "NODE_PREEMPTION_NOTICE",
                    "CRITICAL",
                    "Preempt Scheduled "
                    "(C7061BAC-AFDC-4513-B24B-AA5F13A16123) at 2026-11-29T21:00:30Z (in 30 s)",
                )
            ],
            "2026-11-29T21:00:30Z",
        ),
    ],
)
def test_notices_replay_with_their_pods(
    name: str, expected: list[tuple[str, str, str]], termination: str | None
) -> None:
    report = run_checks(snapshot_host(snapshot(name)), Config(), ["workloads", "lifecycle"])
    result = report.check("lifecycle")
    assert result is not None
    assert [(f.code, f.severity.value) for f in result.findings] == [e[:2] for e in expected]
    for finding, (_, _, words) in zip(result.findings, expected, strict=True):
        assert words in finding.message
        assert [(p.namespace, p.pod) for p in finding.pods] == PODS
    assert result.data.get("termination_time") == termination
    assert result.data["graceful_shutdown"]["state"] == "enabled"


def test_a_spot_node_without_graceful_shutdown() -> None:
    host = snapshot_host(snapshot("synthetic-graceful-shutdown-disabled"))
    result = CHECKS["lifecycle"].run(CheckContext(host), Config())
    assert result.status.value == "WARNING"
    assert [(f.code, f.resource, f.action.value) for f in result.findings] == [
        ("GRACEFUL_SHUTDOWN_DISABLED", "file:/var/lib/kubelet/config.yaml", "FIX_CONFIG")
    ]
    assert result.summary == "AWS: no preemption, maintenance or rebalance notice"


def test_a_snapshot_without_lifecycle_json_on_a_cloud_is_unknown(tmp_path: object) -> None:
    host = snapshot_host(snapshot("synthetic-aws-spot-interruption"))
    host.metadata = type(host.metadata)()  # as if the snapshot had no lifecycle.json
    result = CHECKS["lifecycle"].run(CheckContext(host), Config())
    assert result.status.value == "UNKNOWN"
    assert result.summary == (
        "AWS notices unknown: PUT /latest/api/token: PUT /latest/api/token is not recorded in "
        "the snapshot (no lifecycle.json)"
    )
