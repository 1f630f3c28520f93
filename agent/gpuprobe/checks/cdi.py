"""Check `cdi`: are the CDI specs valid, and do they still describe this node's GPUs and driver?

Reads every spec in the CDI spec directories (/etc/cdi, /var/run/cdi and those the toolkit's
config.toml names; `gpuprobe.containers.cdi_specs`) and validates it as CDI runtimes do
(`gpuprobe.containers.cdi`). An NVIDIA spec
(`nvidia.com/...`) is stale when it names device nodes, mounted host paths or hook binaries
that no longer exist, driver files of another version than the loaded driver (the usual state
after a driver upgrade), or fewer GPUs than NVML sees. The fix is always to regenerate it.
Another vendor's specs are held against the node by its rules (AMD's `amd.com/gpu` specs:
`checks.amd.cdi`, asked through `checks.rules.vendors`).
A problem is CRITICAL when the node hands GPUs to containers through CDI (toolkit mode `cdi`,
or a device plugin passing CDI device names), else WARNING.

Who resolves the CDI names decides which spec must exist, and where:
- the NVIDIA Container Runtime in cdi mode: the toolkit's `default-kind` (`nvidia.com/gpu`) in
  the toolkit's `spec-dirs` only (default /etc/cdi and /var/run/cdi);
- the device plugin with `deviceListStrategy` cdi-annotations or cdi-cri: it names devices of
  its own kind, `k8s.device-plugin.nvidia.com/gpu`, and writes that spec itself when it starts
  (`/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json`; k8s-device-plugin `internal/cdi`),
  which the container engine reads from its CDI directories (default /etc/cdi, /var/run/cdi).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check
from gpuprobe.checks.rules import vendors
from gpuprobe.checks.rules.cdi_paths import missing_paths
from gpuprobe.checks.rules.vendor_part import Part
from gpuprobe.config import Config
from gpuprobe.containers.cdi import CdiSpec
from gpuprobe.containers.cdi_specs import read_spec_dirs
from gpuprobe.containers.configfile import FileProblem
from gpuprobe.containers.device_plugin import DevicePluginConfig, device_plugin_config
from gpuprobe.containers.toolkit import (
    DEFAULT_KIND,
    DEFAULT_SPEC_DIRS,
    ToolkitConfig,
    read_toolkit_config,
)
from gpuprobe.host import Host
from gpuprobe.report import Action, CheckResult, Finding, Severity

NAME = "cdi"
# The device plugin's own CDI kind and spec file (k8s-device-plugin internal/cdi: vendor
# k8s.device-plugin.nvidia.com, class gpu, saved as /var/run/cdi/<vendor>-<class>.json).
PLUGIN_KIND = "k8s.device-plugin.nvidia.com/gpu"
PLUGIN_SPEC = "/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json"
# The CDI directories containerd and CRI-O read by default (their `cdi_spec_dirs`).
ENGINE_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
# How nvidia-ctk (`--device-name-strategy`, nvidia-container-toolkit pkg/nvcdi/namer.go) and
# the device plugin (`deviceIDStrategy`) name a full GPU: index "0", type-index "gpu0", uuid
# "GPU-<uuid>". MIG devices ("0:1", "mig0:1", "MIG-<uuid>") are not GPUs and match none. A
# spec may carry several strategies' names for each GPU.
GPU_NAME_STRATEGIES = {
    "index": re.compile(r"^\d+$"),
    "type-index": re.compile(r"^gpu\d+$"),
    "uuid": re.compile(r"^GPU-[0-9a-fA-F-]+$"),
}
# Files of the NVIDIA driver carry its version: libnvidia-ml.so.550.54.15, libcuda.so.550.54.15,
# libGLX_nvidia.so.550.54.15, /lib/firmware/nvidia/550.54.15/gsp_ga10x.bin. Driver versions
# have a three-digit major, which keeps out libnvidia-egl-wayland.so.1.1.13 and the like.
_DRIVER_VERSION = r"\d{3}\.\d+(?:\.\d+)?"
_DRIVER_LIBRARY = re.compile(
    r"^lib(?:nvidia-[\w.-]+?|cuda|cudadebugger|nvcuvid|nvoptix|\w+_nvidia)\.so\."
    rf"({_DRIVER_VERSION})$"
)
_FIRMWARE = re.compile(rf"/firmware/nvidia/({_DRIVER_VERSION})/")
_HOST_DRIVER_ARG = re.compile(rf"^--host-driver-version=({_DRIVER_VERSION})$")
MAX_LISTED = 3  # paths named in a message; data lists them all


@dataclass(frozen=True)
class _Need:
    """A consumer of CDI names on this node: why, the kind it asks for, where it looks."""

    reason: str
    kind: str
    dirs: tuple[str, ...]
    fix: str


@dataclass
class _Staleness:
    """Why an NVIDIA spec no longer fits the node."""

    missing_device_nodes: list[str] = field(default_factory=list)
    missing_mounts: list[str] = field(default_factory=list)
    missing_hooks: list[str] = field(default_factory=list)
    driver_versions: list[str] = field(default_factory=list)
    gpu_devices: int | None = None

    def to_data(self) -> dict[str, Any]:
        return {
            "missing_device_nodes": self.missing_device_nodes,
            "missing_mounts": self.missing_mounts,
            "missing_hooks": self.missing_hooks,
            "driver_versions": self.driver_versions,
            "gpu_devices": self.gpu_devices,
        }


class CdiData(TypedDict):
    """The check's data (docs/checks.md, check `cdi`)."""

    spec_dirs: list[str]
    cdi_in_use: bool
    cdi_in_use_because: list[str]
    driver_version: str | None
    gpus_seen_by_nvml: int | None
    specs: list[dict[str, Any]]  # each spec file: its path, validity and what it holds
    ignored_files: list[str]


