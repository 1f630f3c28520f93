"""Check `toolkit`: is the NVIDIA Container Toolkit installed and wired into the container engine?

Finds the toolkit's binaries (package or GPU Operator install) and reads its config.toml;
finds the container engines (containerd with its imports and drop-ins, k3s and RKE2's
containerd, Docker, CRI-O) and, for each that runs GPU containers, holds its `nvidia` runtime
against the host: is it there, does its binary exist, is it the default (if not, pods need
`runtimeClassName: nvidia`).

Each GPU vendor's rules may add their part (`checks.rules.vendors`): AMD GPUs need no runtime
of their own on Kubernetes, and AMD's part (`gpuprobe.checks.amd.toolkit`) holds the device
nodes ROCm containers need, and an engine's `amd` runtime, against the host.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict, cast

from gpuprobe.checks.amd import rules as amd
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check
from gpuprobe.checks.rules import vendors
from gpuprobe.checks.rules.vendor_part import merge_data
from gpuprobe.config import Config
from gpuprobe.containers.configfile import FileProblem
from gpuprobe.containers.device_plugin import is_kubernetes_node
from gpuprobe.containers.engines import Engine, discover_engines
from gpuprobe.containers.runtime import EngineConfig, Runtime
from gpuprobe.containers.toolkit import (
    OPERATOR_ROOT,
    RUNTIME_BINARY,
    ToolkitConfig,
    host_binary,
    is_nvidia_runtime_binary,
    read_toolkit,
)
from gpuprobe.host import Host
from gpuprobe.report import Action, CheckResult, Finding, Severity

NAME = "toolkit"
NVIDIA = "nvidia"
ENGINE_NAMES = {"containerd": "containerd", "docker": "Docker", "crio": "CRI-O"}
CONFIGURE = {
    "containerd": "nvidia-ctk runtime configure --runtime=containerd",
    "docker": "nvidia-ctk runtime configure --runtime=docker",
    "crio": "nvidia-ctk runtime configure --runtime=crio",
}


class ToolkitData(TypedDict):
    """The check's data (docs/checks.md, check `toolkit`)."""

    gpus: int
    kubernetes_node: bool
    toolkit_installed: bool
    toolkit_binaries: dict[str, str]
    gpu_operator_toolkit: bool
    toolkit_config: dict[str, Any] | None  # the effective config, as its reader gives it
    engines: list[dict[str, Any]]  # each engine, as its reader gives it
    runtime_class_required: bool
    # With AMD GPUs on the PCI bus:
    amd: NotRequired[amd.AmdContainerData]


def run(ctx: CheckContext, config: Config) -> CheckResult:
    """Judge the toolkit and every engine that runs GPU containers."""
    host = ctx.host
    gpus = ctx.gpus.gpu_count("nvidia")
    kubernetes = is_kubernetes_node(host, config)
    toolkit = read_toolkit(host)
    binaries, toolkit_configs, effective = toolkit.binaries, toolkit.configs, toolkit.effective
    engines = discover_engines(host, kubernetes)
    data: ToolkitData = {
        "gpus": gpus,
        "kubernetes_node": kubernetes,
        "toolkit_installed": RUNTIME_BINARY in binaries,
        "toolkit_binaries": {name: paths[0] for name, paths in binaries.items()},
        "gpu_operator_toolkit": any(
            p.startswith(OPERATOR_ROOT + "/") for paths in binaries.values() for p in paths
        ),
        "toolkit_config": effective.to_data() if isinstance(effective, ToolkitConfig) else None,
        "engines": [e.to_data() for e in engines],
        "runtime_class_required": False,
    }
    parts = [
        part
        for rules in vendors.RULES
        if rules.toolkit is not None
        for part in [rules.toolkit.judge(ctx, engines)]
        if part is not None
    ]
    for part in parts:
        merge_data(cast(dict[str, Any], data), part)
    if gpus == 0 and not parts:
        return CheckResult(
            NAME, "no NVIDIA GPU on this node: no container toolkit needed", [], data
        )
    if gpus == 0:
        result = CheckResult(NAME, parts[0].summary, parts[0].findings, data)
        parts = parts[1:]
    else:
        result = _nvidia(host, kubernetes, binaries, toolkit_configs, engines, effective, data)
    for part in parts:
        result.findings.extend(part.findings)
        result.summary += f"; {part.summary}"
    return result


