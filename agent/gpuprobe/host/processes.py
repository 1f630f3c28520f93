"""The host's processes: live through psutil, or replayed from a snapshot's processes.json."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuprobe.errors import SnapshotError
from gpuprobe.host.jsonfile import read_json


@dataclass(frozen=True)
class Process:
    """One process: its pid, its name (the kernel's comm) and its command line."""

    pid: int
    name: str
    cmdline: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The process as a processes.json entry."""
        return {"pid": self.pid, "name": self.name, "cmdline": list(self.cmdline)}


@dataclass
class ProcessTable:
    """A list of processes, with the look-ups checks need.

    When recording (for capture), it keeps the processes its look-ups returned, so a
    snapshot carries the processes the checks asked about and no others' command lines.
    """

    processes: list[Process] = field(default_factory=list)
    recording: bool = False
    _seen: dict[int, Process] = field(default_factory=dict)

    def named(self, *names: str) -> list[Process]:
        """Processes whose name, or the base name of argv[0], is one of `names`."""
        wanted = set(names)
        return self._saw([p for p in self.processes if p.name in wanted or _argv0(p) in wanted])

    def by_pid(self, pid: int) -> Process | None:
        """The process with this pid, if any."""
        found = [p for p in self.processes if p.pid == pid]
        return self._saw(found)[0] if found else None

    def _saw(self, found: list[Process]) -> list[Process]:
        if self.recording:
            self._seen.update((p.pid, p) for p in found)
        return found

    def seen(self) -> list[Process]:
        """The processes look-ups returned while recording, by pid."""
        return [self._seen[pid] for pid in sorted(self._seen)]


def _argv0(p: Process) -> str:
    return p.cmdline[0].rsplit("/", 1)[-1] if p.cmdline else ""


def to_json(processes: list[Process]) -> list[dict[str, Any]]:
    """processes.json content."""
    return [p.to_dict() for p in processes]


def live_processes() -> ProcessTable:
    """This host's processes (with `hostPID: true`, the node's), through psutil."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        info = proc.info
        found.append(
            Process(int(info["pid"]), str(info.get("name") or ""), tuple(info.get("cmdline") or ()))
        )
    return ProcessTable(found)


def processes_from_json(entries: Any, where: str = "processes.json") -> ProcessTable:
    """A process table from processes.json content; raises SnapshotError on a bad shape."""
    if not isinstance(entries, list):
        raise SnapshotError(f"{where}: must be a list of processes")
    table = []
    for i, e in enumerate(entries):
        if not (
            isinstance(e, dict)
            and isinstance(e.get("pid"), int)
            and isinstance(e.get("name"), str)
            and isinstance(e.get("cmdline", []), list)
            and all(isinstance(a, str) for a in e.get("cmdline", []))
        ):
            raise SnapshotError(f"{where}: entry {i} needs pid, name and a cmdline list")
        table.append(Process(e["pid"], e["name"], tuple(e.get("cmdline", []))))
    return ProcessTable(table)


def load_processes(path: str) -> ProcessTable:
    """Read processes.json; a missing file is an empty table; raises SnapshotError."""
    try:
        entries = read_json(path)
    except FileNotFoundError:
        return ProcessTable()
    return processes_from_json(entries, path)