def run(ctx: CheckContext, config: Config) -> CheckResult:
    """Validate every spec and hold the NVIDIA ones against the node."""
    host = ctx.host
    gpus = ctx.gpus.gpu_count("nvidia")
    toolkit = read_toolkit_config(host)
    toolkit = toolkit if isinstance(toolkit, ToolkitConfig) else None
    plugin = _plugin_config(host, config)
    needs = _cdi_needs(toolkit, plugin)
    in_use = [n.reason for n in needs]
    toolkit_dirs = toolkit.cdi_spec_dirs if toolkit else DEFAULT_SPEC_DIRS
    dirs = list(ENGINE_SPEC_DIRS) + [d for d in toolkit_dirs if d not in ENGINE_SPEC_DIRS]
    driver = ctx.gpus.driver("nvidia").version
    nvml_gpus = ctx.gpus.nvidia.count()
    data: CdiData = {
        "spec_dirs": dirs,
        "cdi_in_use": bool(in_use) and gpus > 0,
        "cdi_in_use_because": in_use if gpus else [],
        "driver_version": driver,
        "gpus_seen_by_nvml": nvml_gpus,
        "specs": [],
        "ignored_files": [],
    }
    specs, findings = _load(host, dirs, data, critical=bool(in_use) and gpus > 0)
    parts = [
        part
        for rules in vendors.RULES
        if rules.cdi is not None
        for part in [rules.cdi.judge(ctx, specs, cast(dict[str, Any], data))]
        if part is not None
    ]
    others = [finding for part in parts for finding in part.findings]
    if not gpus:  # on a node without NVIDIA GPUs NVIDIA's specs are facts, not failures
        return CheckResult(NAME, _summary(specs, data, gpus, in_use, parts), others, data)
    findings += others
    findings += _conflicts(specs, bool(in_use))
    findings += _stale(host, specs, data, driver, nvml_gpus, bool(in_use))
    # An invalid NVIDIA spec is already named; saying no spec exists would be a second finding.
    invalid_nvidia = any(not e["valid"] and e["nvidia"] for e in data["specs"])
    if not invalid_nvidia:
        findings += [_missing(n) for n in needs if not _found(n, specs)]
    return CheckResult(NAME, _summary(specs, data, gpus, in_use, parts), findings, data)


def _plugin_config(host: Host, config: Config) -> DevicePluginConfig | None:
    loaded = device_plugin_config(host, config)
    return loaded if isinstance(loaded, DevicePluginConfig) else None


def _cdi_needs(toolkit: ToolkitConfig | None, plugin: DevicePluginConfig | None) -> list[_Need]:
    """Who hands GPUs to containers through CDI names on this node (empty: nobody)."""
    needs = []
    if toolkit and toolkit.mode == "cdi":
        needs.append(
            _Need(
                f"the NVIDIA Container Runtime runs in cdi mode ({toolkit.path})",
                toolkit.cdi_default_kind,
                toolkit.cdi_spec_dirs,
                f"Generate it: nvidia-ctk cdi generate --output={_output_dir(toolkit)}/nvidia.yaml",
            )
        )
    strategies = [s for s in (plugin.device_list_strategy if plugin else ()) if s.startswith("cdi")]
    if plugin and strategies:
        needs.append(
            _Need(
                f"the device plugin passes devices as CDI names (deviceListStrategy "
                f"{', '.join(strategies)} in {plugin.path})",
                PLUGIN_KIND,
                ENGINE_SPEC_DIRS,
                f"The device plugin writes {PLUGIN_SPEC} when it starts: restart the device "
                "plugin pod on this node and read its log",
            )
        )
    return needs


