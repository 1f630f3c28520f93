"""What a container engine's configuration says about its OCI runtimes, engine-neutral.

containerd, Docker and CRI-O each name their runtimes differently; their readers
(`containerd_config`, `docker_config`, `crio_config`) all answer with an `EngineConfig`, so
the `toolkit` check judges them the same way: is there an `nvidia` runtime, which binary it
runs, is it the default, is CDI on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuprobe.containers.configfile import FileProblem, Invalid


@dataclass(frozen=True)
class Runtime:
    """One OCI runtime an engine can run containers with."""

    name: str
    binary: str | None  # what the engine executes; None when the entry names none
    defined_in: str  # the file whose entry is in effect
    runtime_type: str | None = None


@dataclass
class EngineConfig:
    """One container engine's effective configuration, read from its files."""

    engine: str  # containerd | docker | crio
    flavor: str  # containerd, k3s, rke2, docker, crio: who wrote the files
    config_path: str  # the main file (what to fix when nothing else is named)
    exists: bool = False  # whether the main file is there
    files: list[str] = field(default_factory=list)  # every file read, in load order
    version: int | None = None  # containerd's config version
    cri_enabled: bool = True  # containerd: False when the CRI plugin is disabled
    runtimes: dict[str, Runtime] = field(default_factory=dict)
    default_runtime: str | None = None  # None: the engine's built-in default
    builtin_default: str = "runc"
    cdi_enabled: bool | None = None  # None: the engine's built-in default
    problems: list[FileProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the engine ignores or drops, and why
    # containerd, when the files do not tell 1.x from 2.x: the runtimes only 2.x keeps (1.x
    # keeps the last file's CRI table alone), the file 1.x would keep, and 1.x's default
    # runtime where it differs from 2.x's.
    dropped_by_1x: list[str] = field(default_factory=list)
    last_cri_file: str | None = None
    default_by_1x: str | None = None
    template: str | None = None  # k3s/RKE2: the template the main file is generated from
    oci_hook: str | None = None  # CRI-O: an NVIDIA OCI hook file (the runtime-less setup)

    def take(self, path: str, raw: bytes | FileProblem, parse: Callable[[str, bytes], Any]) -> Any:
        """`path`'s document, parsed with `parse` (`parse_toml`, `parse_json`) and counted among
        the files read; the FileProblem, also kept, when it cannot be read or parsed."""
        doc = raw if isinstance(raw, FileProblem) else parse(path, raw)
        if isinstance(doc, FileProblem):
            self.problems.append(doc)
        else:
            self.files.append(path)
        return doc

    @property
    def effective_default(self) -> str:
        """The runtime the engine uses when a container names none."""
        return self.default_runtime or self.builtin_default

    def to_data(self) -> dict[str, Any]:
        """The configuration as report data."""
        return {
            "engine": self.engine,
            "flavor": self.flavor,
            "config": self.config_path,
            "config_exists": self.exists,
            "files": list(self.files),
            "config_version": self.version,
            "cri_enabled": self.cri_enabled,
            "runtimes": {
                r.name: {"binary": r.binary, "defined_in": r.defined_in}
                for r in self.runtimes.values()
            },
            "default_runtime": self.effective_default,
            "cdi_enabled": self.cdi_enabled,
            "template": self.template,
            "oci_hook": self.oci_hook,
            "notes": list(self.notes),
            "problems": [{"file": p.path, "problem": p.problem} for p in self.problems],
        }


def table(doc: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """The sub-table `key` of `doc` ({} when absent); raises Invalid when it is no table."""
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise Invalid(f"{where}{key} must be a table")
    return value


def optional_str(doc: dict[str, Any], key: str, where: str) -> str | None:
    """The string `key` of `doc`, or None; raises Invalid when it is not a string."""
    value = doc.get(key)
    if value is not None and not isinstance(value, str):
        raise Invalid(f"{where}{key} must be a string")
    return value


def optional_bool(doc: dict[str, Any], key: str, where: str) -> bool | None:
    """The boolean `key` of `doc`, or None; raises Invalid when it is not true/false."""
    value = doc.get(key)
    if value is not None and not isinstance(value, bool):
        raise Invalid(f"{where}{key} must be true or false")
    return value


def string_list(doc: dict[str, Any], key: str, where: str) -> list[str]:
    """The list of strings `key` of `doc` ([] when absent); raises Invalid otherwise."""
    value = doc.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Invalid(f"{where}{key} must be a list of strings")
    return value
