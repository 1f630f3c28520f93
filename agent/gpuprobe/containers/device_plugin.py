"""The NVIDIA device plugin's configuration file (its `config.yaml`, usually a ConfigMap).

gpuprobe reads it from the path its own configuration names (`device_plugin.config_file`):
a file mounted into the agent, such as the plugin's ConfigMap, not a host path; `capture` keeps
it in the snapshot (`device-plugin.json`) and a replay reads it from there. The shape
(k8s-device-plugin, config `version: v1`):

    version: v1
    flags:
      migStrategy: none | single | mixed
      plugin:
        deviceListStrategy: envvar | [envvar, cdi-annotations, ...]
    sharing:
      timeSlicing:
        renameByDefault: false           # true: advertise <name>.shared
        resources: [{name: nvidia.com/gpu, replicas: 4, rename: ..., devices: all | N | [0, 1]}]
      mps: {resources: [{name: nvidia.com/gpu, replicas: 4}]}

A resource name without a prefix gets the plugin's `nvidia.com/` (k8s-device-plugin
`api/config/v1/resources.go`); `devices` is `all` (the default), a count, or a list of GPU
indexes, MIG indexes (`0:1`) or UUIDs (`api/config/v1/replicas.go`). MPS wins over
time-slicing when both are given (`api/config/v1/sharing.go`).

Any bytes are accepted: a file that cannot be read or parsed, or has wrong types, gives a
`FileProblem` naming the file (with line and column where YAML gives them), which the
`device_plugin` check reports as CONFIG_INVALID.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuprobe.config import Config
from gpuprobe.containers.configfile import FileProblem, Invalid, parse_yaml
from gpuprobe.host import Host
from gpuprobe.host.agentfiles import AgentFile, read_agent_file

MIG_STRATEGIES = ("none", "single", "mixed")
RESOURCE_PREFIX = "nvidia.com/"
SHARED_SUFFIX = ".shared"


# The `device_plugin` check's name: its section of the config file holds these paths, which
# the checks that read the plugin and the node's facts share.
SECTION = "device_plugin"


@dataclass(frozen=True)
class DevicePluginPaths:
    """Where the NVIDIA device plugin is seen from: its config file and its sockets (the
    `device_plugin` check's section of the config file; the plugin's own configuration, read
    from `config_file`, is `DevicePluginConfig`)."""

    # The plugin's own config.yaml mounted into the agent (e.g. its ConfigMap); not a host path.
    config_file: str | None = None
    # The kubelet's device-plugins directory on the host.
    socket_dir: str = "/var/lib/kubelet/device-plugins"


def plugin_paths(config: Config) -> DevicePluginPaths:
    """Where the device plugin is seen from, as the config file's `device_plugin` says."""
    return config.section(SECTION, DevicePluginPaths)


def is_kubernetes_node(host: Host, config: Config) -> bool:
    """A Kubernetes node is one where the kubelet's device-plugins directory exists."""
    return host.fs.is_dir(plugin_paths(config).socket_dir)


@dataclass(frozen=True)
class SharedResource:
    """A resource the plugin advertises shared: each GPU counts `replicas` times.

    `devices` is "all", a count of GPUs, or the GPUs named (indexes, `gpu:mig`, UUIDs);
    `rename` is the name the shared resource is advertised under, when not its own.
    """

    name: str
    replicas: int
    rename: str | None = None
    devices: str | int | tuple[str, ...] = "all"

    @property
    def advertised(self) -> str:
        """The resource name the kubelet sees."""
        return self.rename or self.name

    def to_data(self) -> dict[str, Any]:
        """The resource as report data."""
        devices = list(self.devices) if isinstance(self.devices, tuple) else self.devices
        return {
            "name": self.name,
            "advertised": self.advertised,
            "replicas": self.replicas,
            "devices": devices,
        }


@dataclass(frozen=True)
class DevicePluginConfig:
    """What gpuprobe needs from the device plugin's configuration."""

    path: str
    mig_strategy: str = "none"
    device_list_strategy: tuple[str, ...] = ("envvar",)
    time_slicing: tuple[SharedResource, ...] = ()
    mps: tuple[SharedResource, ...] = ()

    @property
    def sharing_strategy(self) -> str:
        """The sharing the plugin applies: mps, time-slicing or none (MPS wins, as there)."""
        if self.mps:
            return "mps"
        return "time-slicing" if self.time_slicing else "none"

    @property
    def shared(self) -> tuple[SharedResource, ...]:
        """The resources of the sharing strategy in effect."""
        return self.mps if self.mps else self.time_slicing

    def to_data(self) -> dict[str, Any]:
        """The configuration as report data."""
        return {
            "path": self.path,
            "mig_strategy": self.mig_strategy,
            "device_list_strategy": list(self.device_list_strategy),
            "sharing_strategy": self.sharing_strategy,
            "time_slicing": [r.to_data() for r in self.time_slicing],
            "mps": [r.to_data() for r in self.mps],
        }


