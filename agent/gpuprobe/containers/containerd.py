"""containerd's configuration as containerd itself loads it: config versions, imports, drop-ins.

Facts this reader follows (containerd `cmd/containerd/server/config`, and NVIDIA Container
Toolkit `pkg/config/engine/containerd`):

- The CRI plugin's table is named by the config `version`: 1 (or none) `cri`, 2
  `io.containerd.grpc.v1.cri`, 3 and 4 (containerd 2.x) `io.containerd.cri.v1.runtime`. A table
  under another version's name is ignored. Runtimes live at
  `plugins.<CRI>.containerd.runtimes.<name>` with `runtime_type` and `options.BinaryName`; the
  default at `plugins.<CRI>.containerd.default_runtime_name`; CDI at `plugins.<CRI>.enable_cdi`.
- `imports` are loaded after the file that names them, breadth first: relative paths are
  relative to that file's directory, `*` patterns are globbed (sorted), a named file that does
  not exist stops containerd. A drop-in may not have a higher version than the root file. A
  drop-in without `version` is read as the root's version.
- Merging depends on the containerd binary, not on the config version: containerd 1.x
  replaces a plugin's whole table with the one of the last file that has it (checked against
  `containerd config dump` of containerd 1.6); containerd 2.x merges plugin tables key by key
  whatever the files' version (a version 2 config is merged, then migrated). Only containerd
  2.x reads config version 3 or 4, so those are merged; for versions 1 and 2 the binary is not
  known from the files, and a runtime either rule keeps counts as configured, with a note
  saying which containerd drops it.
- `nvidia-ctk runtime configure` writes `/etc/containerd/conf.d/99-nvidia.toml` and adds
  `imports = ["/etc/containerd/conf.d/*.toml"]` to the root file; k3s and RKE2 generate their
  config.toml (from `config.toml.tmpl` when one exists) with an `nvidia` runtime when they find
  nvidia-container-runtime on the host.

Sources:
- https://github.com/containerd/containerd/blob/main/cmd/containerd/server/config/config.go
  (2.x `LoadConfig`, `mergeConfig`; config versions and their migrations)
- https://github.com/containerd/containerd/blob/release/1.7/services/server/config/config.go
  (1.x `mergeConfig`: plugin tables replaced whole)
- https://github.com/containerd/containerd/issues/5837 (1.x replaces a plugin's table)
- https://github.com/containerd/containerd/pull/9982 (2.0: plugin tables merged, not replaced)
- https://github.com/containerd/containerd/pull/10165 (1.6/1.7 refuse config versions above 2)
- https://github.com/containerd/containerd/pull/12891 (drop-in version above the root's)
- https://github.com/NVIDIA/nvidia-container-toolkit/pull/1311 (the toolkit's drop-in carries
  the whole CRI table because of the 1.x rule)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from gpuprobe.containers.configfile import FileProblem, Invalid, parse_toml, read_host_file
from gpuprobe.containers.runtime import (
    EngineConfig,
    Runtime,
    optional_bool,
    optional_str,
    string_list,
    table,
)
from gpuprobe.host.fs import HostFS

# flavor: (root config, its socket, the templates it may be generated from)
CONTAINERD_FLAVORS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "containerd": ("/etc/containerd/config.toml", "/run/containerd/containerd.sock", ()),
    "k3s": (
        "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
        "/run/k3s/containerd/containerd.sock",
        (
            "/var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.tmpl",
            "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl",
        ),
    ),
    "rke2": (
        "/var/lib/rancher/rke2/agent/etc/containerd/config.toml",
        "/run/k3s/containerd/containerd.sock",
        (
            "/var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.tmpl",
            "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl",
        ),
    ),
}
CRI_PLUGIN = {
    1: "cri",
    2: "io.containerd.grpc.v1.cri",
    3: "io.containerd.cri.v1.runtime",
    4: "io.containerd.cri.v1.runtime",  # containerd 2.3: server settings moved into plugins
}
MERGING_VERSION = 3  # config versions from here on are read by containerd 2.x alone
# Names in `disabled_plugins` that turn the CRI service off.
CRI_PLUGIN_IDS = frozenset({"cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"})
MAX_FILES = 64  # imports are followed up to this many files (a loop or a glob of thousands)


@dataclass
class _CriTable:
    """One file's CRI plugin settings, normalised across config versions."""

    path: str
    default_runtime: str | None = None
    enable_cdi: bool | None = None
    runtimes: dict[str, Runtime] = field(default_factory=dict)


