"""Check `xid`: which XID errors did the GPUs raise this boot, and what should be done?

Two sources, read in every run: the NVML event set (`events`: XidCriticalError events and
the other critical types of `gpuprobe.gpu.nvml_events`) and the host's kernel log files
(`kernel`: `NVRM: Xid (PCI:...): N, ...` lines of the current boot). An XID is tied to its GPU
by PCI address or NVML index; one entry per (GPU, XID), counted once even when both sources
saw it; one per (GPU, event type) for the other events, which raise the code the `gpus` check
raises for the same fault (ECC_UNCORRECTABLE, ROW_REMAP_FAILURE, GPU_LOST,
GPU_RECOVERY_REQUIRED). What the daemon saw is kept in `host.memory`, so events are not lost
between runs (`observation`, the records in `model`).

Each XID is classified by NVIDIA's catalog (`gpuprobe.gpu.xid_catalog`). Critical XIDs (and
critical events) are sticky (`sticky`): they stay reported until the boot id changes (a
reboot) or an operator clears them (`clearing.clear`, `gpuprobe clear-xid`); the clearing, and
in the live daemon the sticky XIDs themselves, are kept in the state file (`state`, `persist`).
A replayed snapshot uses a state file only when `xid.state_dir` is configured, so a replay
gives the same findings on every machine; without one, a clearing lives in the process's
memory. A warning XID (an application's) stays reported in the daemon for
`xid.warning_window_seconds` after it last grew; a one-shot check reports every XID of the
boot. What the findings say is in `findings`.
"""

from __future__ import annotations

from typing import Any

from gpuprobe.checks.xid import state as xid_state
from gpuprobe.checks.xid.clearing import clear
from gpuprobe.checks.xid.findings import finding, summary
from gpuprobe.checks.xid.model import NAME
from gpuprobe.checks.xid.observation import observe
from gpuprobe.checks.xid.persist import save_sticky, state_dir
from gpuprobe.config import Config
from gpuprobe.host import Host
from gpuprobe.report import CheckResult

__all__ = ["NAME", "clear", "run", "state_dir"]


def run(host: Host, config: Config) -> CheckResult:
    """Gather this boot's XIDs, classify them, and report the active ones."""
    directory = state_dir(host, config)
    with xid_state.LOCK:
        seen = observe(host, config, directory)
        persist_error = save_sticky(host, seen, directory)
    active = [x for x in seen.xids if x.active]
    data: dict[str, Any] = {
        "xids": [x.to_data() for x in seen.xids if x.is_xid],
        "events": [x.to_event_data() for x in seen.xids if not x.is_xid],
        "boot_id": seen.boot_id,
        "sources": seen.sources,
        "state_file": str(xid_state.state_path(directory)) if directory else None,
    }
    if seen.state_error or persist_error:
        data["state_error"] = seen.state_error or persist_error
    return CheckResult(NAME, summary(seen.xids, active), [finding(x) for x in active], data)
