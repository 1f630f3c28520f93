"""Check `device_plugin`: has the NVIDIA device plugin registered its GPUs with the kubelet?

On a Kubernetes node (the kubelet's device-plugins directory exists) with NVIDIA GPUs, the
NVIDIA device plugin serves one socket per resource beside the kubelet's own `kubelet.sock`:
`nvidia-<resource>.sock`, the resource without its `nvidia.com/` prefix (`nvidia-gpu.sock`,
`nvidia-gpu.shared.sock`, `nvidia-mig-1g.10gb.sock`; k8s-device-plugin
`internal/plugin/server.go`). No socket: the kubelet advertises no GPU and GPU pods stay
Pending. When the plugin's configuration is given (`device_plugin.config_file`, or the copy a
snapshot keeps), it is validated (CONFIG_INVALID) and the resources it should advertise are
held against the sockets.

Each GPU vendor's rules may add their own plugin (`checks.rules.vendors`): AMD's
(`gpuprobe.checks.amd.device_plugin`) holds the AMD GPU device plugin's `amd.com_<resource>`
sockets against the AMD GPUs on the bus.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict, cast

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check
from gpuprobe.checks.rules import vendors
from gpuprobe.config import Config
from gpuprobe.containers.configfile import FileProblem
from gpuprobe.containers.device_plugin import (
    RESOURCE_PREFIX,
    DevicePluginConfig,
    DevicePluginPaths,
    device_plugin_config,
    plugin_paths,
)
from gpuprobe.containers.plugin_sockets import (
    KUBELET_SOCKET,
    has_plugin_dir,
    has_socket,
    plugin_sockets,
)
from gpuprobe.gpu.view import GpuView
from gpuprobe.host import Host
from gpuprobe.report import Action, CheckResult, Finding, Severity

NAME = "device_plugin"
SOCKET_PREFIX = "nvidia-"
SOCKET_SUFFIX = ".sock"


def socket_name(resource: str) -> str:
    """The socket the plugin serves a resource on: `nvidia.com/gpu` → `nvidia-gpu.sock`."""
    return SOCKET_PREFIX + resource.split("/", 1)[-1] + SOCKET_SUFFIX


def resource_of(socket: str) -> str:
    """The resource a plugin socket serves: `nvidia-gpu.shared.sock` → `nvidia.com/gpu.shared`."""
    return RESOURCE_PREFIX + socket.removeprefix(SOCKET_PREFIX).removesuffix(SOCKET_SUFFIX)


class DevicePluginData(TypedDict):
    """The check's data (docs/checks.md, check `device_plugin`)."""

    kubernetes_node: bool
    socket_dir: str
    kubelet_socket: bool
    plugin_sockets: list[str]
    resources: list[str]
    gpus: int
    config: dict[str, Any] | None  # the plugin's configuration, as its reader gives it
    expected_resources: list[str] | None
    # With AMD GPUs on the PCI bus:
    amd_gpus: NotRequired[int]
    amd_plugin_sockets: NotRequired[list[str]]
    amd_resources: NotRequired[list[str]]


def run(ctx: CheckContext, config: Config) -> CheckResult:
    """Find the plugin's sockets and hold them against the GPUs and the plugin's configuration."""
    host = ctx.host
    socket_dir = plugin_paths(config).socket_dir.rstrip("/") or "/"
    kubernetes = has_plugin_dir(host, socket_dir)
    gpus = ctx.gpus.gpu_count("nvidia")
    sockets = plugin_sockets(host, socket_dir, SOCKET_PREFIX, SOCKET_SUFFIX)
    data: DevicePluginData = {
        "kubernetes_node": kubernetes,
        "socket_dir": socket_dir,
        "kubelet_socket": has_socket(host, socket_dir, KUBELET_SOCKET),
        "plugin_sockets": sockets,
        "resources": [resource_of(s) for s in sockets],
        "gpus": gpus,
        "config": None,
        "expected_resources": None,
    }
    readings = [
        reading
        for rules in vendors.RULES
        if rules.device_plugin is not None
        for reading in [rules.device_plugin.read(ctx, socket_dir)]
        if reading is not None
    ]
    for reading in readings:
        reading.facts(cast(dict[str, Any], data))
    if not kubernetes:
        return CheckResult(NAME, f"not a Kubernetes node (no {socket_dir})", [], data)
    if gpus == 0 and not readings:
        return CheckResult(NAME, "no NVIDIA GPU on this node: no device plugin needed", [], data)
    parts = [reading.judge(socket_dir, data["kubelet_socket"]) for reading in readings]
    if gpus == 0:
        result = CheckResult(NAME, parts[0].summary, parts[0].findings, data)
        parts = parts[1:]
    else:
        result = _nvidia(host, ctx.gpus, config, data, socket_dir)
    for part in parts:
        result.findings.extend(part.findings)
        result.summary += f"; {part.summary}"
    return result


