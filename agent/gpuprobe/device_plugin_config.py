"""The NVIDIA device plugin's configuration file (its `config.yaml`, usually a ConfigMap).

gpuprobe reads it from the path its own configuration names (`device_plugin.config_file`):
a file mounted into the agent, such as the plugin's ConfigMap, not a host path. The shape
(k8s-device-plugin, config `version: v1`):

    version: v1
    flags:
      migStrategy: none | single | mixed
      plugin:
        deviceListStrategy: envvar | [envvar, cdi-annotations, ...]
    sharing:
      timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}
      mps: {resources: [{name: nvidia.com/gpu, replicas: 4}]}

Any bytes are accepted: a file that cannot be parsed or has wrong types gives a
`CONFIG_INVALID` finding naming the file (with line and column where YAML gives them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuprobe.report import Action, Finding, Severity

MIG_STRATEGIES = ("none", "single", "mixed")


@dataclass(frozen=True)
class SharedResource:
    """A resource the plugin advertises shared: each GPU counts `replicas` times."""

    name: str
    replicas: int


@dataclass(frozen=True)
class DevicePluginConfig:
    """What gpuprobe needs from the device plugin's configuration."""

    path: str
    mig_strategy: str = "none"
    device_list_strategy: tuple[str, ...] = ("envvar",)
    time_slicing: tuple[SharedResource, ...] = ()
    mps: tuple[SharedResource, ...] = ()

    def to_data(self) -> dict[str, Any]:
        """The configuration as report data."""
        return {
            "path": self.path,
            "mig_strategy": self.mig_strategy,
            "device_list_strategy": list(self.device_list_strategy),
            "time_slicing": [{"name": r.name, "replicas": r.replicas} for r in self.time_slicing],
            "mps": [{"name": r.name, "replicas": r.replicas} for r in self.mps],
        }


class _Invalid(Exception):
    pass


def invalid(path: str, problem: str) -> Finding:
    """The CONFIG_INVALID finding for the plugin's configuration file."""
    return Finding(
        "CONFIG_INVALID",
        Severity.WARNING,
        f"the NVIDIA device plugin configuration {path} is invalid: {problem}",
        Action.FIX_CONFIG,
        f"file:{path}",
    )


def load_device_plugin_config(path: str) -> DevicePluginConfig | Finding:
    """The plugin configuration in `path`, or the CONFIG_INVALID finding that says why not."""
    try:
        with open(path, "rb") as f:
            raw = f.read(1024 * 1024)
    except OSError as exc:
        return invalid(path, f"cannot be read ({exc.strerror or exc})")
    return parse_device_plugin_config(path, raw)


def parse_device_plugin_config(path: str, raw: bytes) -> DevicePluginConfig | Finding:
    """Parse the plugin configuration's bytes; any bytes give a config or a finding."""
    import yaml

    try:
        doc = yaml.safe_load(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return invalid(path, "not UTF-8 text")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        return invalid(path, f"{where}{getattr(exc, 'problem', None) or 'not YAML'}")
    try:
        return _build(path, {} if doc is None else doc)
    except _Invalid as exc:
        return invalid(path, str(exc))


def _build(path: str, doc: Any) -> DevicePluginConfig:
    doc = _mapping(doc, "the document")
    version = doc.get("version", "v1")
    if version != "v1":
        raise _Invalid(f"unsupported version {version!r} (expected v1)")
    flags = _mapping(doc.get("flags"), "flags")
    mig = flags.get("migStrategy", "none")
    if mig not in MIG_STRATEGIES:
        raise _Invalid(f"flags.migStrategy is {mig!r}, not one of {', '.join(MIG_STRATEGIES)}")
    plugin = _mapping(flags.get("plugin"), "flags.plugin")
    strategy = plugin.get("deviceListStrategy", "envvar")
    strategies = [strategy] if isinstance(strategy, str) else strategy
    if not isinstance(strategies, list) or not all(isinstance(s, str) for s in strategies):
        raise _Invalid("flags.plugin.deviceListStrategy must be a string or a list of strings")
    sharing = _mapping(doc.get("sharing"), "sharing")
    return DevicePluginConfig(
        path=path,
        mig_strategy=mig,
        device_list_strategy=tuple(strategies),
        time_slicing=_resources(sharing.get("timeSlicing"), "sharing.timeSlicing"),
        mps=_resources(sharing.get("mps"), "sharing.mps"),
    )


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Invalid(f"{where} must be a mapping")
    return value


def _resources(value: Any, where: str) -> tuple[SharedResource, ...]:
    resources = _mapping(value, where).get("resources") or []
    if not isinstance(resources, list):
        raise _Invalid(f"{where}.resources must be a list")
    found = []
    for i, entry in enumerate(resources):
        entry = _mapping(entry, f"{where}.resources[{i}]")
        name, replicas = entry.get("name"), entry.get("replicas")
        if not isinstance(name, str) or not name:
            raise _Invalid(f"{where}.resources[{i}].name must be a resource name")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
            raise _Invalid(f"{where}.resources[{i}].replicas must be a whole number above 0")
        found.append(SharedResource(name, replicas))
    return tuple(found)
