"""Check `sharing`: is GPU sharing (time-slicing, MPS) set up the way the device plugin says?

Reads the sharing the NVIDIA device plugin's configuration asks for (`device_plugin.
config_file`; an invalid one is the `device_plugin` check's finding, here it is only noted),
then holds the node against it:

- time-slicing: each GPU counts `replicas` times, so the schedulable units are GPUs × replicas
  (in `data`); the GPUs must be in compute mode Default, since an exclusive mode lets only one
  process in and the pods that share the GPU fail;
- MPS: the MPS control daemon (`nvidia-cuda-mps-control`) must run; the plugin's MPS daemon
  sets the GPUs to EXCLUSIVE_PROCESS when it starts (k8s-device-plugin
  `cmd/mps-control-daemon/mps/daemon.go`), so Default means it never started or was undone;
  the plugin does not share MIG-enabled GPUs with MPS;
- any mode: a GPU in compute mode Prohibited runs no CUDA process at all.
"""

from __future__ import annotations

from typing import Any, TypedDict

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check
from gpuprobe.config import Config
from gpuprobe.containers.device_plugin import (
    RESOURCE_PREFIX,
    DevicePluginConfig,
    SharedResource,
    device_plugin_file,
)
from gpuprobe.gpu.nvidia.modes import (
    DEFAULT,
    EXCLUSIVE_PROCESS,
    EXCLUSIVE_THREAD,
    PROHIBITED,
    GpuModes,
    read_modes,
)
from gpuprobe.gpu.nvidia.mps import MPS_CONTROL, mps_control_daemons
from gpuprobe.host import Host
from gpuprobe.report import Action, CheckResult, Finding, Severity

NAME = "sharing"
GPU_RESOURCE = RESOURCE_PREFIX + "gpu"


def _gpu_data(gpu: GpuModes) -> dict[str, Any]:
    """One GPU's entry in `data.gpus`."""
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "compute_mode": None if gpu.compute_mode is None else gpu.mode_name,
        "mig_enabled": gpu.mig_enabled,
    }


class SharingData(TypedDict):
    """The check's data (docs/checks.md, check `sharing`)."""

    config_file: str | None
    config_note: str | None
    strategy: str | None
    resources: list[dict[str, Any]]  # each shared resource with its schedulable units
    mps_control_daemon_pids: list[int]
    gpus: list[dict[str, Any]]


def run(ctx: CheckContext, config: Config) -> CheckResult:
    """Judge time-slicing and MPS against the GPUs' compute and MIG modes."""
    host = ctx.host
    gpus_present = ctx.gpus.gpu_count("nvidia")
    plugin, note, path = _plugin(host, config)
    gpus = read_modes(host) if gpus_present else []
    daemons = mps_control_daemons(host)
    strategy = plugin.sharing_strategy if plugin else None
    data: SharingData = {
        "config_file": path,
        "config_note": note,
        "strategy": strategy,
        "resources": [],
        "mps_control_daemon_pids": daemons,
        "gpus": [_gpu_data(g) for g in gpus],
    }
    if not gpus_present:
        return CheckResult(NAME, "no NVIDIA GPU on this node: nothing to share", [], data)
    findings = [_prohibited(g) for g in gpus if g.compute_mode == PROHIBITED]
    if plugin is None:
        # What is known without the plugin's configuration: the GPUs' modes and the daemon.
        seen = f"; MPS control daemon running (pid {daemons[0]})" if daemons else ""
        summary = f"{_modes(gpus)}{seen}; sharing not judged: {note}"
        return CheckResult(NAME, summary, findings, data)
    data["resources"] = [_units(r, gpus, plugin) for r in plugin.shared]
    if strategy == "mps":
        findings += _mps(plugin, gpus, daemons)
    elif strategy == "time-slicing":
        findings += [
            _mode_mismatch(g, "time-slicing", Severity.CRITICAL, "DEFAULT")
            for g in gpus
            if _exclusive(g)
        ]
    return CheckResult(NAME, _summary(strategy, data, daemons), findings, data)


def _plugin(host: Host, config: Config) -> tuple[DevicePluginConfig | None, str | None, str | None]:
    """The plugin's configuration, or why there is none; and the file it came from."""
    file = device_plugin_file(host, config)
    if file is None:
        return None, "no device plugin configuration given (device_plugin.config_file)", None
    if isinstance(file.result, DevicePluginConfig):
        return file.result, None, file.path
    why = f"the device plugin configuration {file.path} is invalid (see device_plugin)"
    return None, why, file.path


def _units(
    resource: SharedResource, gpus: list[GpuModes], plugin: DevicePluginConfig
) -> dict[str, Any]:
    """A shared resource with its schedulable units: GPUs × replicas, when GPUs count them."""
    entry = resource.to_data()
    counted = resource.name == GPU_RESOURCE and not (
        plugin.mig_strategy != "none" and any(g.mig_enabled for g in gpus)
    )
    shared = None
    if counted:
        if resource.devices == "all":
            shared = len(gpus)
        elif isinstance(resource.devices, int):
            shared = min(resource.devices, len(gpus))
        else:
            shared = len(resource.devices)
    entry["gpus"] = shared
    entry["schedulable_units"] = shared * resource.replicas if shared is not None else None
    return entry


