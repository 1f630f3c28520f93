"""The XID catalog: NVIDIA's immediate actions as severities and repair actions."""

from __future__ import annotations

import pytest

from gpuprobe.gpu.xid_catalog import CATALOG, classify
from gpuprobe.report import Action, Severity


@pytest.mark.parametrize("xid", [13, 31, 43, 45])
def test_application_xids_are_warnings_to_restart_the_app(xid: int) -> None:
    info = classify(xid)
    assert (info.severity, info.action, info.critical) == (
        Severity.WARNING,
        Action.RESTART_APP,
        False,
    )


@pytest.mark.parametrize(
    ("xid", "action"),
    [
        (48, Action.RESET_GPU),
        (74, Action.RESET_GPU),
        (79, Action.REBOOT_NODE),
        (94, Action.RESTART_APP),
        (95, Action.RESET_GPU),
        (119, Action.RESET_GPU),
        (120, Action.RESET_GPU),
        (145, Action.RESET_GPU),
    ],
)
def test_hardware_xids_are_critical_with_the_catalogs_action(xid: int, action: Action) -> None:
    info = classify(xid)
    assert (info.severity, info.action, info.critical) == (Severity.CRITICAL, action, True)


def test_informational_xids_need_no_action() -> None:
    for xid in (63, 92):
        info = classify(xid)
        assert (info.severity, info.action) == (Severity.WARNING, Action.NONE)


@pytest.mark.parametrize(
    ("message", "severity", "action"),
    [
        ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
         Severity.CRITICAL, Action.REBOOT_NODE),
        ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
         Severity.CRITICAL, Action.RESET_GPU),
        ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)",
         Severity.CRITICAL, Action.DRAIN_NODE),
        ("GPU recovery action changed from 0x2 (Node Reboot Required) to 0x0 (None)",
         Severity.WARNING, Action.NONE),
        ("", Severity.CRITICAL, Action.RESET_GPU),
    ],
)  # fmt: skip
def test_xid_154_follows_the_recovery_its_message_names(
    message: str, severity: Severity, action: Action
) -> None:
    info = classify(154, message)
    assert (info.severity, info.action) == (severity, action)


def test_an_xid_outside_the_catalog_is_a_warning_that_says_so() -> None:
    info = classify(999)
    assert (info.severity, info.action, info.bucket) == (Severity.WARNING, Action.NONE, "UNKNOWN")
    assert info.description == "not in gpuprobe's XID catalog"


def test_every_entry_is_consistent() -> None:
    for xid, info in CATALOG.items():
        assert info.xid == xid
        assert info.description
        if info.bucket in ("RESET_GPU", "RESTART_BM", "RESTART_VM") or info.bucket.startswith(
            "WORKFLOW_NVLINK"
        ):
            assert info.severity is Severity.CRITICAL, xid
