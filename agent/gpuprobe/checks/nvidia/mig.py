"""Check `mig`: how MIG is laid out on each GPU, and does it fit the device plugin?

Per GPU: MIG capable or not, current and pending mode, and with MIG on its GPU instances and
compute instances: profile names, placements, memory and MIG device UUIDs, as
`gpuprobe.gpu.nvidia.mig` reads them (the way the NVIDIA device plugin finds MIG devices).

The device plugin's MIG strategy (its config file, `device_plugin.config_file`) is held
against the layout as the plugin itself does (k8s-device-plugin mig-strategy.go): `single`
needs every GPU MIG-enabled with one identical profile (all MIG off falls back to `none`),
`none` hands out whole GPUs, useless with MIG on, `mixed` takes any layout. A plugin
configuration that cannot be read leaves the strategy unknown here; the `device_plugin`
check reports it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NotRequired, TypedDict, cast

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check
from gpuprobe.config import Config
from gpuprobe.containers.device_plugin import DevicePluginConfig, device_plugin_file
from gpuprobe.families import GPU_LABELS, Family, gpu_labels, mappings, number
from gpuprobe.families import text as label
from gpuprobe.gpu.nvidia.mig import ComputeInstance, GpuInstance, MigGpu, read_layouts
from gpuprobe.host import Host
from gpuprobe.report import Action, CheckResult, Finding, Severity, Status, gpu_resource

NAME = "mig"


class MigData(TypedDict):
    """The check's data (docs/checks.md, check `mig`)."""

    gpus: list[MigGpu]
    device_plugin_mig_strategy: str | None
    device_plugin_config_file: NotRequired[str]


def run(ctx: CheckContext, config: Config) -> CheckResult:
    """Read each GPU's MIG mode and layout and hold it against the device plugin's strategy."""
    host = ctx.host
    data: MigData = {"gpus": [], "device_plugin_mig_strategy": None}
    strategy = _strategy(host, config, data)
    count = ctx.gpus.nvidia.count()
    if count is None:
        if not ctx.gpus.nvidia.bus_gpus():
            return CheckResult(NAME, "no NVIDIA GPU on this node", data=data)
        return CheckResult(
            NAME,
            "NVML unavailable (the driver check says why): MIG layout unknown",
            data=data,
            floor=Status.UNKNOWN,
        )
    gpus = read_layouts(host, count)
    data["gpus"] = gpus
    findings = [f for g in gpus for f in _gpu_findings(g)]
    if strategy is not None:
        findings += _strategy_findings(strategy, gpus)
    return CheckResult(NAME, _summary(gpus, strategy), findings, data)


def _strategy(host: Host, config: Config, data: MigData) -> str | None:
    """The plugin's MIG strategy; "unknown" when its config is invalid, None when not given."""
    file = device_plugin_file(host, config)
    if file is None:
        return None
    plugin = file.result
    strategy = plugin.mig_strategy if isinstance(plugin, DevicePluginConfig) else "unknown"
    data["device_plugin_mig_strategy"] = strategy
    data["device_plugin_config_file"] = file.path
    return strategy


def _gpu_findings(gpu: MigGpu) -> list[Finding]:
    if "mig_mode_current" not in gpu:
        return []
    resource = gpu_resource(gpu["index"], gpu.get("uuid"))
    current, pending = gpu["mig_mode_current"], gpu["mig_mode_pending"]
    where = f"GPU {gpu['index']}"
    if current != pending:
        return [
            Finding(
                "MIG_PENDING_CHANGE",
                Severity.WARNING,
                f"{where}: MIG mode is {_on(current)} but {_on(pending)} is pending: the "
                "change takes effect only after a GPU reset (nvidia-smi -r) or a reboot",
                Action.RESET_GPU,
                resource,
            )
        ]
    if current == 1 and not gpu.get("mig_device_count"):
        return [
            Finding(
                "MIG_NO_INSTANCES",
                Severity.WARNING,
                f"{where} has MIG enabled but no GPU instance: the whole GPU is unusable "
                "(and the device plugin refuses it). Create instances (nvidia-smi mig -cgi "
                "... -C, or the MIG manager's config) or disable MIG",
                Action.FIX_CONFIG,
                resource,
            )
        ]
    return []