def _nvidia(
    host: Host,
    kubernetes: bool,
    binaries: dict[str, list[str]],
    toolkit_configs: list[ToolkitConfig | FileProblem],
    engines: list[Engine],
    effective: ToolkitConfig | FileProblem | None,
    data: ToolkitData,
) -> CheckResult:
    """The NVIDIA Container Toolkit and every engine that runs NVIDIA GPU containers."""
    judged = [e for e in engines if e.judged]
    findings = [_invalid(p) for e in engines for p in e.config.problems]
    findings += [_invalid(c) for c in toolkit_configs if isinstance(c, FileProblem)]
    installed = RUNTIME_BINARY in binaries or any(
        _nvidia_binary_found(host, e.config) for e in judged
    )
    if not judged:
        where = "installed" if installed else "not installed"
        summary = f"no container engine runs GPU containers on this node; toolkit {where}"
        return CheckResult(NAME, summary, findings, data)
    if not installed:
        findings.append(_not_installed(judged))
    parts = [_toolkit_part(binaries, effective if isinstance(effective, ToolkitConfig) else None)]
    for engine in judged:
        part, engine_findings = _judge(host, engine.config, installed, kubernetes)
        findings += engine_findings
        parts.append(part)
        if "runtimeClassName" in part:
            data["runtime_class_required"] = True
    return CheckResult(NAME, "; ".join(parts), findings, data)


def _invalid(problem: FileProblem) -> Finding:
    if problem.unreadable:  # its content is unknown, not wrong
        return Finding(
            "CONFIG_UNREADABLE",
            Severity.UNKNOWN,
            f"{problem.path} {problem.problem}: its settings are unknown, not judged. Let "
            "gpuprobe read it (the DaemonSet runs as root), or check the file's permissions",
            Action.FIX_CONFIG,
            f"file:{problem.path}",
        )
    return Finding(
        "CONFIG_INVALID",
        Severity.CRITICAL,
        f"{problem.path} {problem.problem}",
        Action.FIX_CONFIG,
        f"file:{problem.path}",
    )


def _nvidia_binary_found(host: Host, config: EngineConfig) -> bool:
    return any(
        is_nvidia_runtime_binary(r.binary) and host_binary(host, r.binary or "") is not None
        for r in config.runtimes.values()
    )


def _not_installed(judged: list[Engine]) -> Finding:
    names = ", ".join(ENGINE_NAMES[e.config.engine] for e in judged)
    return Finding(
        "TOOLKIT_NOT_INSTALLED",
        Severity.CRITICAL,
        f"{names} runs containers on this GPU node but the NVIDIA Container Toolkit "
        f"({RUNTIME_BINARY}) is installed neither in /usr/bin nor by the GPU Operator in "
        f"{OPERATOR_ROOT}: containers cannot get GPUs. Install the nvidia-container-toolkit "
        "package (or let the GPU Operator install it)",
        Action.FIX_CONFIG,
    )


def _toolkit_part(binaries: dict[str, list[str]], effective: ToolkitConfig | None) -> str:
    if RUNTIME_BINARY not in binaries:
        return "NVIDIA Container Toolkit not installed"
    where = binaries[RUNTIME_BINARY][0].rsplit("/", 1)[0]
    return f"NVIDIA Container Toolkit in {where}" + (
        f" (mode {effective.mode})" if effective else ""
    )


def _judge(
    host: Host, config: EngineConfig, installed: bool, kubernetes: bool
) -> tuple[str, list[Finding]]:
    """The summary part and the findings for one engine that runs GPU containers."""
    label = config.flavor if config.engine == "containerd" else ENGINE_NAMES[config.engine]
    nvidia = config.runtimes.get(NVIDIA)
    default = config.runtimes.get(config.effective_default)
    default_runs_nvidia = default is not None and is_nvidia_runtime_binary(default.binary)
    if nvidia is None:
        if config.engine == "crio" and config.oci_hook:
            return f"{label}: NVIDIA OCI hook {config.oci_hook}", []
        if default_runs_nvidia:
            return f"{label}: default runtime {config.effective_default} runs NVIDIA", []
        if _root_unusable(config):  # its CONFIG_INVALID (_UNREADABLE) says why: runtimes unknown
            how = "unreadable" if _root_unreadable(config) else "invalid"
            return f"{label}: runtimes unknown ({config.config_path} is {how})", []
        return f"{label}: no nvidia runtime", [_no_runtime(config, label, installed)]
    problem = _binary_problem(host, config, nvidia, installed)
    findings = [problem] if problem else []
    fragile = _kept_by_containerd2_only(config)
    if fragile:
        findings.append(fragile)
    if config.effective_default == NVIDIA:
        return f"{label}: nvidia runtime (default)", findings
    if default_runs_nvidia:
        return f"{label}: nvidia runtime; default {config.effective_default} runs NVIDIA", findings
    if kubernetes:
        return (
            f"{label}: nvidia runtime, not the default: pods need runtimeClassName: nvidia",
            findings,
        )
    return f"{label}: nvidia runtime, not the default: run with --runtime=nvidia", findings


