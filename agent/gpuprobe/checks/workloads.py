"""Check `workloads`: whose GPU is it, and is it used?

Asks the kubelet's PodResources API which pods and containers hold each GPU and MIG device
(device plugin and DRA), and ties each GPU process to its pod through its cgroup (see
`gpuprobe.workloads`). AMD GPUs are attributed alike: the AMD device plugin's `amd.com/gpu`
grants name them by PCI address, and their processes are those holding their render nodes
(`gpuprobe.gpu.amd.inventory`); a process that holds AMD's KFD and no render node is listed
node-wide (`data.kfd_only_processes`), on no GPU. Judges:

- GPU_USED_WITHOUT_ALLOCATION: a process of a pod that holds neither the device nor its GPU
  runs on it (a container given every GPU by NVIDIA_VISIBLE_DEVICES=all, a privileged pod,
  a host `/dev/dri` mounted into a pod);
- GPU_ALLOCATED_IDLE: a device held by a pod has had no process and utilization at or below
  `workloads.idle_utilization_percent` for longer than `workloads.idle_window_seconds` (the
  check remembers since when: its state, `KEEPS`, kept by the runner; only the daemon raises it);
- ALLOCATION_UNKNOWN: the kubelet's socket is expected but absent, or the kubelet refused or
  did not answer within `workloads.timeout_seconds`. A node without a kubelet (not
  Kubernetes) is OK, and the summary says so.

Each round also adds to the idle accounting (`gpuprobe.workloads.accounting`): per GPU the
seconds allocated, allocated but idle by namespace, and unallocated, in `data.accounting`
(the daemon's counters). A round whose allocation is unknown counts nothing, and the round
after it starts afresh. `data.usage` sums devices and accounting for the node
(`gpuprobe.workloads.usage`): what a fleet audit reads.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check
from gpuprobe.checks.rules.sections import WorkloadsConfig
from gpuprobe.checks.rules.vendors import node_uses
from gpuprobe.checks.state import Keeps
from gpuprobe.config import Config
from gpuprobe.families import GPU_LABELS, Family, gpu_labels, mappings, number, text
from gpuprobe.host import Host
from gpuprobe.host.podresources import PodResourcesAnswer
from gpuprobe.report import Action, CheckResult, Finding, PodRef, Severity
from gpuprobe.workloads.accounting import (
    STATE_FILE,
    Ledger,
    account,
    ledger_from_json,
    new_ledger,
)
from gpuprobe.workloads.allocations import Grant
from gpuprobe.workloads.attribution import Attribution, DeviceUse, attribute
from gpuprobe.workloads.kubelet import ask_podresources, has_kubelet_dir, has_podresources_dir
from gpuprobe.workloads.usage import node_usage

NAME = "workloads"


class WorkloadsData(TypedDict):
    """The check's data (docs/checks.md, check `workloads`; docs/workloads.md)."""

    kubelet: Any  # how the kubelet answered PodResources
    devices: list[dict[str, Any]]  # each GPU and MIG device with its holders and users
    unresolved: list[dict[str, Any]]  # grants that name no device the GPU drivers list
    accounting: dict[str, Any]  # the daemon's allocated / idle / unallocated GPU-seconds
    usage: dict[str, Any]  # the node's digest of devices and accounting (workloads.usage)
    # With AMD GPUs: the processes holding the KFD and no GPU's render node (GPU unknown).
    kfd_only_processes: NotRequired[list[dict[str, Any]]]


@dataclass
class WorkloadsKept:
    """What the check keeps between runs: the GPU-seconds ledger (loaded from the runner's
    state directory at the first run, where there is one) and its content as that directory
    last held it, and since when (monotonic) each device held by pods has been idle, with the
    pods that held it then."""

    ledger: Ledger | None = None
    saved: dict[str, Any] | None = None
    idle_since: dict[str, tuple[tuple[PodRef, ...], float]] = field(default_factory=dict)


def _configured_dir(config: Config) -> str | None:
    """The state directory `workloads.state_dir` names (None: unset)."""
    return config.section(NAME, WorkloadsConfig).state_dir


# The ledger survives a restart in the runner's state directory (`workload-accounting.json`).
KEEPS: Keeps[WorkloadsKept] = Keeps(
    WorkloadsKept,
    survives_restart=True,
    configured_dir=_configured_dir,
    setting="workloads.state_dir",
)
WHAT = "workload accounting state"
MISSING = "create it or set workloads.state_dir"


