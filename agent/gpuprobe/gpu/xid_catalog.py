"""NVIDIA's XID catalog: what each XID means, how bad it is and what to do first.

Source: NVIDIA, "Xid Errors" — "Analyzing Xid Errors with the Xid Catalog"
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, the catalog for Ampere
and newer GPUs, with its downloadable Xid-Catalog.xlsx). Each entry keeps the catalog's
description and its "Resolution Bucket (Immediate Action)"; gpuprobe turns the bucket into a
severity and a repair action:

| catalog immediate action                  | severity | gpuprobe action      |
| ----------------------------------------- | -------- | -------------------- |
| RESTART_APP, WORKFLOW_XID_45 (app faults) | WARNING  | RESTART_APP          |
| IGNORE (informational)                    | WARNING  | NONE                 |
| CHECK_UVM (reset only if UVM or vGPU is in use) | WARNING | NONE            |
| RESET_GPU, WORKFLOW_XID_48, WORKFLOW_NVLINK_ERR, WORKFLOW_NVLINK5_ERR | CRITICAL | RESET_GPU |
| RESTART_BM (restart bare metal), RESTART_VM | CRITICAL | REBOOT_NODE        |

Memory errors the GPU contained (94) still end the application that hit them; gpuprobe keeps
them CRITICAL (the GPU needs a reset when convenient to activate the remapped row) with the
catalog's RESTART_APP. Application XIDs are the ones the NVIDIA device plugin's health check
also ignores (13, 31, 43, 45, 68, 109 in k8s-device-plugin internal/rm/health.go), except 109,
which the catalog files under RESET_GPU. An XID missing from this table is reported as a
WARNING that names it, with no action: look it up in the catalog.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuprobe.report import Action, Severity

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


@dataclass(frozen=True)
class XidInfo:
    """One catalog entry: the XID, its description, the catalog's bucket and gpuprobe's verdict."""

    xid: int
    description: str
    bucket: str
    severity: Severity
    action: Action

    @property
    def critical(self) -> bool:
        """Critical XIDs are sticky: they stay reported until a reboot or an operator's clear."""
        return self.severity is Severity.CRITICAL


_W, _C = Severity.WARNING, Severity.CRITICAL

_ENTRIES: list[tuple[int, str, str, Severity, Action]] = [
    (8, "GPU stopped processing", "RESTART_APP", _W, Action.RESTART_APP),
    (13, "Graphics Engine Exception", "RESTART_APP", _W, Action.RESTART_APP),
    (31, "GPU memory page fault", "RESTART_APP", _W, Action.RESTART_APP),
    (
        32,
        "Invalid or corrupted push buffer stream (PBDMA error)",
        "RESTART_APP",
        _W,
        Action.RESTART_APP,
    ),
    # The application's channel was reset and the application ended; the GPU stays healthy.
    (43, "GPU stopped processing (the application's channel was reset)", "IGNORE", _W, Action.NONE),
    (45, "Preemptive cleanup, due to previous errors", "WORKFLOW_XID_45", _W, Action.RESTART_APP),
    (46, "GPU stopped processing (timeout)", "RESET_GPU", _C, Action.RESET_GPU),
    (48, "Double Bit ECC Error", "WORKFLOW_XID_48", _C, Action.RESET_GPU),
    (62, "Internal micro-controller halt", "RESET_GPU", _C, Action.RESET_GPU),
    (63, "GPU memory remapping event (row remapped or page retired)", "IGNORE", _W, Action.NONE),
    (64, "GPU memory remapping failure", "RESET_GPU", _C, Action.RESET_GPU),
    # Not in the excerpt of the catalog checked; the device plugin files it with the
    # application XIDs.
    (68, "Video processor exception (NVDEC)", "RESTART_APP", _W, Action.RESTART_APP),
    (69, "Graphics Engine class error", "RESTART_APP", _W, Action.RESTART_APP),
    (74, "NVLink error", "WORKFLOW_NVLINK_ERR", _C, Action.RESET_GPU),
    (79, "GPU has fallen off the bus", "RESTART_BM", _C, Action.REBOOT_NODE),
    (92, "High single-bit ECC error rate", "IGNORE", _W, Action.NONE),
    (94, "Contained memory error", "RESTART_APP", _C, Action.RESTART_APP),
    (95, "Uncontained memory error", "RESET_GPU", _C, Action.RESET_GPU),
    (109, "Context switch timeout error", "RESET_GPU", _C, Action.RESET_GPU),
    (110, "Security fault error", "RESET_GPU", _C, Action.RESET_GPU),
    (119, "GSP RPC timeout", "RESET_GPU", _C, Action.RESET_GPU),
    (120, "GSP error", "RESET_GPU", _C, Action.RESET_GPU),
    (136, "Link training failed", "RESET_GPU", _C, Action.RESET_GPU),
    (140, "ECC unrecovered error", "RESET_GPU", _C, Action.RESET_GPU),
    (143, "GPU initialization error", "RESET_GPU", _C, Action.RESET_GPU),
    *[
        (xid, "NVLink5 error", "WORKFLOW_NVLINK5_ERR", _C, Action.RESET_GPU)
        for xid in range(144, 151)
    ],
    (151, "Key rotation error", "RESTART_VM", _C, Action.REBOOT_NODE),
    (154, "GPU recovery action changed", "XID_154", _C, Action.RESET_GPU),
    (155, "NVLink software-defined error", "RESET_GPU", _C, Action.RESET_GPU),
    (156, "Resource retirement event", "RESET_GPU", _C, Action.RESET_GPU),
    (157, "Resource retirement failure (workloads may still run)", "IGNORE", _W, Action.NONE),
    (158, "GPU fatal timeout", "RESET_GPU", _C, Action.RESET_GPU),
    (
        159,
        "CHI non-data error (chip-to-chip interconnect): reset the GPU if UVM or vGPU is in use",
        "CHECK_UVM",
        _W,
        Action.NONE,
    ),
]