def _kept_by_containerd2_only(config: EngineConfig) -> Finding | None:
    """A WARNING when the nvidia runtime, or its place as the default, holds only if the node
    runs containerd 2.x (its imports merge key by key; 1.x keeps the last file's CRI table)
    and the files cannot tell which containerd that is."""
    last = config.last_cri_file
    if last is None:
        return None
    if NVIDIA in config.dropped_by_1x:
        what = f"the nvidia runtime of {config.runtimes[NVIDIA].defined_in} holds"
        then = "containerd 1.x drops it and GPU containers get no GPUs"
    elif config.effective_default == NVIDIA and config.default_by_1x not in (None, NVIDIA):
        what = "nvidia as the default runtime holds"
        then = f"containerd 1.x runs {config.default_by_1x} by default and pods get no GPUs"
    else:
        return None
    return Finding(
        "RUNTIME_NOT_CONFIGURED",
        Severity.WARNING,
        f"{what} only on containerd 2.x: {last} redefines the CRI plugin's table, and "
        f"{then} (config version {config.version} is read by both, so the files do not say "
        f"which runs). Define the nvidia runtime in {last}, or confirm `containerd --version` "
        "is 2.x",
        Action.FIX_CONFIG,
        f"file:{last}",
    )


def _fix_target(config: EngineConfig) -> str:
    """The file to fix: k3s/RKE2 regenerate config.toml from their template at start."""
    return config.template or config.config_path


def _root_unreadable(config: EngineConfig) -> bool:
    """Whether the engine's main file is there but could not be read at all."""
    return any(p.path == config.config_path and p.unreadable for p in config.problems)


def _root_unusable(config: EngineConfig) -> bool:
    """Whether the engine's main file is there but could not be read or understood."""
    return config.exists and any(p.path == config.config_path for p in config.problems)


def _no_runtime(config: EngineConfig, label: str, installed: bool) -> Finding:
    if config.files:
        files = ", ".join(config.files)
    else:
        files = f"{config.config_path} ({'unreadable' if config.exists else 'absent'})"
    message = f"{label} has no nvidia runtime (configuration read: {files})"
    if config.notes:
        message += "; " + "; ".join(config.notes)
    if config.flavor in ("k3s", "rke2"):
        step = (
            f"restart {config.flavor} so that it finds the installed toolkit"
            if installed
            else f"install the toolkit and restart {config.flavor}"
        )
        fix = (
            f"{config.flavor} adds the nvidia runtime itself when it finds "
            f"{RUNTIME_BINARY} at start: {step}"
        )
        if config.template:
            fix += f", or add the runtime to the template {config.template}"
    else:
        fix = f"run `{CONFIGURE[config.engine]}` and restart {ENGINE_NAMES[config.engine]}"
    return Finding(
        "RUNTIME_NOT_CONFIGURED",
        Severity.CRITICAL,
        f"{message}. GPU containers cannot get GPUs: {fix}",
        Action.FIX_CONFIG,
        f"file:{_fix_target(config)}",
    )


def _binary_problem(
    host: Host, config: EngineConfig, nvidia: Runtime, installed: bool
) -> Finding | None:
    where = f"the nvidia runtime in {nvidia.defined_in}"
    resource = f"file:{nvidia.defined_in}"
    binary = nvidia.binary
    if not binary:
        if config.engine == "containerd":
            problem = "has no options.BinaryName, so containerd runs plain runc for it"
        else:
            field = "runtime_path" if config.engine == "crio" else "path"
            problem = f"names no binary ({field})"
        return _misconfigured(f"{where} {problem}: containers get no GPU", resource)
    if not is_nvidia_runtime_binary(binary):
        return _misconfigured(
            f"{where} runs {binary}, not the NVIDIA Container Runtime: containers get no GPU",
            resource,
        )
    if host_binary(host, binary) is None and installed:
        return _misconfigured(
            f"{where} runs {binary}, which does not exist on the host (a toolkit moved or "
            "removed, e.g. a GPU Operator uninstall): containers using it fail to start. "
            f"Point it at the installed {RUNTIME_BINARY} (`{CONFIGURE[config.engine]}`)",
            resource,
        )
    return None


def _misconfigured(message: str, resource: str) -> Finding:
    return Finding(
        "RUNTIME_NOT_CONFIGURED", Severity.CRITICAL, message, Action.FIX_CONFIG, resource
    )


CHECK: Check[ToolkitData] = Check(
    NAME,
    run,
    condition="GPURuntimeReady",
    summary_keys={
        "gpus": None,
        "toolkit_installed": None,
        "toolkit_config": {"mode": None},
        "engines": {
            "flavor": None,
            "default_runtime": None,
            "in_use": None,
            "runs_gpu_containers": None,
        },
    },
)