def load_containerd(fs: HostFS, flavor: str, path: str, major: int | None = None) -> EngineConfig:
    """The effective containerd configuration rooted at `path`, imports followed.

    `major` is the containerd binary's major version when the caller knows it; None: known
    only from a config version that containerd 1.x cannot read.
    """
    templates = CONTAINERD_FLAVORS.get(flavor, ("", "", ()))[2]
    config = EngineConfig("containerd", flavor, path)
    config.template = next((t for t in templates if fs.is_file(t)), None)
    tables: list[_CriTable] = []
    disabled: list[str] = []
    pending, loaded = [path], set[str]()
    while pending and len(loaded) < MAX_FILES:
        current = pending.pop(0)
        if current in loaded:
            continue
        loaded.add(current)
        doc = _read(fs, config, current, is_root=current == path)
        if doc is None:
            continue
        try:
            version = _version(doc, config, current)
            if version is None:
                continue
            disabled += string_list(doc, "disabled_plugins", "")
            if config.version == 2:
                _plugin_uris(doc)
            pending += _imports(fs, config, current, string_list(doc, "imports", ""))
            cri = _cri_table(doc, version, current, config)
        except Invalid as exc:
            config.problems.append(FileProblem(current, f"is invalid: {exc}"))
            continue
        if cri is not None:
            tables.append(cri)
    config.cri_enabled = not (CRI_PLUGIN_IDS & set(disabled))
    if major is None and (config.version or 1) >= MERGING_VERSION:
        major = 2
    _effective(config, tables, major)
    _unimported_drop_ins(fs, config, loaded)
    return config


def _unimported_drop_ins(fs: HostFS, config: EngineConfig, loaded: set[str]) -> None:
    """Drop-ins beside the root file that it does not import: containerd never reads them."""
    if not config.exists:
        return
    pattern = f"{os.path.dirname(config.config_path)}/conf.d/*.toml"
    for path in fs.glob(pattern):
        if path not in loaded:
            config.notes.append(
                f"{path} is not imported by {config.config_path}, so containerd ignores it "
                f'(the root file needs imports = ["{pattern}"])'
            )


def _read(fs: HostFS, config: EngineConfig, path: str, is_root: bool) -> dict[str, Any] | None:
    raw = read_host_file(fs, path)
    if raw is None:
        if not is_root:
            config.problems.append(
                FileProblem(path, "is imported but does not exist: containerd will not start")
            )
        return None
    if is_root:
        config.exists = True
    doc = config.take(path, raw, parse_toml)
    return None if isinstance(doc, FileProblem) else doc


def _version(doc: dict[str, Any], config: EngineConfig, path: str) -> int | None:
    """The file's config version (the root's when it names none); None when unusable."""
    value = doc.get("version")
    if value is not None and (type(value) is not int or value not in CRI_PLUGIN):
        raise Invalid(f"version is {value!r}: containerd knows config versions 1 to 4")
    if config.version is None:  # the root file
        config.version = value or 1
        return config.version
    version = value or config.version
    if version > config.version:
        config.problems.append(
            FileProblem(
                path,
                f"has config version {version}, higher than the root file's "
                f"{config.version}: containerd will not start",
            )
        )
        return None
    return version


def _plugin_uris(doc: dict[str, Any]) -> None:
    """Config version 2 names plugins by URI (io.containerd.<type>.<version>); containerd 1.x
    refuses to start on a shorter name such as version 1's `cri`."""
    named = [("plugin key", k) for k in table(doc, "plugins", "")]
    named += [("disabled plugin", p) for p in string_list(doc, "disabled_plugins", "")]
    named += [("required plugin", p) for p in string_list(doc, "required_plugins", "")]
    for what, name in named:
        if len(name.split(".")) < 4:
            raise Invalid(
                f"{what} {name!r} is not a plugin URI (io.containerd.<type>.<version>) as "
                "config version 2 needs: containerd will not start"
            )


def _imports(fs: HostFS, config: EngineConfig, path: str, imports: list[str]) -> list[str]:
    found = []
    for entry in imports:
        if not entry.strip():
            # containerd joins it to the file's directory and fails to load a directory.
            raise Invalid("imports names an empty path")
        target = os.path.normpath(os.path.join(os.path.dirname(path), entry))
        if "*" not in target:
            found.append(target)
            continue
        if "*" in os.path.dirname(target):
            config.notes.append(
                f"{path}: import {entry!r} has a wildcard in a directory name, which this "
                "check does not follow"
            )
            continue
        found += [p for p in fs.glob(target) if fs.is_file(p)]
    return found


