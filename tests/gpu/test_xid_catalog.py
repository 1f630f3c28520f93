"""The XID catalog: NVIDIA's immediate actions as severities and repair actions."""

from __future__ import annotations

import pytest

from gpuprobe.checks.nvidia.gpu_health import health_findings
from gpuprobe.gpu.nvidia.gpus import NvidiaGpuFacts
from gpuprobe.gpu.xid_catalog import BUCKET_EXCEPTIONS, BUCKET_VERDICTS, CATALOG, classify
from gpuprobe.report import Action, Severity


@pytest.mark.parametrize("xid", [13, 31, 45, 69, 94])
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
    for xid in (43, 63, 92, 157, 159):
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


def test_every_entry_follows_its_buckets_verdict() -> None:
    for xid, info in CATALOG.items():
        assert info.xid == xid
        assert info.description
        if xid in BUCKET_EXCEPTIONS:
            continue
        assert (info.severity, info.action) == BUCKET_VERDICTS[info.bucket], xid


def test_the_exceptions_are_the_documented_ones() -> None:
    assert sorted(BUCKET_EXCEPTIONS) == [154, 164, 165, 168]
    assert CATALOG[154].bucket == "XID_154"


def test_the_catalogs_buckets_are_kept_as_it_files_them() -> None:
    buckets = {xid: CATALOG[xid].bucket for xid in (43, 69, 157, 159)}
    assert buckets == {43: "IGNORE", 69: "RESTART_APP", 157: "IGNORE", 159: "CHECK_UVM"}


# Every number NVIDIA's catalog names (analyzing-xid-catalog.html, the XIDs sheet): 1 to 172
# without a gap, the codes "Unused" on Ampere and newer included.
CATALOG_NUMBERS = list(range(1, 173))


def test_the_table_holds_every_number_the_catalog_names_and_no_other() -> None:
    assert sorted(CATALOG) == CATALOG_NUMBERS


@pytest.mark.parametrize(
    ("xid", "mnemonic", "bucket"),
    [
        (1, "ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD", "CONTACT_SUPPORT"),
        (54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING", "CHECK_MECHANICALS"),
        (61, "PMU_BREAKPOINT", "CONTACT_SUPPORT"),
        (78, "VGPU_START_ERROR", "UPDATE_SWFW"),
        (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM"),
        (121, "C2C_ERROR", "IGNORE"),
        (137, "NVLINK_PRIV_ERR", "IGNORE"),
        (149, "NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR"),
        (160, "CHANNEL_RETIREMENT_EVENT", "IGNORE"),
        (167, "PCIE_FATAL_TIMEOUT", "UNSPECIFIED"),
        (172, "UNCORRECTABLE_SRAM_ERROR", "UNSPECIFIED"),
    ],
)
def test_entries_keep_the_catalogs_mnemonic_and_bucket(
    xid: int, mnemonic: str, bucket: str
) -> None:
    assert (CATALOG[xid].mnemonic, CATALOG[xid].bucket) == (mnemonic, bucket)


def test_an_unused_code_asks_a_person_to_look_not_for_a_drain() -> None:
    info = classify(61)
    assert (info.severity, info.action) == (Severity.WARNING, Action.HARDWARE_INSPECTION)


def test_firmware_internal_codes_are_in_the_catalog_now() -> None:
    # They used to come out as "not in gpuprobe's XID catalog".
    for xid in (37, 38, 66, 67, 121, 137, 141, 160, 161):
        info = classify(xid)
        assert (info.bucket, info.severity, info.action) == (
            "IGNORE",
            Severity.WARNING,
            Action.NONE,
        )


@pytest.mark.parametrize(
    "xid", [8, 13, 31, 32, 43, 45, 46, 48, 62, 63, 64, 69, 74, 79, 92, 94, 95, 109, 110,
            119, 120, 136, 140, 143, 154, 155, 156, 157, 158, 159],
)  # fmt: skip
def test_the_common_xids_are_in_the_catalog(xid: int) -> None:
    assert xid in CATALOG


@pytest.mark.parametrize(
    ("message_action", "health_action"),
    [
        ("0x1 (GPU Reset Required)", "GPU_RESET"),
        ("0x2 (Node Reboot Required)", "NODE_REBOOT"),
        ("0x3 (Drain P2P)", "DRAIN_P2P"),
        ("0x4 (Drain and Reset)", "DRAIN_AND_RESET"),
    ],
)
def test_xid_154_and_the_recovery_action_field_agree(
    message_action: str, health_action: str
) -> None:
    info = classify(154, f"GPU recovery action changed from 0x0 (None) to {message_action}")
    facts = NvidiaGpuFacts(0, recovery_action=health_action)
    (finding,) = health_findings(
        facts, "gpu:0:GPU-x", "GPU 0", nvswitch_system=False, fabric_manager_running=None
    )
    assert (finding.code, finding.severity, finding.action) == (
        "GPU_RECOVERY_REQUIRED",
        info.severity,
        info.action,
    )
    assert finding.severity is Severity.CRITICAL
