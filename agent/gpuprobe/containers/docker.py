"""Docker's `/etc/docker/daemon.json`: its runtimes, default runtime and CDI switch.

`nvidia-ctk runtime configure --runtime=docker` writes (NVIDIA Container Toolkit
`pkg/config/engine/docker`, JSON indented by four spaces):

    {
        "default-runtime": "nvidia",                  (with --set-as-default)
        "features": {"cdi": true},                    (with --cdi.enabled)
        "runtimes": {
            "nvidia": {"args": [], "path": "nvidia-container-runtime"}
        }
    }

A `path` without a slash is looked up in dockerd's PATH. Docker's own default runtime is runc.
"""

from __future__ import annotations

from typing import Any

from gpuprobe.containers.configfile import FileProblem, Invalid, kind_of, parse_json, read_host_file
from gpuprobe.containers.runtime import EngineConfig, Runtime, optional_bool, table
from gpuprobe.host.fs import HostFS

DAEMON_JSON = "/etc/docker/daemon.json"
DOCKER_SOCKETS = ("/run/docker.sock", "/var/run/docker.sock")


def load_docker(fs: HostFS, path: str = DAEMON_JSON) -> EngineConfig:
    """Docker's configuration from daemon.json (Docker's defaults when it is absent)."""
    config = EngineConfig("docker", "docker", path)
    raw = read_host_file(fs, path)
    if raw is None:
        return config
    config.exists = True
    doc = config.take(path, raw, parse_json)
    if isinstance(doc, FileProblem):
        return config
    try:
        _apply(config, doc, path)
    except Invalid as exc:
        config.problems.append(FileProblem(path, f"is invalid: {exc}"))
    return config


def _apply(config: EngineConfig, doc: Any, path: str) -> None:
    if not isinstance(doc, dict):
        raise Invalid(f"must hold a JSON object, not {kind_of(doc)}")
    for name, entry in table(doc, "runtimes", "").items():
        if not isinstance(entry, dict):
            raise Invalid(f"runtimes.{name} must be an object")
        binary = entry.get("path")
        if binary is not None and not isinstance(binary, str):
            raise Invalid(f"runtimes.{name}.path must be a string")
        config.runtimes[name] = Runtime(name, binary, path)
    default = doc.get("default-runtime")
    if default is not None and not isinstance(default, str):
        raise Invalid("default-runtime must be a string")
    config.default_runtime = default
    config.cdi_enabled = optional_bool(table(doc, "features", ""), "cdi", "features.")
