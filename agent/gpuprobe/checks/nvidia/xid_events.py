"""NVIDIA's rules for the xid check's NVML events: what each critical event type means (its
finding code, severity and action, `gpuprobe.gpu.nvidia.events`), which types an entry kept
across runs may name, and what the finding tells an operator to do (NVIDIA's tools named).

The xid check keeps its XIDs and events vendor-neutral (`checks.xid.model`); what an NVML
event is lives here, in NVIDIA's rules folder, so the check imports no vendor package.
"""

from __future__ import annotations

from gpuprobe.gpu.nvidia.events import EVENTS, RECOVERY, EventInfo, info
from gpuprobe.report import Action, Finding

__all__ = ["RECOVERY", "EventInfo", "event_finding", "known", "verdict"]

# What to do about a critical NVML event, by its action (`{gpu}`: ` -i <index>` when known).
EVENT_ADVICE = {
    Action.RESET_GPU: "drain the GPU and reset it (nvidia-smi -r{gpu}) or reboot; inspect the "
    "GPU if it recurs",
    Action.REBOOT_NODE: "drain and reboot the node; inspect the GPU if it happens again",
    Action.DRAIN_NODE: "drain the GPU's peer-to-peer (NVLink) work, as the driver asks",
    Action.HARDWARE_INSPECTION: "take the GPU out of service; have it inspected or replaced",
    Action.FIX_CONFIG: "recover the GPU's IMEX domain, as the driver asks",
}


def known(event: str) -> bool:
    """Whether an NVML event type is one the check judges (an entry naming another was written
    by no run of this version)."""
    return event in EVENTS


def verdict(event: str, detail: str = "") -> EventInfo | None:
    """What an NVML event type (with its detail: a recovery action's) means; None for a type
    the check does not judge."""
    return info(event, detail)


def event_finding(
    verdict: EventInfo,
    *,
    where: str,
    event: str,
    detail: str,
    index: int | None,
    seen: str,
    sticky: str,
    resource: str,
) -> Finding:
    """The finding of one active critical NVML event on a GPU (`where`, `index`), `seen`
    ("3 times this boot, last at ..."), `sticky` saying how long it stays."""
    gpu = f" -i {index}" if index is not None else ""
    advice = EVENT_ADVICE.get(verdict.action, "").format(gpu=gpu)
    action = f" ({detail})" if detail else ""
    return Finding(
        verdict.code,
        verdict.severity,
        f"{where}: NVML event {event}{action}, {verdict.description}, seen {seen}: "
        f"{advice}{sticky}",
        verdict.action,
        resource,
    )