def run(ctx: CheckContext, config: Config) -> CheckResult:
    """Attribute every GPU to its pods and judge how they use it."""
    host = ctx.host
    settings = config.section(NAME, WorkloadsConfig)
    answer = ask_podresources(host, settings.socket, settings.timeout_seconds)
    expected = settings.expect_kubelet
    if expected is None:
        expected = has_podresources_dir(host)
    attribution = attribute(host, answer, node_uses(ctx))
    known = answer.list is not None or (answer.absent and not expected)
    devices = [d.to_dict() for d in attribution.devices]
    accounting = _account(ctx, config, attribution, settings, known)
    data: WorkloadsData = {
        "kubelet": _kubelet(answer, settings, expected),
        "devices": devices,
        "unresolved": [_unresolved(g) for g in attribution.unresolved],
        "accounting": accounting,
        "usage": node_usage(devices, accounting),
    }
    if attribution.kfd_only is not None:
        data["kfd_only_processes"] = [p.to_dict() for p in attribution.kfd_only]
    if answer.absent and not expected:
        return CheckResult(NAME, _no_kubelet_summary(host, settings), [], data)
    if answer.list is None:
        return CheckResult(NAME, _unknown_summary(answer), [_unknown(answer, settings)], data)
    findings = _unallocated_use(attribution)
    findings += _idle(host, ctx.kept(KEEPS), attribution, settings, data)
    return CheckResult(NAME, _summary(attribution), findings, data)


def _account(
    ctx: CheckContext,
    config: Config,
    attribution: Attribution,
    settings: WorkloadsConfig,
    known: bool,
) -> dict[str, Any]:
    """Add this round to the daemon's GPU-seconds and return the totals, kept in the
    runner's state directory (where there is one) after each round that added time."""
    kept, directory, error = ctx.kept(KEEPS), ctx.state_dir(KEEPS, config), None
    if kept.ledger is None:  # the first run: the ledger the directory holds, if any
        loaded, error = (None, None)
        if directory is not None:
            loaded, error = directory.load_kept(STATE_FILE, WHAT, ledger_from_json)
        kept.ledger = loaded or new_ledger()
        kept.saved = loaded.to_json() if loaded else None
    ledger = kept.ledger
    if known:
        devices = attribution.devices
        account(ledger, devices, ctx.host.clock.monotonic(), settings.idle_utilization_percent)
    else:
        ledger.last_round = None  # an unknown stretch is not counted
    facts: dict[str, Any] = {
        "since": ledger.since,
        "gpus": [g.to_dict() for g in sorted(ledger.gpus.values(), key=lambda g: g.gpu)],
    }
    if directory is not None:
        facts["state_file"] = str(directory.file(STATE_FILE))
        content = ledger.to_json()
        # Written once it holds time (a one-shot check counts none: it leaves the daemon's
        # file, or the directory, alone), and then when it changed.
        counted = any(g.allocated or g.unallocated for g in ledger.gpus.values())
        if content != kept.saved and (kept.saved is not None or counted):
            failed = directory.save_said(STATE_FILE, WHAT, content, MISSING)
            kept.saved = content if failed is None else kept.saved
            error = failed or error
        if error is not None:
            facts["state_error"] = error
    return facts


def _no_kubelet_summary(host: Host, settings: WorkloadsConfig) -> str:
    if has_kubelet_dir(host):
        return (
            f"no kubelet PodResources socket at {settings.socket}: GPU holders are not "
            "attributed on this node"
        )
    return "not a Kubernetes node (no kubelet): GPU holders are not attributed"


def _kubelet(answer: PodResourcesAnswer, settings: WorkloadsConfig, expected: bool) -> Any:
    state = "absent" if answer.absent else "error" if answer.error else "answered"
    facts: dict[str, Any] = {"socket": settings.socket, "state": state, "expected": expected}
    if answer.error:
        facts["error"] = answer.error
    if answer.list is not None:
        facts["pods"] = len(answer.list.pod_resources)
    if answer.allocatable is not None:
        facts["allocatable"] = {
            d.resource_name: len(d.device_ids) for d in answer.allocatable.devices
        }
    return facts


def _unresolved(grant: Grant) -> dict[str, Any]:
    d: dict[str, Any] = grant.pod.to_dict()
    d.update({"resource": grant.resource, "device_id": grant.device_id, "via": grant.via})
    return d


def _unknown_summary(answer: PodResourcesAnswer) -> str:
    if answer.absent:
        return "GPU holders unknown: the kubelet's PodResources socket is absent"
    return f"GPU holders unknown: the kubelet's PodResources API answered {answer.error}"