def _cri_table(
    doc: dict[str, Any], version: int, path: str, config: EngineConfig
) -> _CriTable | None:
    plugins = table(doc, "plugins", "")
    name = CRI_PLUGIN[version]
    for other_version, other in CRI_PLUGIN.items():
        if other != name and other in plugins and _has_runtimes(plugins[other]):
            config.notes.append(
                f'{path}: plugins."{other}" (config version {other_version}) is ignored '
                f'under config version {version}, which reads plugins."{name}"'
            )
    if name not in plugins:
        return None
    where = f'plugins."{name}".'
    cri = table(plugins, name, "plugins.")
    containerd = table(cri, "containerd", where)
    where_c = f"{where}containerd."
    found = _CriTable(
        path,
        default_runtime=optional_str(containerd, "default_runtime_name", where_c),
        enable_cdi=optional_bool(cri, "enable_cdi", where),
    )
    for runtime_name, entry in table(containerd, "runtimes", where_c).items():
        where_r = f"{where_c}runtimes.{runtime_name}."
        if not isinstance(entry, dict):
            raise Invalid(f"{where_c}runtimes.{runtime_name} must be a table")
        options = table(entry, "options", where_r)
        # runc v2 shim: options.BinaryName; the legacy v1 runtime: options.Runtime or
        # runtime_engine (containerd < 1.4 configs that nvidia-ctk still writes for v1).
        binary = (
            optional_str(options, "BinaryName", f"{where_r}options.")
            or optional_str(options, "Runtime", f"{where_r}options.")
            or optional_str(entry, "runtime_engine", where_r)
            or None
        )
        found.runtimes[runtime_name] = Runtime(
            runtime_name, binary, path, optional_str(entry, "runtime_type", where_r)
        )
    return found


def _has_runtimes(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("containerd"), dict)


def _effective(config: EngineConfig, tables: list[_CriTable], major: int | None) -> None:
    """Combine the files' CRI tables as the node's containerd does (`major`: 1, 2 or unknown)."""
    if not tables:
        return
    merged, last = _merged(tables), tables[-1]
    if major == 1:
        config.runtimes = dict(last.runtimes)
        config.default_runtime = last.default_runtime
        config.cdi_enabled = last.enable_cdi
    else:  # containerd 2.x, or unknown: what either rule keeps
        config.runtimes = dict(merged.runtimes)
        config.default_runtime = merged.default_runtime
        config.cdi_enabled = merged.enable_cdi
    if major == 2:
        return
    for name, runtime in merged.runtimes.items():
        if name in last.runtimes:
            continue
        if major == 1:
            config.notes.append(
                f"runtime {name!r} of {runtime.defined_in} is dropped: {last.path} redefines "
                "the CRI plugin's table, and containerd 1.x keeps only the last file's table"
            )
        else:
            config.dropped_by_1x.append(name)
            config.last_cri_file = last.path
            config.notes.append(
                f"runtime {name!r} of {runtime.defined_in} is kept by containerd 2.x only: "
                f"{last.path} redefines the CRI plugin's table, and containerd 1.x keeps only "
                f"the last file's table (config version {config.version} is read by both)"
            )
    if major is None and merged.default_runtime != last.default_runtime:
        config.default_by_1x = last.default_runtime or config.builtin_default
        config.last_cri_file = last.path
        config.notes.append(
            f"the default runtime is {merged.default_runtime} with containerd 2.x, "
            f"{last.default_runtime or config.builtin_default} with containerd 1.x "
            f"(only {last.path}'s CRI table)"
        )


def _merged(tables: list[_CriTable]) -> _CriTable:
    """The CRI tables merged key by key, later files winning (containerd 2.x)."""
    merged = _CriTable(tables[-1].path)
    for cri in tables:
        for name, runtime in cri.runtimes.items():
            earlier = merged.runtimes.get(name)
            if earlier is not None:  # an entry that names no binary keeps the earlier one's
                runtime = Runtime(
                    name,
                    runtime.binary or earlier.binary,
                    runtime.defined_in,
                    runtime.runtime_type or earlier.runtime_type,
                )
            merged.runtimes[name] = runtime
        merged.default_runtime = cri.default_runtime or merged.default_runtime
        if cri.enable_cdi is not None:
            merged.enable_cdi = cri.enable_cdi
    return merged