def _output_dir(toolkit: ToolkitConfig) -> str:
    """Where to generate a spec the runtime reads: /var/run/cdi when it is a spec dir."""
    dirs = toolkit.cdi_spec_dirs
    return "/var/run/cdi" if "/var/run/cdi" in dirs or not dirs else dirs[-1]


def _found(need: _Need, specs: list[tuple[CdiSpec, int]]) -> bool:
    """Whether a valid spec of the kind needed lies in a directory its reader reads."""
    return any(s.kind == need.kind and s.path.rsplit("/", 1)[0] in need.dirs for s, _ in specs)


def _severity(critical: bool) -> Severity:
    return Severity.CRITICAL if critical else Severity.WARNING


def _load(
    host: Host, dirs: list[str], data: CdiData, critical: bool
) -> tuple[list[tuple[CdiSpec, int]], list[Finding]]:
    found = read_spec_dirs(host, dirs)
    data["ignored_files"].extend(found.ignored)  # runtimes read .yaml and .json only
    specs: list[tuple[CdiSpec, int]] = []
    findings: list[Finding] = []
    for file in found.files:
        parsed = file.spec
        if isinstance(parsed, FileProblem):
            # Whose spec it was, when it cannot be parsed: NVIDIA's names its kind.
            data["specs"].append(
                {
                    "path": file.path,
                    "valid": False,
                    "problem": parsed.problem,
                    "nvidia": file.names_nvidia,
                }
            )
            findings.append(_invalid(parsed, critical and file.names_nvidia))
            continue
        data["specs"].append(
            {
                "path": file.path,
                "valid": True,
                "nvidia": parsed.vendor.endswith("nvidia.com"),
                "cdi_version": parsed.version,
                "kind": parsed.kind,
                "devices": [d.name for d in parsed.devices],
            }
        )
        specs.append((parsed, file.priority))
    return specs, findings


def _invalid(problem: FileProblem, critical: bool) -> Finding:
    return Finding(
        "CDI_SPEC_INVALID",
        _severity(critical),
        f"CDI spec {problem.path} {problem.problem}. CDI runtimes skip it, so none of its "
        "devices can be injected. Fix or regenerate it (nvidia-ctk cdi generate "
        f"--output={problem.path}, for NVIDIA GPUs)",
        Action.FIX_CONFIG,
        f"file:{problem.path}",
    )


def _conflicts(specs: list[tuple[CdiSpec, int]], critical: bool) -> list[Finding]:
    """The same device in two specs of one directory: runtimes refuse it (cdi cache.go)."""
    owner: dict[tuple[str, int], str] = {}
    findings = []
    for spec, priority in specs:
        for device in spec.devices:
            key = (f"{spec.kind}={device.name}", priority)
            if key in owner and owner[key] != spec.path:
                findings.append(
                    Finding(
                        "CDI_DEVICE_CONFLICT",
                        _severity(critical and spec.vendor.endswith("nvidia.com")),
                        f"CDI device {key[0]} is defined in both {owner[key]} and {spec.path} "
                        "(one directory): CDI runtimes refuse a conflicting device. Remove one "
                        "of the two specs",
                        Action.FIX_CONFIG,
                        f"file:{spec.path}",
                    )
                )
                break
            owner.setdefault(key, spec.path)
    return findings


def _stale(
    host: Host,
    specs: list[tuple[CdiSpec, int]],
    data: CdiData,
    driver: str | None,
    nvml_gpus: int | None,
    in_use: bool,
) -> list[Finding]:
    findings = []
    for spec, priority in specs:
        if not spec.vendor.endswith("nvidia.com"):
            continue
        stale = _staleness(host, spec, nvml_gpus)
        entry = next(e for e in data["specs"] if e["path"] == spec.path)
        entry["stale"] = stale.to_data()
        reasons = _reasons(spec, stale, driver, nvml_gpus)
        if not reasons:
            continue
        shadowed = _shadowed(spec, priority, specs)
        entry["shadowed"] = shadowed
        message = f"CDI spec {spec.path} ({spec.kind}) is stale: " + "; ".join(reasons)
        if shadowed:
            message += (
                ". Every device it defines is overridden by a spec in a later directory, "
                "so it is unused; remove it"
            )
        elif spec.kind == PLUGIN_KIND:
            message += (
                ". Containers given its devices fail to start: restart the device plugin pod "
                "on this node, which writes it anew"
            )
        else:
            message += (
                ". Containers given its devices fail to start: regenerate it (nvidia-ctk cdi "
                f"generate --output={spec.path}), as after every driver upgrade"
            )
        findings.append(
            Finding(
                "CDI_SPEC_STALE",
                _severity(in_use and not shadowed),
                message,
                Action.FIX_CONFIG,
                f"file:{spec.path}",
            )
        )
    return findings