CATALOG: dict[int, XidInfo] = {e[0]: XidInfo(*e) for e in _ENTRIES}

# The table in this module's docstring: each bucket's severity and action. Every entry follows
# it except those in BUCKET_EXCEPTIONS (94: contained, yet the GPU needs a reset when
# convenient; 154: its action follows the recovery its message names).
BUCKET_VERDICTS: dict[str, tuple[Severity, Action]] = {
    "RESTART_APP": (_W, Action.RESTART_APP),
    "WORKFLOW_XID_45": (_W, Action.RESTART_APP),
    "IGNORE": (_W, Action.NONE),
    "CHECK_UVM": (_W, Action.NONE),
    "RESET_GPU": (_C, Action.RESET_GPU),
    "WORKFLOW_XID_48": (_C, Action.RESET_GPU),
    "WORKFLOW_NVLINK_ERR": (_C, Action.RESET_GPU),
    "WORKFLOW_NVLINK5_ERR": (_C, Action.RESET_GPU),
    "RESTART_BM": (_C, Action.REBOOT_NODE),
    "RESTART_VM": (_C, Action.REBOOT_NODE),
}
BUCKET_EXCEPTIONS = frozenset({94, 154})

# Xid 154 names the recovery the driver now requires, e.g. "GPU recovery action changed from
# 0x0 (None) to 0x2 (Node Reboot Required)": the action follows its text.
_RECOVERY_154 = re.compile(r"changed from .*? to \s*(?:0x[0-9a-fA-F]+\s*)?\(([^)]*)\)")
_RECOVERY_ACTIONS = {
    "none": (Severity.WARNING, Action.NONE),
    "gpu reset required": (Severity.CRITICAL, Action.RESET_GPU),
    "node reboot required": (Severity.CRITICAL, Action.REBOOT_NODE),
    # The GPU must not take peer-to-peer work until drained: an operator must act (the gpus
    # check's GPU_RECOVERY_REQUIRED for DRAIN_P2P says the same).
    "drain p2p": (Severity.CRITICAL, Action.DRAIN_NODE),
    "drain and reset": (Severity.CRITICAL, Action.RESET_GPU),
}


def classify(xid: int, message: str = "") -> XidInfo:
    """The catalog entry of `xid` (an Xid 154 by the recovery its message names)."""
    info = CATALOG.get(xid)
    if info is None:
        return XidInfo(xid, "not in gpuprobe's XID catalog", "UNKNOWN", _W, Action.NONE)
    if xid == 154:
        match = _RECOVERY_154.search(message)
        verdict = _RECOVERY_ACTIONS.get(match.group(1).strip().lower()) if match else None
        if verdict is not None:
            return XidInfo(xid, info.description, info.bucket, *verdict)
    return info
