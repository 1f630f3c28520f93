"""The CDI spec files on the host: every `.json` and `.yaml` file in the spec directories, read
and parsed as CDI runtimes read them (`gpuprobe.containers.cdi`), and which host paths a spec
names exist.

Runtimes read `.yaml` and `.json` only: a `.yml` file is named as ignored, other files and
directories are passed over.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuprobe.containers.cdi import CdiSpec, parse_cdi_spec
from gpuprobe.containers.configfile import FileProblem, read_host_file
from gpuprobe.host import Host

SPEC_SUFFIXES = (".json", ".yaml")
IGNORED_SUFFIX = ".yml"


@dataclass(frozen=True)
class SpecFile:
    """One spec file: its path, its directory's place in the list read (a later directory's
    spec overrides an earlier one's devices), the spec or why it cannot be used, and whether
    its bytes name an `nvidia.com/` kind (whose spec it was when it does not parse)."""

    path: str
    priority: int
    spec: CdiSpec | FileProblem
    names_nvidia: bool


@dataclass(frozen=True)
class SpecDirs:
    """What the spec directories hold: the spec files in directory order, each directory's
    files as listed, and the `.yml` files runtimes ignore."""

    files: tuple[SpecFile, ...]
    ignored: tuple[str, ...]


def read_spec_dirs(host: Host, dirs: Iterable[str]) -> SpecDirs:
    """Every spec file in `dirs` (absent directories hold none), read and parsed."""
    files: list[SpecFile] = []
    ignored: list[str] = []
    for priority, directory in enumerate(dirs):
        for name in host.fs.listdir(directory):
            path = f"{directory}/{name}"
            if not name.endswith(SPEC_SUFFIXES):
                if name.endswith(IGNORED_SUFFIX):
                    ignored.append(path)
                continue
            if host.fs.is_dir(path):
                continue
            raw = read_host_file(host.fs, path)
            if raw is None:
                continue
            parsed = raw if isinstance(raw, FileProblem) else parse_cdi_spec(path, raw)
            nvidia = isinstance(raw, bytes) and b"nvidia.com/" in raw
            files.append(SpecFile(path, priority, parsed, nvidia))
    return SpecDirs(tuple(files), tuple(ignored))


def present_paths(host: Host, spec: CdiSpec) -> frozenset[str]:
    """The host paths a spec names (device nodes, mounted paths, hook binaries) that exist on
    this host; a relative path names nothing on the host and is never present."""
    named: list[str] = []
    for edits in spec.all_edits():
        named += edits.device_nodes
        named += edits.mounts
        named += [hook for hook, _ in edits.hooks]
    return frozenset(p for p in dict.fromkeys(named) if p.startswith("/") and host.fs.exists(p))