def _staleness(host: Host, spec: CdiSpec, nvml_gpus: int | None) -> _Staleness:
    gone = missing_paths(host, spec)
    versions: set[str] = set()
    for edits in spec.all_edits():
        for mount in edits.mounts:
            versions |= _versions_in_path(mount)
        for _, args in edits.hooks:
            versions |= {m.group(1) for a in args if (m := _HOST_DRIVER_ARG.match(a))}
    stale = _Staleness(gone.device_nodes, gone.mounts, gone.hooks, sorted(versions))
    if spec.kind in (DEFAULT_KIND, PLUGIN_KIND) and nvml_gpus is not None:
        stale.gpu_devices = _gpu_devices(spec)
    return stale


def _gpu_devices(spec: CdiSpec) -> int | None:
    """How many full GPUs a spec defines, by the naming strategy that finds the most; None
    when no device is named by a known strategy (the count is then unknown, not zero)."""
    counts = [
        sum(bool(pattern.match(d.name)) for d in spec.devices)
        for pattern in GPU_NAME_STRATEGIES.values()
    ]
    return max(counts) if any(counts) else None


def _versions_in_path(path: str) -> set[str]:
    found = set()
    library = _DRIVER_LIBRARY.match(path.rsplit("/", 1)[-1])
    if library:
        found.add(library.group(1))
    firmware = _FIRMWARE.search(path)
    if firmware:
        found.add(firmware.group(1))
    return found


def _listed(paths: list[str]) -> str:
    shown = ", ".join(paths[:MAX_LISTED])
    return shown + (f" and {len(paths) - MAX_LISTED} more" if len(paths) > MAX_LISTED else "")


def _reasons(spec: CdiSpec, stale: _Staleness, driver: str | None, nvml: int | None) -> list[str]:
    reasons = []
    other = [v for v in stale.driver_versions if v != driver]
    if driver and other:
        reasons.append(f"it names driver {', '.join(other)} but driver {driver} is loaded")
    if stale.gpu_devices is not None and nvml is not None and stale.gpu_devices < nvml:
        reasons.append(f"it defines {stale.gpu_devices} GPU devices but NVML sees {nvml} GPUs")
    for paths, what in (
        (stale.missing_device_nodes, "device nodes"),
        (stale.missing_mounts, "mounted host paths"),
        (stale.missing_hooks, "hook binaries"),
    ):
        if paths:
            reasons.append(f"{len(paths)} {what} do not exist ({_listed(paths)})")
    return reasons


def _shadowed(spec: CdiSpec, priority: int, specs: list[tuple[CdiSpec, int]]) -> bool:
    """Whether every device of `spec` is defined again by a spec of higher priority."""
    higher = {f"{s.kind}={d.name}" for s, p in specs if p > priority for d in s.devices}
    return all(f"{spec.kind}={d.name}" in higher for d in spec.devices)


def _missing(need: _Need) -> Finding:
    return Finding(
        "CDI_SPEC_MISSING",
        Severity.CRITICAL,
        f"containers get GPUs through CDI ({need.reason}) but no CDI spec in "
        f"{', '.join(need.dirs)} defines {need.kind} devices: GPU containers fail to start. "
        f"{need.fix}",
        Action.FIX_CONFIG,
    )


def _summary(
    specs: list[tuple[CdiSpec, int]], data: CdiData, gpus: int, in_use: list[str], parts: list[Part]
) -> str:
    total = len(data["specs"])
    if total == 0:
        return "no CDI spec" + ("" if gpus or parts else "; no NVIDIA GPU on this node")
    valid = len(specs)
    text = f"{total} CDI spec{'s' if total != 1 else ''}"
    if valid != total:
        text += f" ({total - valid} invalid)"
    devices = sum(len(s.devices) for s, _ in specs)
    text += f", {devices} devices"
    if not gpus:
        return text + f"; {parts[0].summary if parts else 'no NVIDIA GPU on this node'}"
    return text + ("; CDI in use for GPUs" if in_use else "; CDI not in use for GPUs")


CHECK: Check[CdiData] = Check(NAME, run, condition="GPURuntimeReady")