def _unknown(answer: PodResourcesAnswer, settings: WorkloadsConfig) -> Finding:
    if answer.absent:
        why = (
            f"the kubelet's PodResources socket {settings.socket} is absent (the kubelet is "
            "down, or the agent does not mount /var/lib/kubelet/pod-resources)"
        )
    elif answer.error == "DEADLINE_EXCEEDED":
        why = (
            f"the kubelet's PodResources API at {settings.socket} did not answer within "
            f"{settings.timeout_seconds:g} s (a hung kubelet)"
        )
    else:
        why = f"the kubelet's PodResources API at {settings.socket} refused: {answer.error}"
    return Finding(
        "ALLOCATION_UNKNOWN",
        Severity.UNKNOWN,
        f"{why}; which pods hold the GPUs is unknown",
        Action.FIX_CONFIG if answer.absent else Action.NONE,
    )


def _unallocated_use(attribution: Attribution) -> list[Finding]:
    """A pod's process on a device that neither it nor its GPU was given."""
    findings = []
    reported: set[tuple[str, PodRef]] = set()
    for gpu in attribution.devices:
        if gpu.mig is not None or gpu.processes is None:
            continue  # MIG devices' processes are on their GPU's list too: judged once, here
        migs = [d for d in attribution.devices if d.mig is not None and d.gpu_key == gpu.gpu_key]
        for owner in gpu.processes:
            if owner.pod is None:
                continue  # a host process, or a pod the log directories do not name
            where = next((m for m in migs if owner in (m.processes or [])), gpu)
            grants = where.grants + gpu.grants if where is not gpu else _all_grants(gpu, migs)
            allowed = {(g.pod.namespace, g.pod.pod) for g in grants}
            pod = owner.pod
            if (pod.namespace, pod.pod) in allowed or (where.resource, pod) in reported:
                continue
            reported.add((where.resource, pod))
            findings.append(_used_without(where, owner.pid, pod))
    return findings


def _all_grants(gpu: DeviceUse, migs: list[DeviceUse]) -> list[Grant]:
    """A process on a GPU outside its MIG devices' lists may use any of them."""
    return gpu.grants + [g for m in migs for g in m.grants]


def _used_without(where: DeviceUse, pid: int, pod: PodRef) -> Finding:
    holders = ", ".join(str(p) for p in where.holders)
    given = f"it is allocated to {holders}" if holders else "no pod was given it"
    return Finding(
        "GPU_USED_WITHOUT_ALLOCATION",
        Severity.WARNING,
        f"{_name(where)} runs process {pid} of pod {pod}, which the kubelet did not give this "
        f"device ({given}): a container sees GPUs it was not given "
        f"({WAYS_IN[where.vendor]}) and takes them from the scheduler",
        Action.FIX_CONFIG,
        where.resource,
        (pod,),
    )


def _idle(
    host: Host,
    state: WorkloadsKept,
    attribution: Attribution,
    settings: WorkloadsConfig,
    data: WorkloadsData,
) -> list[Finding]:
    """Devices held by pods with no process and no load, past the window."""
    since = state.idle_since
    now = host.clock.monotonic()
    findings = []
    for device, facts in zip(attribution.devices, data["devices"], strict=True):
        holders = tuple(device.holders)
        if not holders or not _is_idle(device, settings):
            since.pop(device.resource, None)
            continue
        kept = since.get(device.resource)
        if kept is None or kept[0] != holders:  # a new holder starts a new idle stretch
            kept = since[device.resource] = (holders, now)
        idle = now - kept[1]
        facts["idle_seconds"] = round(idle, 3)
        if idle >= settings.idle_window_seconds:
            findings.append(_idle_finding(device, idle, settings))
    return findings


def _is_idle(device: DeviceUse, settings: WorkloadsConfig) -> bool:
    if device.processes is None or device.processes:
        return False
    load = device.utilization_percent
    return load is None or load <= settings.idle_utilization_percent


def _idle_finding(device: DeviceUse, idle: float, settings: WorkloadsConfig) -> Finding:
    holders = ", ".join(str(p) for p in device.holders)
    return Finding(
        "GPU_ALLOCATED_IDLE",
        Severity.WARNING,
        f"{_name(device)} is allocated to {holders} and has had no process and utilization at "
        f"or below {settings.idle_utilization_percent:g} % for {_duration(idle)} (window "
        f"{_duration(settings.idle_window_seconds)}): it is paid for and unused; release it "
        "or run work on it",
        Action.NONE,
        device.resource,
        tuple(device.holders),
    )


# How a container comes to see GPUs it was not given, by vendor.
WAYS_IN = {
    "nvidia": "NVIDIA_VISIBLE_DEVICES=all, a privileged pod",
    "amd": "a privileged pod, the host's /dev/dri mounted into it",
}


