"""The XID check's NVSwitch part: SXid errors in the kernel log, judged by NVIDIA's SXid catalog.

One entry per (switch, SXid) this boot (`gpuprobe.gpu.kernel_log` reads the lines, the catalog
is `gpuprobe.gpu.sxid_catalog`). A critical SXid (fatal) stays reported for the boot, as the
log keeps it, until `gpuprobe clear-xid` clears it (nothing new since); a non-fatal one stays
reported in the daemon for `xid.warning_window_seconds` after it last grew. `xid.policy` rules
with `sxid:` change severity and action, ignore, or hold a finding back below a count. A fatal
SXid stops the NVLink traffic through its switch: on an HGX baseboard every GPU links to every
NVSwitch, so the finding names the node's GPUs as the ones losing their fabric.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuprobe.checks.xid import policy
from gpuprobe.checks.xid.memory import XidMemory
from gpuprobe.checks.xid.model import Observation, later
from gpuprobe.checks.xid.settings import xid_settings
from gpuprobe.checks.xid.sticky import covers
from gpuprobe.config import Config
from gpuprobe.gpu.kernel_log import SxidLine
from gpuprobe.gpu.sxid_catalog import GUIDE_URL, SxidInfo, classify
from gpuprobe.report import Action, Finding, format_time


@dataclass
class SwitchError:
    """One SXid on one NVSwitch this boot: how often, when last, on which ports."""

    pci: str
    device: str
    sxid: int
    count: int = 0
    fatal: bool = False
    links: set[int] = field(default_factory=set)
    last_seen: str | None = None
    message: str = ""
    times: list[str] = field(default_factory=list)
    override: policy.Override | None = None
    active: bool = True
    cleared: bool = False
    ignored: bool = False
    held: bool = False

    @property
    def key(self) -> str:
        """The key in memory and in the state file's clearings."""
        return f"nvswitch:{self.pci}|sxid:{self.sxid}"

    @property
    def info(self) -> SxidInfo:
        """The verdict: the line's word and the catalog, with the policy's override."""
        return policy.apply(classify(self.sxid, self.fatal), self.override)

    def to_data(self, gpus: list[int]) -> dict[str, Any]:
        """The SXid as an entry of the check's `data.sxids`."""
        info = self.info
        data: dict[str, Any] = {
            "nvswitch": self.pci,
            "device": self.device,
            "sxid": self.sxid,
            "name": info.name,
            "catalog_class": info.catalog_class,
            "fatal": self.fatal,
            "links": sorted(self.links),
            "count": self.count,
            "last_seen": self.last_seen,
            "severity": info.severity.value,
            "action": info.action.value,
            "message": self.message,
            "gpus_affected": gpus if info.critical else [],
            "active": self.active,
            "cleared": self.cleared,
        }
        if self.override is not None:
            data["policy"] = self.override.label
        if self.ignored:
            data["ignored"] = True
        if self.held:
            data["below_threshold"] = True
        return data


def gather(seen: Observation, config: Config) -> list[SwitchError]:
    """This boot's SXids, one entry per (switch, SXid), with the policy rule for each."""
    errors: dict[tuple[str, int], SwitchError] = {}
    for line, times in seen.sxids:
        error = errors.setdefault(
            (line.pci, line.sxid), SwitchError(line.pci, line.device, line.sxid)
        )
        _fold(error, line, times)
    for error in errors.values():
        error.override = policy.find(config, "sxid", error.sxid, seen.driver)
    return sorted(errors.values(), key=lambda e: (e.pci, e.sxid))


def _fold(error: SwitchError, line: SxidLine, times: int) -> None:
    stamp = format_time(line.time) if line.time else None
    error.count += times
    if line.link is not None:
        error.links.add(line.link)
    if stamp:
        error.times = sorted(error.times + [stamp] * times)
    # A fatal line speaks for the SXid; among equals, the later.
    newer = later(error.last_seen, stamp) == stamp
    if (line.fatal and not error.fatal) or (newer and (line.fatal or not error.fatal)):
        error.message = line.message
    error.fatal = error.fatal or line.fatal
    error.last_seen = later(error.last_seen, stamp)


def judge(
    errors: list[SwitchError],
    cleared: dict[str, dict[str, Any]],
    memory: XidMemory,
    config: Config,
    now: datetime,
) -> None:
    """Mark each SXid ignored, held back, cleared or active (see the module's docstring)."""
    grew = memory.sxid_grew
    stamp = now.timestamp()
    for error in errors:
        if error.override is not None and error.override.rule.ignore:
            error.ignored, error.active = True, False
            continue
        if not policy.threshold_met(error.override, error.count, error.times, now):
            error.held, error.active = True, False
            continue
        mark = cleared.get(error.key)
        error.cleared = mark is not None and covers(mark, error.count, error.last_seen)
        last = grew.get(error.key)
        if last is None or error.count > last[0]:
            grew[error.key] = [error.count, stamp]
        if error.info.critical:
            error.active = not error.cleared
        else:
            recent = stamp - grew[error.key][1] <= xid_settings(config).warning_window_seconds
            error.active = not error.cleared and recent


def finding(error: SwitchError, gpus: list[int]) -> Finding:
    """The SXID finding of one active SXid."""
    info = error.info
    times = f"{error.count} time{'s' if error.count != 1 else ''}"
    ports = ", ".join(str(link) for link in sorted(error.links))
    on = f" on link {ports}" if len(error.links) == 1 else f" on links {ports}" if ports else ""
    last = f", last at {error.last_seen}" if error.last_seen else ""
    word = "Fatal" if error.fatal else "Non-fatal"
    said = f' ("{error.message}")' if error.message else ""
    rule = f" [{error.override.label}]" if error.override is not None else ""
    return Finding(
        "SXID",
        info.severity,
        f"NVSwitch {error.pci} ({error.device}): SXid {error.sxid}, {info.name} "
        f"({info.catalog_class}), {word}{on}, seen {times} this boot{last}{said}: "
        f"{_advice(info, gpus)}{rule}",
        info.action,
        f"nvswitch:{error.pci}",
    )


def _advice(info: SxidInfo, gpus: list[int]) -> str:
    affected = (
        f"GPUs {', '.join(str(g) for g in gpus)} lose NVLink through it"
        if gpus
        else "the GPUs linked through it lose NVLink"
    )
    sticky = " (reported until the node reboots or `gpuprobe clear-xid` clears it)"
    return {
        Action.RESET_GPU: f"NVLink traffic through this switch stopped: {affected}; drain the "
        "node, stop the fabric manager and reset the GPUs and NVSwitches (nvidia-smi -r), or "
        f"reboot{sticky}",
        Action.REBOOT_NODE: f"always fatal to the NVLink fabric: {affected}; drain and reboot "
        f"the node{sticky}",
        Action.HARDWARE_INSPECTION: "the switch is running hot: check the system's cooling",
    }.get(info.action, f"no repair is due now: watch whether it repeats ({GUIDE_URL})")