def _shared_gpus(plugin: DevicePluginConfig, gpus: list[GpuModes]) -> list[GpuModes]:
    """The GPUs MPS shares: those listed by index, else all (counts and UUIDs: all)."""
    indexes: set[int] = set()
    for resource in plugin.mps:
        if not isinstance(resource.devices, tuple):
            return gpus
        for ref in resource.devices:
            if not ref.isdigit():
                return gpus
            indexes.add(int(ref))
    return [g for g in gpus if g.index in indexes]


def _exclusive(gpu: GpuModes) -> bool:
    return gpu.compute_mode in (EXCLUSIVE_THREAD, EXCLUSIVE_PROCESS)


def _mps(plugin: DevicePluginConfig, gpus: list[GpuModes], daemons: list[int]) -> list[Finding]:
    findings = []
    if not daemons:
        findings.append(
            Finding(
                "MPS_DAEMON_NOT_RUNNING",
                Severity.CRITICAL,
                f"the device plugin shares GPUs with MPS ({plugin.path}) but no {MPS_CONTROL} "
                "process runs on this node: MPS pods cannot connect and fail. Check the "
                "plugin's MPS control daemon pod on this node (it needs the node label "
                "nvidia.com/mps.capable=true) and its logs",
                Action.RESTART_APP,
            )
        )
    for gpu in _shared_gpus(plugin, gpus):
        if gpu.mig_enabled:
            findings.append(
                Finding(
                    "MPS_MIG_CONFLICT",
                    Severity.CRITICAL,
                    f"GPU {gpu.index} has MIG enabled but the device plugin shares it with MPS "
                    f"({plugin.path}): the plugin does not share MIG-enabled GPUs with MPS. "
                    "Disable MIG on it or share it by time-slicing",
                    Action.FIX_CONFIG,
                    gpu.resource,
                )
            )
        elif gpu.compute_mode == EXCLUSIVE_THREAD:
            findings.append(_mode_mismatch(gpu, "MPS", Severity.CRITICAL, "EXCLUSIVE_PROCESS"))
        elif gpu.compute_mode == DEFAULT and daemons:
            findings.append(_mode_mismatch(gpu, "MPS", Severity.WARNING, "EXCLUSIVE_PROCESS"))
    return findings


def _mode_mismatch(gpu: GpuModes, sharing: str, severity: Severity, wanted: str) -> Finding:
    if sharing == "MPS" and gpu.compute_mode == DEFAULT:
        why = (
            "the MPS control daemon sets EXCLUSIVE_PROCESS when it starts, so processes can "
            "bypass MPS on it"
        )
    elif sharing == "MPS":
        why = "MPS does not run on a GPU in this mode"
    else:
        why = (
            "only one process can use it at a time, so the pods that share it fail with "
            "'CUDA-capable device(s) is/are busy or unavailable'"
        )
    return Finding(
        "COMPUTE_MODE_MISMATCH",
        severity,
        f"GPU {gpu.index} is in compute mode {gpu.mode_name} but is shared with {sharing}: "
        f"{why}. Set it: nvidia-smi -i {gpu.index} -c {wanted}",
        Action.FIX_CONFIG,
        gpu.resource,
    )


def _prohibited(gpu: GpuModes) -> Finding:
    return Finding(
        "COMPUTE_MODE_MISMATCH",
        Severity.CRITICAL,
        f"GPU {gpu.index} is in compute mode Prohibited: no CUDA process can use it. "
        f"Set it: nvidia-smi -i {gpu.index} -c DEFAULT",
        Action.FIX_CONFIG,
        gpu.resource,
    )


def _modes(gpus: list[GpuModes]) -> str:
    """`8 GPUs in compute mode Default`, or `8 GPUs in compute modes Default (7),
    ExclusiveProcess (1)`; a mode NVML did not give counts as unreadable."""
    count: dict[str, int] = {}
    for gpu in gpus:
        name = gpu.mode_name if gpu.compute_mode is not None else "unreadable"
        count[name] = count.get(name, 0) + 1
    noun = "GPU" if len(gpus) == 1 else "GPUs"
    if len(count) == 1:
        return f"{len(gpus)} {noun} in compute mode {next(iter(count))}"
    modes = ", ".join(f"{name} ({n})" for name, n in sorted(count.items()))
    return f"{len(gpus)} {noun} in compute modes {modes}"


def _summary(strategy: str | None, data: SharingData, daemons: list[int]) -> str:
    if strategy == "none":
        return "no GPU sharing (whole GPUs)"
    parts = []
    for r in data["resources"]:
        if r["schedulable_units"] is not None:
            parts.append(
                f"{r['gpus']} GPUs × {r['replicas']} replicas = {r['schedulable_units']} "
                f"{r['advertised']}"
            )
        else:
            parts.append(f"{r['advertised']} × {r['replicas']} replicas")
    text = f"{strategy}: " + ", ".join(parts)
    if strategy == "mps":
        text += (
            f"; MPS control daemon running (pid {daemons[0]})"
            if daemons
            else "; MPS control daemon not running"
        )
    return text


CHECK: Check[SharingData] = Check(
    NAME,
    run,
    condition="GPURuntimeReady",
    summary_keys={"strategy": None, "resources": {"schedulable_units": None}},
)