def _name(device: DeviceUse) -> str:
    gpu = f"GPU {device.gpu}" + (f" ({device.uuid})" if device.uuid else "")
    if device.mig is None:
        return gpu
    return f"MIG device {device.mig.gi}:{device.mig.ci} ({device.mig.uuid}) of {gpu}"


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _summary(attribution: Attribution) -> str:
    if not attribution.devices:
        return "no GPU to attribute"
    units = _allocatable_units(attribution.devices)
    held = [d for d in units if d.grants]
    pods = {(p.namespace, p.pod) for d in held for p in d.holders}
    kind = "MIG devices and GPUs" if any(d.mig for d in units) else "GPUs"
    return (
        f"{len(held)} of {len(units)} {kind} allocated, to {len(pods)} "
        f"pod{'' if len(pods) == 1 else 's'}; {len(units) - len(held)} unallocated"
    )


def _allocatable_units(devices: list[DeviceUse]) -> list[DeviceUse]:
    """What the kubelet hands out: MIG devices of MIG-enabled GPUs, else whole GPUs."""
    with_migs = {d.gpu_key for d in devices if d.mig is not None}
    return [d for d in devices if d.mig is not None or d.gpu_key not in with_migs or d.grants]


def metric_families(data: WorkloadsData) -> Iterator[Family]:
    """Who holds each GPU (one join series per holder, kube-state-metrics style) and the
    idle accounting's GPU-seconds, from the check's data."""
    if len(data) == 0:  # a result without data (not this check's own): no family
        return
    # `data[key] if key in data`, not `.get`: mypy holds an index to the TypedDict's keys. The
    # values are still held to numbers and text: a report may come from elsewhere.
    info = Family(
        "gpuprobe_gpu_allocation_info",
        "1 per pod container the kubelet gave a GPU or MIG device (join on gpu, uuid)",
        (*GPU_LABELS, "mig", "namespace", "pod", "container", "resource"),
    )
    seen: set[tuple[str, ...]] = set()
    for device in mappings(data["devices"] if "devices" in data else None):
        mig = device.get("mig")
        mig_uuid = (text(mig.get("uuid")) or "") if isinstance(mig, Mapping) else ""
        for holder in mappings(device.get("holders")):
            labels = (
                *gpu_labels(device, "gpu"),
                mig_uuid,
                *(text(holder.get(k)) or "" for k in ("namespace", "pod", "container")),
                text(holder.get("resource")) or "",
            )
            if labels not in seen:
                seen.add(labels)
                info.add(labels, 1)
    yield info
    accounting: object = data["accounting"] if "accounting" in data else None
    gpus = mappings(accounting.get("gpus") if isinstance(accounting, Mapping) else None)
    allocated = Family(
        "gpuprobe_gpu_allocated_seconds",
        "GPU-seconds the GPU was allocated to pods (MIG devices as their share of the GPU)",
        GPU_LABELS,
        counter=True,
    )
    idle = Family(
        "gpuprobe_gpu_idle_allocated_seconds",
        "GPU-seconds the GPU was allocated but idle, by the holders' namespace",
        (*GPU_LABELS, "namespace"),
        counter=True,
    )
    unallocated = Family(
        "gpuprobe_gpu_unallocated_seconds",
        "GPU-seconds no pod held the GPU",
        GPU_LABELS,
        counter=True,
    )
    for gpu in gpus:
        labels_of_gpu = gpu_labels(gpu, "gpu")
        if (value := number(gpu.get("allocated_seconds"))) is not None:
            allocated.add(labels_of_gpu, value)
        if (value := number(gpu.get("unallocated_seconds"))) is not None:
            unallocated.add(labels_of_gpu, value)
        by_namespace = gpu.get("idle_allocated_seconds")
        if isinstance(by_namespace, Mapping):
            for namespace, seconds in sorted(by_namespace.items()):
                if (value := number(seconds)) is not None:
                    idle.add([*labels_of_gpu, str(namespace)], value)
    yield from (allocated, idle, unallocated)


CHECK: Check[WorkloadsData] = Check(
    NAME,
    run,
    section=WorkloadsConfig,
    metrics=metric_families,
    condition="GPURuntimeReady",
    attributes_pods=True,
    keeps=KEEPS,
    # The audit's usage totals (gpuprobe.audit.usage): whether the kubelet answered, and the
    # node's usage digest (a dozen numbers, not every device's holders).
    summary_keys={
        "kubelet": {"state": None},
        "usage": {
            "gpus": {"allocated": None, "busy": None, "allocated_idle": None, "unallocated": None},
            "seconds": {"allocated": None, "busy": None, "unallocated": None},
            "idle_allocated_seconds": None,  # by namespace
            "since": None,
        },
    },
)