@dataclass(frozen=True)
class PluginConfigFile:
    """The device plugin's configuration file and what it gave: the configuration, or the
    problem that says why it cannot be used."""

    path: str
    result: DevicePluginConfig | FileProblem


def device_plugin_file(host: Host, config: Config) -> PluginConfigFile | None:
    """The plugin configuration file the node runs with; None when none is given.

    A snapshot's own copy (`device-plugin.json`) wins; else the file `device_plugin.config_file`
    names is read from the agent's filesystem (so a configuration can also be tried on a
    snapshot that holds none).
    """
    file = host.device_plugin_config
    if file is None:
        path = plugin_paths(config).config_file
        if path is None:
            return None
        file = read_agent_file(path)
    return PluginConfigFile(file.path, _from_file(file))


def device_plugin_config(host: Host, config: Config) -> DevicePluginConfig | FileProblem | None:
    """The plugin configuration the node runs with, or the problem that says why it cannot be
    used; None when none is given (`device_plugin_file` without the path)."""
    file = device_plugin_file(host, config)
    return None if file is None else file.result


def _from_file(file: AgentFile) -> DevicePluginConfig | FileProblem:
    if file.content is None:
        return FileProblem(file.path, f"cannot be read ({file.error})")
    return parse_device_plugin_config(file.path, file.content)


def parse_device_plugin_config(path: str, raw: bytes) -> DevicePluginConfig | FileProblem:
    """Parse the plugin configuration's bytes; any bytes give a config or a FileProblem."""
    doc = parse_yaml(path, raw)
    if isinstance(doc, FileProblem):
        return doc
    try:
        return _build(path, {} if doc is None else doc)
    except Invalid as exc:
        return FileProblem(path, f"is invalid: {exc}")


def _build(path: str, doc: Any) -> DevicePluginConfig:
    doc = _mapping(doc, "the document")
    version = doc.get("version", "v1")
    if version != "v1":
        raise Invalid(f"unsupported version {version!r} (expected v1)")
    flags = _mapping(doc.get("flags"), "flags")
    mig = flags.get("migStrategy", "none")
    if mig not in MIG_STRATEGIES:
        raise Invalid(f"flags.migStrategy is {mig!r}, not one of {', '.join(MIG_STRATEGIES)}")
    plugin = _mapping(flags.get("plugin"), "flags.plugin")
    strategy = plugin.get("deviceListStrategy", "envvar")
    strategies = [strategy] if isinstance(strategy, str) else strategy
    if not isinstance(strategies, list) or not all(isinstance(s, str) for s in strategies):
        raise Invalid("flags.plugin.deviceListStrategy must be a string or a list of strings")
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
        raise Invalid(f"{where} must be a mapping")
    return value


def _resources(value: Any, where: str) -> tuple[SharedResource, ...]:
    sharing = _mapping(value, where)
    resources = sharing.get("resources") or []
    if not isinstance(resources, list):
        raise Invalid(f"{where}.resources must be a list")
    rename_by_default = sharing.get("renameByDefault", False)
    if not isinstance(rename_by_default, bool):
        raise Invalid(f"{where}.renameByDefault must be true or false")
    found = []
    for i, entry in enumerate(resources):
        at = f"{where}.resources[{i}]"
        entry = _mapping(entry, at)
        name, replicas = _resource_name(entry.get("name"), f"{at}.name"), entry.get("replicas")
        if name is None:
            raise Invalid(f"{at}.name must be a resource name")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
            raise Invalid(f"{at}.replicas must be a whole number above 0")
        rename = _resource_name(entry.get("rename"), f"{at}.rename")
        if rename is None and rename_by_default:
            rename = name + SHARED_SUFFIX
        found.append(SharedResource(name, replicas, rename, _devices(entry, at)))
    return tuple(found)


def _resource_name(value: Any, where: str) -> str | None:
    """A resource name with the plugin's `nvidia.com/` prefix; None when absent."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip("/"):
        raise Invalid(f"{where} must be a resource name")
    return value if value.startswith(RESOURCE_PREFIX) else RESOURCE_PREFIX + value


def _devices(entry: dict[str, Any], where: str) -> str | int | tuple[str, ...]:
    devices = entry.get("devices", "all")
    if devices == "all":
        return "all"
    if isinstance(devices, int) and not isinstance(devices, bool) and devices > 0:
        return devices
    if isinstance(devices, list) and devices and all(_device_ref(d) for d in devices):
        return tuple(str(d) for d in devices)
    raise Invalid(
        f"{where}.devices must be all, a count above 0, or a list of GPU indexes, "
        "MIG indexes or UUIDs"
    )


def _device_ref(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    if not isinstance(value, str):
        return False
    parts = value.split(":")
    return (len(parts) <= 2 and all(p.isdigit() for p in parts)) or value.startswith(
        ("GPU-", "MIG-")
    )
