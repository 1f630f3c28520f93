"""Check `xid`: which XID errors did the GPUs raise this boot, and what should be done?

Two sources, read in every run: the NVML event set (`events`: XidCriticalError events and
the other critical types of `gpuprobe.gpu.nvidia.events`) and the host's kernel log files
(`kernel`: `NVRM: Xid (PCI:...): N, ...` lines of the current boot). An XID is tied to its GPU
by PCI address or NVML index; one entry per (GPU, XID), counted once even when both sources
saw it; one per (GPU, event type) for the other events, which raise the code the `gpus` check
raises for the same fault (ECC_UNCORRECTABLE, ROW_REMAP_FAILURE, GPU_LOST,
GPU_RECOVERY_REQUIRED). What the daemon saw is kept by the runner (the check's state,
`persist.KEEPS`), so events are not lost between runs (`observation`, the records in `model`).

Each XID is classified by NVIDIA's catalog (`gpuprobe.gpu.xid_catalog`). Critical XIDs (and
critical events) are sticky (`sticky`): they stay reported until the boot id changes (a
reboot) or an operator clears them (`clearing.clear`, `gpuprobe clear-xid`); the clearing, and
in the live daemon the sticky XIDs themselves, are kept in the state file (`state`, `persist`)
in the runner's state directory (`gpuprobe.checks.state`). A replayed snapshot uses a state
file only when `xid.state_dir` is configured, so a replay
gives the same findings on every machine; without one, a clearing lives in the process's
memory. A warning XID (an application's) stays reported in the daemon for
`xid.warning_window_seconds` after it last grew; a one-shot check reports every XID of the
boot. What the findings say is in `findings`.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict, cast

from gpuprobe.checks.amd import xid_amdgpu as amdgpu
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import WAKE_KERNEL_LOG, WAKE_NVML_EVENTS, Check, Policy
from gpuprobe.checks.xid import aer, sxid
from gpuprobe.checks.xid import state as xid_state
from gpuprobe.checks.xid.clearing import clear
from gpuprobe.checks.xid.findings import events_only, finding, log_code, read_nothing, summary
from gpuprobe.checks.xid.model import NAME, EventEntry, XidEntry
from gpuprobe.checks.xid.observation import observe
from gpuprobe.checks.xid.persist import KEEPS, save_sticky
from gpuprobe.checks.xid.policy import explain, render
from gpuprobe.checks.xid.settings import XidConfig
from gpuprobe.config import Config
from gpuprobe.families import GPU_LABELS, Family, gpu_labels, mappings, number
from gpuprobe.gpu.view import GpuView
from gpuprobe.host import Host
from gpuprobe.report import CheckResult, Status

__all__ = ["CHECK", "KEEPS", "NAME", "XidData", "clear", "explain_policy", "run"]


class XidData(TypedDict):
    """The check's data (docs/checks.md, check `xid`)."""

    xids: list[XidEntry]
    events: list[EventEntry]
    sxids: list[dict[str, Any]]  # NVSwitch SXids, as `sxid` gives them
    pcie_aer: list[dict[str, Any]]  # the PCIe AER devices read, as `aer` gives them
    policy: dict[str, Any]  # the effective xid.policy
    boot_id: str | None
    sources: dict[str, Any]
    state_file: str | None
    state_error: NotRequired[str | None]
    # With AMD GPUs on the PCI bus: amdgpu's faults this boot (`amdgpu`).
    amdgpu_faults: NotRequired[list[amdgpu.AmdgpuFaultEntry]]


