"""CRI-O's configuration: `/etc/crio/crio.conf` and the drop-ins in `/etc/crio/crio.conf.d/`.

CRI-O reads crio.conf, then every file under crio.conf.d (recursively, in lexical order),
each overriding what came before: a runtime entry replaces the same-named one, other keys
override (cri-o `pkg/config`). `nvidia-ctk runtime configure --runtime=crio` writes the
drop-in `/etc/crio/crio.conf.d/99-nvidia.conf` (NVIDIA Container Toolkit
`pkg/config/engine/crio`):

    [crio]
      [crio.runtime]
        default_runtime = "nvidia"                  (with --set-as-default)
        [crio.runtime.runtimes]
          [crio.runtime.runtimes.nvidia]
            runtime_path = "/usr/bin/nvidia-container-runtime"
            runtime_type = "oci"

CRI-O has CDI always on. Before the runtime existed, CRI-O used the NVIDIA OCI hook
(`oci-nvidia-hook.json` in the OCI hooks directories), which still works.
"""

from __future__ import annotations

from typing import Any

from gpuprobe.containers.configfile import (
    FileProblem,
    Invalid,
    parse_json,
    parse_toml,
    read_host_file,
)
from gpuprobe.containers.runtime import EngineConfig, Runtime, optional_str, table
from gpuprobe.host.fs import HostFS

CRIO_CONF = "/etc/crio/crio.conf"
CRIO_DROP_INS = "/etc/crio/crio.conf.d"
CRIO_SOCKETS = ("/run/crio/crio.sock", "/var/run/crio/crio.sock")
OCI_HOOK_DIRS = ("/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d")
NVIDIA_HOOK_BINARIES = ("nvidia-container-runtime-hook", "nvidia-container-toolkit")
MAX_DROP_INS = 256


def load_crio(fs: HostFS) -> EngineConfig:
    """CRI-O's effective configuration: crio.conf, then its drop-ins."""
    config = EngineConfig("crio", "crio", CRIO_CONF, builtin_default="crun", cdi_enabled=True)
    config.exists = fs.exists(CRIO_CONF)
    for path in [CRIO_CONF, *_drop_ins(fs, CRIO_DROP_INS, 0)][:MAX_DROP_INS]:
        raw = read_host_file(fs, path)
        if raw is None:
            continue
        doc = config.take(path, raw, parse_toml)
        if isinstance(doc, FileProblem):
            continue
        try:
            _apply(config, doc, path)
        except Invalid as exc:
            config.problems.append(FileProblem(path, f"is invalid: {exc}"))
    config.oci_hook = nvidia_oci_hook(fs)
    return config


def _drop_ins(fs: HostFS, directory: str, depth: int) -> list[str]:
    found: list[str] = []
    if depth > 4:
        return found
    for name in fs.listdir(directory):
        path = f"{directory}/{name}"
        found += _drop_ins(fs, path, depth + 1) if fs.is_dir(path) else [path]
    return found


def _apply(config: EngineConfig, doc: dict[str, Any], path: str) -> None:
    runtime = table(table(doc, "crio", ""), "runtime", "crio.")
    default = optional_str(runtime, "default_runtime", "crio.runtime.")
    if default:
        config.default_runtime = default
    for name, entry in table(runtime, "runtimes", "crio.runtime.").items():
        where = f"crio.runtime.runtimes.{name}."
        if not isinstance(entry, dict):
            raise Invalid(f"crio.runtime.runtimes.{name} must be a table")
        config.runtimes[name] = Runtime(
            name,
            optional_str(entry, "runtime_path", where),
            path,
            optional_str(entry, "runtime_type", where),
        )


def nvidia_oci_hook(fs: HostFS) -> str | None:
    """An OCI hook file that runs the NVIDIA Container Runtime hook, if one is installed."""
    for directory in OCI_HOOK_DIRS:
        for path in fs.glob(f"{directory}/*.json"):
            raw = read_host_file(fs, path)
            if raw is None or isinstance(raw, FileProblem):
                continue
            doc = parse_json(path, raw)
            hook = doc.get("hook") if isinstance(doc, dict) else None
            binary = hook.get("path") if isinstance(hook, dict) else None
            if isinstance(binary, str) and binary.rsplit("/", 1)[-1] in NVIDIA_HOOK_BINARIES:
                return path
    return None
