"""The NVIDIA Container Toolkit on the host: its binaries and its `config.toml`.

The toolkit is installed by the distribution's package (binaries in /usr/bin, config in
/etc/nvidia-container-runtime/config.toml) or by the GPU Operator's toolkit container, which
installs wrapped binaries in /usr/local/nvidia/toolkit and keeps its config in
/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml (the wrappers point
XDG_CONFIG_HOME there). The config's shape (nvidia-container-toolkit, `nvidia-ctk config
default`):

    [nvidia-container-runtime]
    mode = "auto"                    # auto | legacy | cdi | csv | jit-cdi
    [nvidia-container-runtime.modes.cdi]
    default-kind = "nvidia.com/gpu"
    spec-dirs = ["/etc/cdi", "/var/run/cdi"]
    [nvidia-container-cli]
    root = "/run/nvidia/driver"      # the driver root when a driver container provides it
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuprobe.containers.configfile import (
    FileProblem,
    Invalid,
    kind_of,
    parse_toml,
    read_host_file,
)
from gpuprobe.host import Host
from gpuprobe.host.fs import HostFS

PACKAGE_CONFIG = "/etc/nvidia-container-runtime/config.toml"
OPERATOR_ROOT = "/usr/local/nvidia/toolkit"
OPERATOR_CONFIG = f"{OPERATOR_ROOT}/.config/nvidia-container-runtime/config.toml"
CONFIG_FILES = (PACKAGE_CONFIG, OPERATOR_CONFIG)

# Where the toolkit's binaries are installed: the package's directories, then the GPU
# Operator's toolkit directory.
BINARY_DIRS = ("/usr/bin", "/usr/local/bin", "/usr/sbin", "/usr/local/sbin", "/bin", OPERATOR_ROOT)
RUNTIME_BINARY = "nvidia-container-runtime"
BINARIES = (
    RUNTIME_BINARY,
    "nvidia-container-runtime-hook",
    "nvidia-ctk",
    "nvidia-cdi-hook",
    "nvidia-container-cli",
)
# The directories a runtime searches for a binary named without a path (a typical PATH).
SEARCH_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")

RUNTIME_MODES = ("auto", "legacy", "cdi", "csv", "jit-cdi")
DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
DEFAULT_KIND = "nvidia.com/gpu"


@dataclass(frozen=True)
class ToolkitConfig:
    """What gpuprobe needs from one toolkit config.toml."""

    path: str
    mode: str = "auto"
    cdi_spec_dirs: tuple[str, ...] = DEFAULT_SPEC_DIRS
    cdi_default_kind: str = DEFAULT_KIND
    driver_root: str = "/"
    volume_mounts: bool = False

    def to_data(self) -> dict[str, Any]:
        """The config as report data."""
        return {
            "path": self.path,
            "mode": self.mode,
            "cdi_spec_dirs": list(self.cdi_spec_dirs),
            "cdi_default_kind": self.cdi_default_kind,
            "driver_root": self.driver_root,
            "accept_visible_devices_as_volume_mounts": self.volume_mounts,
        }


def parse_toolkit_config(path: str, raw: bytes) -> ToolkitConfig | FileProblem:
    """Parse a toolkit config.toml; any bytes give a config or a FileProblem."""
    doc = parse_toml(path, raw)
    if isinstance(doc, FileProblem):
        return doc
    try:
        return _build(path, doc)
    except Invalid as exc:
        return FileProblem(path, f"is invalid: {exc}")


def _build(path: str, doc: dict[str, Any]) -> ToolkitConfig:
    runtime = _table(doc, "nvidia-container-runtime")
    mode = runtime.get("mode", "auto")
    if not isinstance(mode, str):
        raise Invalid(f"nvidia-container-runtime.mode must be a string, not {kind_of(mode)}")
    if mode not in RUNTIME_MODES:
        raise Invalid(
            f"nvidia-container-runtime.mode is {mode!r}, not one of {', '.join(RUNTIME_MODES)}"
        )
    modes = _table(runtime, "modes", "nvidia-container-runtime.")
    cdi = _table(modes, "cdi", "nvidia-container-runtime.modes.")
    where = "nvidia-container-runtime.modes.cdi."
    spec_dirs = cdi.get("spec-dirs", list(DEFAULT_SPEC_DIRS))
    if not isinstance(spec_dirs, list) or not all(
        isinstance(d, str) and d.startswith("/") for d in spec_dirs
    ):
        raise Invalid(f"{where}spec-dirs must be a list of absolute paths")
    kind = cdi.get("default-kind", DEFAULT_KIND)
    if not isinstance(kind, str):
        raise Invalid(f"{where}default-kind must be a string, not {kind_of(kind)}")
    cli = _table(doc, "nvidia-container-cli")
    root = cli.get("root", "/")
    if not isinstance(root, str) or not root.startswith("/"):
        raise Invalid("nvidia-container-cli.root must be an absolute path")
    volume_mounts = doc.get("accept-nvidia-visible-devices-as-volume-mounts", False)
    if not isinstance(volume_mounts, bool):
        raise Invalid("accept-nvidia-visible-devices-as-volume-mounts must be true or false")
    return ToolkitConfig(
        path=path,
        mode=mode,
        cdi_spec_dirs=tuple(spec_dirs),
        cdi_default_kind=kind,
        driver_root=root,
        volume_mounts=volume_mounts,
    )


def _table(doc: dict[str, Any], key: str, prefix: str = "") -> dict[str, Any]:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise Invalid(f"{prefix}{key} must be a table, not {kind_of(value)}")
    return value


def load_toolkit_configs(fs: HostFS) -> list[ToolkitConfig | FileProblem]:
    """Every toolkit config.toml on the host (package first, then the GPU Operator's)."""
    found: list[ToolkitConfig | FileProblem] = []
    for path in CONFIG_FILES:
        raw = read_host_file(fs, path)
        if raw is None:
            continue
        found.append(raw if isinstance(raw, FileProblem) else parse_toolkit_config(path, raw))
    return found


def toolkit_binaries(fs: HostFS) -> dict[str, list[str]]:
    """Each toolkit binary found, with every place it is installed."""
    found: dict[str, list[str]] = {}
    for directory in BINARY_DIRS:
        for name in BINARIES:
            path = f"{directory}/{name}"
            if fs.is_executable(path):
                found.setdefault(name, []).append(path)
    return found


def resolve_binary(fs: HostFS, binary: str) -> str | None:
    """Where a runtime's binary is: itself when absolute, else looked up as PATH would."""
    if binary.startswith("/"):
        return binary if fs.is_executable(binary) else None
    if "/" in binary or not binary:
        return None  # a relative path depends on the runtime's working directory
    for directory in SEARCH_PATH:
        if fs.is_executable(f"{directory}/{binary}"):
            return f"{directory}/{binary}"
    return None


def is_nvidia_runtime_binary(binary: str | None) -> bool:
    """Whether a runtime binary is the NVIDIA Container Runtime (or one of its modes)."""
    if not binary:
        return False
    return binary.rsplit("/", 1)[-1].startswith(RUNTIME_BINARY)


def effective_toolkit_config(
    configs: list[ToolkitConfig | FileProblem],
) -> ToolkitConfig | FileProblem | None:
    """The config the runtime uses: the GPU Operator's when it is installed, else the package's."""
    by_path = {c.path: c for c in configs}
    return by_path.get(OPERATOR_CONFIG) or by_path.get(PACKAGE_CONFIG)


@dataclass(frozen=True)
class ToolkitInstall:
    """The NVIDIA Container Toolkit as installed on the host: each binary found with every
    place it is installed, each config.toml read (or why it could not be), and the config the
    runtime uses (`effective_toolkit_config`)."""

    binaries: dict[str, list[str]]
    configs: list[ToolkitConfig | FileProblem]
    effective: ToolkitConfig | FileProblem | None


def read_toolkit(host: Host) -> ToolkitInstall:
    """The toolkit's binaries and config files on this host."""
    binaries = toolkit_binaries(host.fs)
    configs = load_toolkit_configs(host.fs)
    return ToolkitInstall(binaries, configs, effective_toolkit_config(configs))


def read_toolkit_config(host: Host) -> ToolkitConfig | FileProblem | None:
    """The toolkit config the runtime uses on this host (None where none is installed)."""
    return effective_toolkit_config(load_toolkit_configs(host.fs))


def host_binary(host: Host, binary: str) -> str | None:
    """Where a runtime's binary is on this host (`resolve_binary`), None when it is not."""
    return resolve_binary(host.fs, binary)