def run(ctx: CheckContext, config: Config) -> CheckResult:
    """Gather this boot's XIDs, classify them, and report the active ones."""
    host = ctx.host
    directory = ctx.state_dir(KEEPS, config)
    with xid_state.LOCK:
        seen = observe(ctx, config, directory)
        persist_error = save_sticky(host, seen, directory)
        memory = ctx.kept(KEEPS)
        now = seen.now or datetime.fromtimestamp(host.clock.wall(), UTC)
        switches = sxid.gather(seen, config)
        sxid.judge(switches, seen.cleared, memory, config, now)
        aer_findings, aer_data = aer.read(host, config, seen.gpus, memory, now)
        amd = amdgpu.read(host, config, seen.kernel_log, memory.amdgpu_faults)
    amd_findings, amd_faults = amd if amd is not None else ([], [])
    active = [x for x in seen.xids if x.active]
    gpus = sorted({g.index for g in seen.gpus.values() if g.index is not None})
    findings = [finding(x) for x in active]
    findings += [sxid.finding(e, gpus) for e in switches if e.active]
    findings += aer_findings
    findings += amd_findings
    data: XidData = {
        "xids": [x.to_data() for x in seen.xids if x.is_xid],
        "events": [x.to_event_data() for x in seen.xids if not x.is_xid],
        "sxids": [e.to_data(gpus) for e in switches],
        "pcie_aer": aer_data,
        "policy": _policy_data(config, seen.driver),
        "boot_id": seen.boot_id,
        "sources": seen.sources,
        "state_file": str(xid_state.state_path(directory)) if directory else None,
    }
    if seen.state_error or persist_error:
        data["state_error"] = seen.state_error or persist_error
    text = summary(seen.xids, active)
    others = len(findings) - len(active) - len(amd_findings)
    if others:
        text += f"; {others} NVSwitch / PCIe AER finding{'s' if others != 1 else ''}"
    if amd is not None:
        data["amdgpu_faults"] = amd_faults
        text += f"; {amdgpu.summary(amd_faults)}"
    blind = read_nothing(seen.sources)
    if blind is None and not seen.xids:
        blind = events_only(seen.sources, memory.events_since)
    if blind is not None and not seen.xids:
        return CheckResult(NAME, blind, findings, data, floor=Status.UNKNOWN)
    return CheckResult(NAME, text, findings, data)


def _policy_data(config: Config, driver: str | None) -> dict[str, Any]:
    """The effective policy in the report: the catalog, the overrides in force for this
    driver and those it rules out (the whole table: `gpuprobe check --explain-policy`)."""
    explained = explain(config, driver)
    return {
        "catalog": explained["catalog"],
        "driver_version": driver,
        "overrides": explained["overrides"],
        "overrides_not_for_this_driver": explained["overrides_not_for_this_driver"],
    }


def explain_policy(host: Host, config: Config) -> dict[str, Any]:
    """The whole effective policy for this host's driver (`check --explain-policy`)."""
    return explain(config, GpuView(host).driver("nvidia").library_version)


def metric_families(data: XidData) -> Iterator[Family]:
    """`gpuprobe_gpu_xid_errors_total` from the check's data."""
    # `data[key] if key in data`, not `.get`: mypy holds an index to the TypedDict's keys.
    records: object = data["xids"] if "xids" in data else None
    if not isinstance(records, list):
        return
    xids = Family(
        "gpuprobe_gpu_xid_errors",
        "XID errors seen per GPU and XID since the agent started or they were cleared",
        (*GPU_LABELS, "xid"),
        counter=True,
    )
    for entry in mappings(records):
        record = cast(XidEntry, entry)  # its values still held to numbers: a report from elsewhere
        xid = number(record["xid"] if "xid" in record else None)
        count = number(record["count"] if "count" in record else None)
        gpu = number(record["gpu"] if "gpu" in record else None)
        if xid is None or count is None or gpu is None:
            continue
        xids.add([*gpu_labels(record, "gpu"), str(int(xid))], count)
    yield xids


CHECK: Check[XidData] = Check(
    NAME,
    run,
    section=XidConfig,
    metrics=metric_families,
    condition="GPUHardwareReady",
    wakes=(WAKE_NVML_EVENTS, WAKE_KERNEL_LOG),
    # the NVIDIA driver's lines (XIDs, a GPU fallen off the bus, RmInitAdapter), the NVSwitch
    # driver's SXids, PCIe AER and the amdgpu driver's faults; not the kernel's boot line
    kernel_events=("nvrm", "sxid", "aer", "amdgpu_fault"),
    clear=clear,
    keeps=KEEPS,
    policy=Policy(explain_policy, render),
    log_code=log_code,
)
