"""NVIDIA's XID catalog: what each XID means, how bad it is and what to do first.

Source: NVIDIA, "Xid Errors" — "Analyzing Xid Errors with the Xid Catalog"
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, the catalog for Ampere
and newer GPUs, with its downloadable Xid-Catalog.xlsx). The table below holds every XID the
catalog names (1 to 172), each with the catalog's mnemonic, description and "Resolution
Bucket (Immediate Action)"; gpuprobe turns the bucket into a severity and a repair action:

| catalog immediate action                  | severity | gpuprobe action      |
| ----------------------------------------- | -------- | -------------------- |
| RESTART_APP, WORKFLOW_XID_45 (app faults) | WARNING  | RESTART_APP          |
| IGNORE (informational)                    | WARNING  | NONE                 |
| CHECK_UVM (reset only if UVM or vGPU is in use) | WARNING | NONE            |
| CONTACT_SUPPORT (mostly codes "Unused" on Ampere and newer) | WARNING | HARDWARE_INSPECTION |
| CHECK_MECHANICALS (seating, power cables) | WARNING  | HARDWARE_INSPECTION  |
| UPDATE_SWFW (driver / firmware mismatch)  | WARNING  | FIX_CONFIG           |
| UNSPECIFIED (the catalog names no bucket: 162-172) | WARNING | NONE           |
| RESET_GPU, WORKFLOW_XID_48, WORKFLOW_NVLINK_ERR, WORKFLOW_NVLINK5_ERR | CRITICAL | RESET_GPU |
| RESTART_BM (restart bare metal), RESTART_VM | CRITICAL | REBOOT_NODE        |

WORKFLOW_NVLINK5_ERR (Xids 144-150) is only the fallback: each such line is decoded by its
unit, `Fatal`/`Nonfatal` word and error status (`gpuprobe.gpu.nvlink5`). A memory error the GPU
contained (94) takes its bucket's verdict, WARNING with RESTART_APP (not sticky): only the
application that hit it ends; the row remap a reset activates is the `gpus` check's
ROW_REMAP_PENDING. Exceptions to the bucket's verdict (BUCKET_EXCEPTIONS): 154 follows the
recovery its message names; the catalog's own words for 164 and 165 (replace the GPU if power
smoothing is wanted) and 168 (enable ECC) name HARDWARE_INSPECTION and FIX_CONFIG. An XID
missing from this table is reported as a WARNING that names it, with no action: look it up in
the catalog.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuprobe.gpu import nvlink5
from gpuprobe.gpu.nvidia.health import RECOVERY_VERDICTS
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
    mnemonic: str = ""

    @property
    def critical(self) -> bool:
        """Critical XIDs are sticky: they stay reported until a reboot or an operator's clear."""
        return self.severity is Severity.CRITICAL


_W, _C = Severity.WARNING, Severity.CRITICAL

# The table in this module's docstring: each bucket's severity and action.
BUCKET_VERDICTS: dict[str, tuple[Severity, Action]] = {
    "RESTART_APP": (_W, Action.RESTART_APP),
    "WORKFLOW_XID_45": (_W, Action.RESTART_APP),
    "IGNORE": (_W, Action.NONE),
    "CHECK_UVM": (_W, Action.NONE),
    "CONTACT_SUPPORT": (_W, Action.HARDWARE_INSPECTION),
    "CHECK_MECHANICALS": (_W, Action.HARDWARE_INSPECTION),
    "UPDATE_SWFW": (_W, Action.FIX_CONFIG),
    "UNSPECIFIED": (_W, Action.NONE),
    "RESET_GPU": (_C, Action.RESET_GPU),
    "WORKFLOW_XID_48": (_C, Action.RESET_GPU),
    "WORKFLOW_NVLINK_ERR": (_C, Action.RESET_GPU),
    "WORKFLOW_NVLINK5_ERR": (_C, Action.RESET_GPU),
    "RESTART_BM": (_C, Action.REBOOT_NODE),
    "RESTART_VM": (_C, Action.REBOOT_NODE),
    "XID_154": (_C, Action.RESET_GPU),
}
# Entries whose verdict is not their bucket's (see the docstring).
_EXCEPTIONS: dict[int, tuple[Severity, Action]] = {
    154: (_C, Action.RESET_GPU),
    164: (_W, Action.HARDWARE_INSPECTION),
    165: (_W, Action.HARDWARE_INSPECTION),
    168: (_W, Action.FIX_CONFIG),
}
BUCKET_EXCEPTIONS = frozenset(_EXCEPTIONS)