def _nvidia(
    host: Host, view: GpuView, config: Config, data: DevicePluginData, socket_dir: str
) -> CheckResult:
    """The NVIDIA device plugin's sockets against NVIDIA's GPUs and its configuration."""
    gpus, sockets = data["gpus"], data["plugin_sockets"]
    findings: list[Finding] = []
    plugin = None
    loaded = device_plugin_config(host, config)
    if isinstance(loaded, FileProblem):
        findings.append(config_invalid(loaded))
    elif loaded is not None:
        plugin = loaded
        data["config"] = plugin.to_data()
    if not sockets:
        findings.append(_not_registered(socket_dir, data["kubelet_socket"]))
        return CheckResult(
            NAME, f"no NVIDIA device plugin registered ({gpus} GPUs)", findings, data
        )
    expected = _expected_resources(host, view, plugin) if plugin else None
    data["expected_resources"] = expected
    missing = [r for r in expected or [] if r not in data["resources"]]
    if missing and plugin:
        findings.append(_not_advertised(missing, data["resources"], plugin, socket_dir))
    summary = f"NVIDIA device plugin registered: {', '.join(data['resources'])}"
    if plugin:
        summary += f" (MIG strategy {plugin.mig_strategy}, sharing {plugin.sharing_strategy})"
    return CheckResult(NAME, summary, findings, data)


def config_invalid(problem: FileProblem) -> Finding:
    """CONFIG_INVALID for the plugin's configuration file: it cannot be read or parsed, or a
    value has the wrong type."""
    why = problem.problem.removeprefix("is invalid: ").removeprefix("is ")
    return Finding(
        "CONFIG_INVALID",
        Severity.WARNING,
        f"the NVIDIA device plugin configuration {problem.path} is invalid: {why}",
        Action.FIX_CONFIG,
        f"file:{problem.path}",
    )


def _not_registered(socket_dir: str, kubelet_socket: bool) -> Finding:
    kubelet = "" if kubelet_socket else f" (and no {KUBELET_SOCKET} either: is the kubelet up?)"
    return Finding(
        "DEVICE_PLUGIN_NOT_REGISTERED",
        Severity.CRITICAL,
        f"no NVIDIA device plugin socket ({SOCKET_PREFIX}*{SOCKET_SUFFIX}) in {socket_dir}"
        f"{kubelet}: the kubelet advertises no nvidia.com/gpu and GPU pods stay Pending. Check "
        "the device plugin DaemonSet's pod on this node (node selector and labels, taints, "
        "its logs)",
        Action.FIX_CONFIG,
    )


def _expected_resources(host: Host, view: GpuView, plugin: DevicePluginConfig) -> list[str] | None:
    """The full-GPU resource the plugin should advertise; None when the MIG layout decides.

    With MIG strategy `mixed` on MIG-enabled GPUs the resources are per MIG profile, which
    the `mig` check judges; otherwise the plugin advertises `nvidia.com/gpu`, renamed when
    its sharing says so.
    """
    if plugin.mig_strategy == "mixed" and view.nvidia.partitioned() is not False:
        return None
    base = RESOURCE_PREFIX + "gpu"
    shared = next((r for r in plugin.shared if r.name == base), None)
    return [shared.advertised if shared else base]


def _not_advertised(
    missing: list[str], found: list[str], plugin: DevicePluginConfig, socket_dir: str
) -> Finding:
    sockets = ", ".join(socket_name(r) for r in missing)
    return Finding(
        "DEVICE_PLUGIN_NOT_REGISTERED",
        Severity.WARNING,
        f"the device plugin's configuration {plugin.path} advertises {', '.join(missing)} but "
        f"{socket_dir} has no {sockets}; the plugin serves {', '.join(found)}. It runs another "
        "configuration than the one given: restart the device plugin pod on this node",
        Action.RESTART_APP,
    )


CHECK: Check[DevicePluginData] = Check(
    NAME, run, section=DevicePluginPaths, condition="GPURuntimeReady"
)