def _strategy_findings(strategy: str, gpus: list[MigGpu]) -> list[Finding]:
    on = [g for g in gpus if g.get("mig_mode_current") == 1]
    off = [g for g in gpus if g.get("mig_mode_current") == 0]
    if strategy == "none" and on:
        return [
            _conflict(
                f"the device plugin's MIG strategy is none but MIG is enabled on "
                f"{_gpus(on)}: the plugin hands out whole GPUs, on which pods cannot use the "
                "MIG devices. Set migStrategy to single or mixed, or disable MIG"
            )
        ]
    if strategy != "single" or not on:
        return []  # mixed takes any layout; single with MIG off everywhere acts as none
    if off:
        return [
            _conflict(
                f"the device plugin's MIG strategy is single but MIG is off on {_gpus(off)} "
                f"and on on {_gpus(on)}: single needs every GPU MIG-enabled (the plugin fails "
                "to start). Enable MIG on all GPUs or use migStrategy mixed"
            )
        ]
    profiles = sorted(
        {
            ci.get("profile", "unknown")
            for g in on
            for gi in g.get("gpu_instances", [])
            for ci in gi.get("compute_instances", [])
        }
    )
    if len(profiles) > 1:
        return [
            _conflict(
                f"the device plugin's MIG strategy is single but the MIG devices have "
                f"{len(profiles)} profiles ({', '.join(profiles)}): single needs one "
                "identical profile on every GPU (the plugin fails to start). Use one "
                "profile everywhere or migStrategy mixed"
            )
        ]
    return []


def _conflict(message: str) -> Finding:
    return Finding("MIG_STRATEGY_CONFLICT", Severity.WARNING, message, Action.FIX_CONFIG)


def _gpus(gpus: list[MigGpu]) -> str:
    indices = [str(g["index"]) for g in gpus]
    return f"GPU{'s' if len(indices) != 1 else ''} {', '.join(indices)}"


def _on(mode: int) -> str:
    return "on" if mode == 1 else "off"


def _summary(gpus: list[MigGpu], strategy: str | None) -> str:
    total = len(gpus)
    if total == 0:
        return "NVML sees no GPU"
    capable = [g for g in gpus if g.get("mig_capable")]
    if not capable:
        return f"no MIG-capable GPU ({total} GPU{'s' if total != 1 else ''})"
    on = [g for g in capable if g.get("mig_mode_current") == 1]
    if on:
        devices = sum(g.get("mig_device_count", 0) for g in on)
        profiles = sorted(
            {
                ci.get("profile", "?")
                for g in on
                for gi in g.get("gpu_instances", [])
                for ci in gi.get("compute_instances", [])
            }
        )
        shown = f" ({', '.join(profiles)})" if profiles else ""
        summary = f"MIG on {len(on)} of {total} GPUs: {devices} MIG devices{shown}"
    else:
        summary = f"MIG disabled on all {len(capable)} MIG-capable GPUs"
    pending = [g for g in capable if g.get("mig_mode_pending") != g.get("mig_mode_current")]
    if pending:
        summary += f"; MIG mode change pending on {_gpus(pending)}"
    if strategy == "unknown":
        summary += "; device plugin MIG strategy unknown (its configuration is invalid)"
    elif strategy is not None:
        summary += f"; device plugin MIG strategy {strategy}"
    return summary


def metric_families(data: MigData) -> Iterator[Family]:
    """`gpuprobe_mig_device_info`: one sample per MIG device (compute instance) from the
    check's data, so that a dashboard can draw each GPU's MIG layout."""
    # `d[key] if key in d`, not `.get`: mypy holds an index to the TypedDict's keys. The
    # values are still held to numbers and text: a report may come from elsewhere.
    gpus: object = data["gpus"] if "gpus" in data else None
    if not isinstance(gpus, list):
        return
    family = Family(
        "gpuprobe_mig_device_info",
        "A MIG device: its GPU, GPU instance, compute instance, profile and UUID",
        (*GPU_LABELS, "gpu_instance", "compute_instance", "profile", "mig_uuid"),
    )
    for gpu in (cast(MigGpu, g) for g in mappings(gpus)):
        if number(gpu["index"] if "index" in gpu else None) is None:
            continue
        instances = gpu["gpu_instances"] if "gpu_instances" in gpu else None
        for gi in (cast(GpuInstance, i) for i in mappings(instances)):
            gi_id = number(gi["id"] if "id" in gi else None)
            members = gi["compute_instances"] if "compute_instances" in gi else None
            for ci in (cast(ComputeInstance, c) for c in mappings(members)):
                ci_id = number(ci["id"] if "id" in ci else None)
                if gi_id is None or ci_id is None:
                    continue
                profile = (
                    label(ci["profile"] if "profile" in ci else None)
                    or label(gi["profile"] if "profile" in gi else None)
                    or ""
                )
                family.add(
                    [
                        *gpu_labels(gpu),
                        str(int(gi_id)),
                        str(int(ci_id)),
                        profile,
                        label(ci["uuid"] if "uuid" in ci else None) or "",
                    ],
                    1,
                )
    yield family


CHECK: Check[MigData] = Check(
    NAME,
    run,
    metrics=metric_families,
    condition="GPUHardwareReady",
    summary_keys={
        "gpus": {
            "index": None,
            "lost": None,
            "mig_mode_current": None,
            "gpu_instances": {"compute_instances": {"profile": None}},
        }
    },
)