# (XID, mnemonic, description, catalog bucket), as the catalog lists them.
_ENTRIES: list[tuple[int, str, str, str]] = [
    (1, "ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD", "Unused", "CONTACT_SUPPORT"),
    (2, "ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT"),
    (3, "ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD", "Unused", "CONTACT_SUPPORT"),
    (4, "ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY", "Unused", "CONTACT_SUPPORT"),
    (5, "ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW", "Unused", "CONTACT_SUPPORT"),
    (6, "ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR", "Unused", "CONTACT_SUPPORT"),
    (7, "ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR", "Unused", "CONTACT_SUPPORT"),
    (8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP"),
    (9, "ROBUST_CHANNEL_GR_ERROR_INSTANCE", "Unused", "CONTACT_SUPPORT"),
    (10, "ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP", "Unused", "CONTACT_SUPPORT"),
    (
        11,
        "ROBUST_CHANNEL_GR_ERROR_MISSING_HW",
        "Invalid or corrupted push buffer stream",
        "RESTART_APP",
    ),
    (12, "ROBUST_CHANNEL_GR_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT"),
    (
        13,
        "ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY",
        "Graphics Engine Exception",
        "RESTART_APP",
    ),
    (14, "ROBUST_CHANNEL_FAKE_ERROR", "Fake or injected error from userspace", "IGNORE"),
    (15, "ROBUST_CHANNEL_SCANLINE_TIMEOUT", "Unused", "CONTACT_SUPPORT"),
    (16, "ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT", "Unused", "CONTACT_SUPPORT"),
    (17, "ROBUST_CHANNEL_PARAMETER_ERROR", "Unused", "CONTACT_SUPPORT"),
    (18, "ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR", "Unused", "CONTACT_SUPPORT"),
    (19, "ROBUST_CHANNEL_DISP_MISSED_NOTIFIER", "Unused", "CONTACT_SUPPORT"),
    (20, "ROBUST_CHANNEL_MPEG_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT"),
    (21, "ROBUST_CHANNEL_ME_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT"),
    (22, "ROBUST_CHANNEL_VP_ERROR_SW_METHOD", "Unused", "CONTACT_SUPPORT"),
    (23, "ROBUST_CHANNEL_RC_LOGGING_ENABLED", "Unused", "CONTACT_SUPPORT"),
    (24, "ROBUST_CHANNEL_GR_SEMAPHORE_TIMEOUT", "Unused", "CONTACT_SUPPORT"),
    (
        25,
        "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY",
        "Invalid or illegal push buffer stream",
        "RESTART_APP",
    ),
    (26, "ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT", "Unused", "CONTACT_SUPPORT"),
    (27, "ROBUST_CHANNEL_VP_ERROR", "Unused", "CONTACT_SUPPORT"),
    (28, "ROBUST_CHANNEL_VP2_ERROR", "Unused", "CONTACT_SUPPORT"),
    (29, "ROBUST_CHANNEL_BSP_ERROR", "Unused", "CONTACT_SUPPORT"),
    (30, "ROBUST_CHANNEL_BAD_ADDR_ACCESS", "Unused", "CONTACT_SUPPORT"),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP"),
    (
        32,
        "ROBUST_CHANNEL_PBDMA_ERROR",
        "Invalid or corrupted push buffer stream (PBDMA error)",
        "RESTART_APP",
    ),
    (33, "ROBUST_CHANNEL_SEC_ERROR", "Unused", "CONTACT_SUPPORT"),
    (34, "ROBUST_CHANNEL_MSVLD_ERROR", "Unused", "CONTACT_SUPPORT"),
    (35, "ROBUST_CHANNEL_MSPDEC_ERROR", "Unused", "CONTACT_SUPPORT"),
    (36, "ROBUST_CHANNEL_MSPPP_ERROR", "Unused", "CONTACT_SUPPORT"),
    (37, "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "Driver firmware error", "IGNORE"),
    (38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware error", "IGNORE"),
    (39, "ROBUST_CHANNEL_CE0_ERROR", "Copy Engine Exception", "RESTART_APP"),
    (40, "ROBUST_CHANNEL_CE1_ERROR", "Copy Engine Exception", "RESTART_APP"),
    (41, "ROBUST_CHANNEL_CE2_ERROR", "Copy Engine Exception", "RESTART_APP"),
    (42, "ROBUST_CHANNEL_VIC_ERROR", "Unused", "CONTACT_SUPPORT"),
    (
        43,
        "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR",
        "GPU stopped processing (the application's channel was reset)",
        "IGNORE",
    ),
    (
        44,
        "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW",
        "Graphics Engine fault during context switch",
        "IGNORE",
    ),
    (
        45,
        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        "Preemptive cleanup, due to previous errors",
        "WORKFLOW_XID_45",
    ),
    (46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing (timeout)", "RESET_GPU"),
    (47, "ROBUST_CHANNEL_NVENC0_ERROR", "Unused", "CONTACT_SUPPORT"),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48"),
    (49, "SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY", "Unused", "CONTACT_SUPPORT"),
    (50, "SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR", "Unused", "CONTACT_SUPPORT"),
    (51, "SILENT_RUNNING_STRESS_TEST_FAILURE", "Unused", "CONTACT_SUPPORT"),
    (52, "SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE", "Unused", "CONTACT_SUPPORT"),
    (53, "SILENT_RUNNING_TEMP_REDUCED_CLOCKING", "Unused", "CONTACT_SUPPORT"),
    (
        54,
        "SILENT_RUNNING_PWR_REDUCED_CLOCKING",
        "Auxiliary power is not connected to the GPU board",
        "CHECK_MECHANICALS",
    ),
    (55, "SILENT_RUNNING_TEMPERATURE_READ_ERROR", "Unused", "CONTACT_SUPPORT"),
    (56, "DISPLAY_CHANNEL_EXCEPTION", "Unused", "CONTACT_SUPPORT"),
    (57, "FB_LINK_TRAINING_FAILURE_ERROR", "Unused", "CONTACT_SUPPORT"),
    (58, "FB_MEMORY_ERROR", "Unused", "CONTACT_SUPPORT"),
    (59, "PMU_ERROR", "Unused", "CONTACT_SUPPORT"),
    (60, "ROBUST_CHANNEL_SEC2_ERROR", "Video processor exception", "RESTART_APP"),
    (61, "PMU_BREAKPOINT", "Unused", "CONTACT_SUPPORT"),
    (62, "PMU_HALT_ERROR", "Internal micro-controller halt", "RESET_GPU"),
    (
        63,
        "INFOROM_DRAM_RETIREMENT_EVENT",
        "GPU memory remapping event (row remapped or page retired)",
        "IGNORE",
    ),
    (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", "RESET_GPU"),
    (65, "ROBUST_CHANNEL_NVENC1_ERROR", "Unused", "CONTACT_SUPPORT"),
    (66, "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "Illegal access by driver", "IGNORE"),
    (67, "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "Illegal access by driver", "IGNORE"),
    (68, "ROBUST_CHANNEL_NVDEC0_ERROR", "Video processor exception (NVDEC)", "RESTART_APP"),
    (69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "RESTART_APP"),
    (70, "ROBUST_CHANNEL_CE3_ERROR", "CE3: Unknown Error", "RESTART_APP"),
    (71, "ROBUST_CHANNEL_CE4_ERROR", "CE4: Unknown Error", "RESTART_APP"),
    (72, "ROBUST_CHANNEL_CE5_ERROR", "CE5: Unknown Error", "RESTART_APP"),
    (73, "ROBUST_CHANNEL_NVENC2_ERROR", "Unused", "CONTACT_SUPPORT"),
    (74, "NVLINK_ERROR", "NVLink error", "WORKFLOW_NVLINK_ERR"),
    (75, "ROBUST_CHANNEL_CE6_ERROR", "CE6: Unknown Error", "RESTART_APP"),
    (76, "ROBUST_CHANNEL_CE7_ERROR", "CE7: Unknown Error", "RESTART_APP"),
    (77, "ROBUST_CHANNEL_CE8_ERROR", "CE8: Unknown Error", "RESTART_APP"),
    (78, "VGPU_START_ERROR", "vGPU Start Error", "UPDATE_SWFW"),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM"),
    (80, "PBDMA_PUSHBUFFER_CRC_MISMATCH", "Corrupted data sent to GPU", "RESTART_APP"),
    (81, "ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR", "Unused", "CONTACT_SUPPORT"),
    (82, "ROBUST_CHANNEL_NVJPG0_ERROR", "NVJPG0 Error", "RESTART_APP"),
    (83, "ROBUST_CHANNEL_NVDEC1_ERROR", "NVDEC1 Error", "RESTART_APP"),
    (84, "ROBUST_CHANNEL_NVDEC2_ERROR", "NVDEC2 Error", "RESTART_APP"),
    (85, "ROBUST_CHANNEL_CE9_ERROR", "CE9: Unknown Error", "RESTART_APP"),
    (86, "ROBUST_CHANNEL_OFA0_ERROR", "OFA Exception", "RESTART_APP"),
    (87, "NVTELEMETRY_DRIVER_REPORT", "Unused", "CONTACT_SUPPORT"),
    (88, "ROBUST_CHANNEL_NVDEC3_ERROR", "NVDEC3 Error", "RESTART_APP"),
    (89, "ROBUST_CHANNEL_NVDEC4_ERROR", "NVDEC4 Error", "RESTART_APP"),
    (90, "LTC_ERROR", "Unused", "CONTACT_SUPPORT"),
    (91, "RESERVED_XID", "Unused", "CONTACT_SUPPORT"),
    (92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE"),
    (
        93,
        "INFOROM_ERASE_LIMIT_EXCEEDED",
        "Non-fatal violation of provisioned InfoROM wear limit",
        "IGNORE",
    ),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", "RESTART_APP"),
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", "RESET_GPU"),
    (96, "ROBUST_CHANNEL_NVDEC5_ERROR", "NVDEC5 Error", "RESTART_APP"),
    (97, "ROBUST_CHANNEL_NVDEC6_ERROR", "NVDEC6 Error", "RESTART_APP"),
    (98, "ROBUST_CHANNEL_NVDEC7_ERROR", "NVDEC7 Error", "RESTART_APP"),
    (99, "ROBUST_CHANNEL_NVJPG1_ERROR", "NVJPG1 Error", "RESTART_APP"),
    (100, "ROBUST_CHANNEL_NVJPG2_ERROR", "NVJPG2 Error", "RESTART_APP"),
    (101, "ROBUST_CHANNEL_NVJPG3_ERROR", "NVJPG3 Error", "RESTART_APP"),
    (102, "ROBUST_CHANNEL_NVJPG4_ERROR", "NVJPG4 Error", "RESTART_APP"),
    (103, "ROBUST_CHANNEL_NVJPG5_ERROR", "NVJPG5 Error", "RESTART_APP"),
    (104, "ROBUST_CHANNEL_NVJPG6_ERROR", "NVJPG6 Error", "RESTART_APP"),
    (105, "ROBUST_CHANNEL_NVJPG7_ERROR", "NVJPG7 Error", "RESTART_APP"),
    (106, "SMBPBI_TEST_MESSAGE", "SMBPBI Test Message", "IGNORE"),
    (107, "SMBPBI_TEST_MESSAGE_SILENT", "SMBPBI Test Message Silent", "IGNORE"),
    (108, "NVLINK_REMOTE_TRANSLATION_ERROR", "Unused (NVLink remote translation error)", "IGNORE"),
    (109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context switch timeout error", "RESET_GPU"),
    (110, "SEC_FAULT_ERROR", "Security fault error", "RESET_GPU"),
    (111, "BUNDLE_ERROR_EVENT", "Unused", "CONTACT_SUPPORT"),
    (112, "DISP_SUPERVISOR_ERROR", "Unused", "CONTACT_SUPPORT"),
    (113, "DP_LT_FAILURE", "Unused", "CONTACT_SUPPORT"),
    (114, "HEAD_RG_UNDERFLOW", "Unused", "CONTACT_SUPPORT"),
    (115, "CORE_CHANNEL_REGS", "Unused", "CONTACT_SUPPORT"),
    (116, "WINDOW_CHANNEL_REGS", "Unused", "CONTACT_SUPPORT"),
    (117, "CURSOR_CHANNEL_REGS", "Unused", "CONTACT_SUPPORT"),
    (118, "HEAD_REGS", "Unused", "CONTACT_SUPPORT"),
    (119, "GSP_RPC_TIMEOUT", "GSP RPC timeout", "RESET_GPU"),
    (120, "GSP_ERROR", "GSP error", "RESET_GPU"),
    (
        121,
        "C2C_ERROR",
        "C2C error (corrected errors on the NVLink-C2C link to a Grace CPU)",
        "IGNORE",
    ),
    (122, "SPI_PMU_RPC_READ_FAIL", "Unused", "CONTACT_SUPPORT"),
    (123, "SPI_PMU_RPC_WRITE_FAIL", "Unused", "CONTACT_SUPPORT"),
    (124, "SPI_PMU_RPC_ERASE_FAIL", "Unused", "CONTACT_SUPPORT"),
    (125, "INFOROM_FS_ERROR", "Unused", "CONTACT_SUPPORT"),
    (126, "ROBUST_CHANNEL_CE10_ERROR", "CE10: Unknown Error", "RESTART_APP"),
    (127, "ROBUST_CHANNEL_CE11_ERROR", "CE11: Unknown Error", "RESTART_APP"),
    (128, "ROBUST_CHANNEL_CE12_ERROR", "CE12: Unknown Error", "RESTART_APP"),
    (129, "ROBUST_CHANNEL_CE13_ERROR", "CE13: Unknown Error", "RESTART_APP"),
    (130, "ROBUST_CHANNEL_CE14_ERROR", "CE14: Unknown Error", "RESTART_APP"),
    (131, "ROBUST_CHANNEL_CE15_ERROR", "CE15: Unknown Error", "RESTART_APP"),
    (132, "ROBUST_CHANNEL_CE16_ERROR", "CE16: Unknown Error", "RESTART_APP"),
    (133, "ROBUST_CHANNEL_CE17_ERROR", "CE17: Unknown Error", "RESTART_APP"),
    (134, "ROBUST_CHANNEL_CE18_ERROR", "CE18: Unknown Error", "RESTART_APP"),
    (135, "ROBUST_CHANNEL_CE19_ERROR", "CE19: Unknown Error", "RESTART_APP"),
    (136, "ALI_TRAINING_FAIL", "Link training failed", "RESET_GPU"),
    (137, "NVLINK_PRIV_ERR", "NVLink privilege error", "IGNORE"),
    (138, "ROBUST_CHANNEL_DLA_ERROR", "Unused", "CONTACT_SUPPORT"),
    (139, "ROBUST_CHANNEL_OFA1_ERROR", "OFA1 Error", "RESTART_APP"),
    (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC unrecovered error", "RESET_GPU"),
    (141, "ROBUST_CHANNEL_FAST_PATH_ERROR", "CUDA Fast Path Error", "IGNORE"),
    (142, "ROBUST_CHANNEL_NVENC3_ERROR", "NVENC3 Error", "CONTACT_SUPPORT"),
    (143, "GPU_INIT_ERROR", "GPU initialization error", "RESET_GPU"),
    (144, "NVLINK_SAW_ERROR", "NVLink5 SAW error", "WORKFLOW_NVLINK5_ERR"),
    (145, "NVLINK_RLW_ERROR", "NVLink5 RLW error", "WORKFLOW_NVLINK5_ERR"),
    (146, "NVLINK_TLW_ERROR", "NVLink5 TLW error", "WORKFLOW_NVLINK5_ERR"),
    (147, "NVLINK_TREX_ERROR", "NVLink5 TREX error", "WORKFLOW_NVLINK5_ERR"),
    (148, "NVLINK_NVLPW_CTRL_ERROR", "NVLink5 NVLPW_CTRL error", "WORKFLOW_NVLINK5_ERR"),
    (149, "NVLINK_NETIR_ERROR", "NVLink5 NETIR error", "WORKFLOW_NVLINK5_ERR"),
    (150, "NVLINK_MSE_ERROR", "NVLink5 MSE error", "WORKFLOW_NVLINK5_ERR"),
    (151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "Key rotation error", "RESTART_VM"),
    (152, "ROBUST_CHANNEL_DLA_SMMU_ERROR", "DLA SMMU Error", "IGNORE"),
    (153, "ROBUST_CHANNEL_DLA_TIMEOUT", "DLA timeout Error", "IGNORE"),
    (154, "GPU_RECOVERY_ACTION_CHANGED", "GPU recovery action changed", "XID_154"),
    (155, "NVLINK_SW_DEFINED_ERROR", "NVLink software-defined error", "RESET_GPU"),
    (156, "RESOURCE_RETIREMENT_EVENT", "Resource retirement event", "RESET_GPU"),
    (
        157,
        "RESOURCE_RETIREMENT_FAILURE",
        "Resource retirement failure (workloads may still run)",
        "IGNORE",
    ),
    (158, "GPU_FATAL_TIMEOUT", "GPU fatal timeout", "RESET_GPU"),
    (
        159,
        "ROBUST_CHANNEL_CHI_NON_DATA_ERROR",
        "CHI non-data error (chip-to-chip interconnect): reset the GPU if UVM or vGPU is in use",
        "CHECK_UVM",
    ),
    (160, "CHANNEL_RETIREMENT_EVENT", "Channel retirement event", "IGNORE"),
    (161, "CHANNEL_RETIREMENT_FAILURE", "Channel retirement failure", "IGNORE"),
    (
        162,
        "PSHC_REENGAGED",
        "Power smoothing hardware circuitry capability reengaged",
        "UNSPECIFIED",
    ),
    (
        163,
        "PSHC_DISENGAGED",
        "Power smoothing hardware circuitry capability disengaged (no GPU reset required)",
        "UNSPECIFIED",
    ),
    (
        164,
        "PSHC_LOW_LIFETIME",
        "Power smoothing hardware circuitry low lifetime reached",
        "UNSPECIFIED",
    ),
    (
        165,
        "PSHC_ZERO_LIFETIME",
        "Power smoothing hardware circuitry lifetime exhausted",
        "UNSPECIFIED",
    ),
    (
        166,
        "NVLINK_SECURE_CRYPTO_ERR",
        "Confidential-computing traffic before the NVLink was configured for encryption",
        "UNSPECIFIED",
    ),
    (167, "PCIE_FATAL_TIMEOUT", "PCIe fatal timeout", "UNSPECIFIED"),
    (
        168,
        "REDUCED_GPU_MEMORY_CAPACITY",
        "Errors found in the write-protected region: reduced GPU memory capacity",
        "UNSPECIFIED",
    ),
    (169, "SEC2_HALT_ERROR", "Internal micro-controller halt (SEC2)", "UNSPECIFIED"),
    (170, "NVLINK_SECURE_OTHER", "NVLink interrupt in confidential-computing mode", "UNSPECIFIED"),
    (
        171,
        "UNCORRECTABLE_DRAM_ERROR",
        "Uncorrectable DRAM error (details to an Xid 48)",
        "UNSPECIFIED",
    ),
    (
        172,
        "UNCORRECTABLE_SRAM_ERROR",
        "Uncorrectable SRAM error (details to an Xid 48)",
        "UNSPECIFIED",
    ),
]


def _info(xid: int, mnemonic: str, description: str, bucket: str) -> XidInfo:
    severity, action = _EXCEPTIONS.get(xid) or BUCKET_VERDICTS[bucket]
    return XidInfo(xid, description, bucket, severity, action, mnemonic)


CATALOG: dict[int, XidInfo] = {e[0]: _info(*e) for e in _ENTRIES}

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
    """The catalog entry of `xid`: an Xid 144-150 by the NVLink5 decode of its message, an
    Xid 154 by the recovery its message names."""
    info = CATALOG.get(xid)
    if info is None:
        return XidInfo(xid, "not in gpuprobe's XID catalog", "UNKNOWN", _W, Action.NONE)
    decoded = nvlink5.decode(xid, message)
    if decoded is not None:
        description = f"{info.description} ({decoded.summary()})"
        return XidInfo(
            xid, description, info.bucket, decoded.severity, decoded.action, info.mnemonic
        )
    if xid == 154:
        match = _RECOVERY_154.search(message)
        verdict = _RECOVERY_ACTIONS.get(match.group(1).strip().lower()) if match else None
        if verdict is not None:
            return XidInfo(xid, info.description, info.bucket, *verdict, info.mnemonic)
    return info


def classify_unlogged(xid: int, recovery_field: str | None = None) -> XidInfo:
    """The verdict on an XID that came only as an NVML event, with no kernel-log line to
    decode: an Xid 144-150's unit and Fatal/Nonfatal word are only in the kernel log, so it is
    a WARNING that says so (never CRITICAL on the number alone); an Xid 154 follows the GPU's
    recovery action field (`recovery_field`, read when the event was drained) as a
    GpuRecoveryAction event does; when the field could not be read, the catalog's default."""
    info = CATALOG.get(xid)
    if info is None:
        return classify(xid)
    if nvlink5.FIRST <= xid <= nvlink5.LAST:
        description = (
            f"{info.description} (seen only as an NVML event: without its kernel-log line "
            "its unit and Fatal/Nonfatal word cannot be decoded; read the kernel log)"
        )
        return XidInfo(xid, description, info.bucket, _W, Action.NONE, info.mnemonic)
    if xid == 154 and recovery_field is not None:
        if recovery_field == "NONE":
            severity, action, what = _W, Action.NONE, "no recovery"
        elif recovery_field in RECOVERY_VERDICTS:
            severity, action, what = RECOVERY_VERDICTS[recovery_field]
        else:
            return info
        description = f"{info.description} (the recovery action field asks for {what})"
        return XidInfo(xid, description, info.bucket, severity, action, info.mnemonic)
    return info
