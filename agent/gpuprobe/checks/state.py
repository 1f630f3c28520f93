"""What checks keep between runs, kept by the runner: `Keeps` (a check's declaration) and
`CheckStates` (the runner's keeping of it).

A check that remembers something from one run to the next (since when a GPU is idle, the last
RDMA error counters, the XIDs seen) declares it in its record: `Check(..., keeps=Keeps(new,
survives_restart))`, `new` making the empty state of its type. The runner keeps each check's
state in memory for the runner's life (the daemon's; a one-shot `check` starts empty) and
hands it to the check's run in its context (`ctx.kept(KEEPS)`). A check whose state must
survive a restart (the xid check's sticky faults and operators' clearings) also gets the
runner's one state directory (`ctx.state_dir(KEEPS, config)`) and reads and writes its files
there only through `StateDir` (atomic JSON files), so no check opens a file of its own.

The state directory is the agent's own (a hostPath in the DaemonSet): the one a check's
configuration names (`xid.state_dir`, `workloads.state_dir`: each names the one directory, so
two that name different ones are an error, said in one line, never one check's files moved
silently), else /var/lib/gpuprobe on the live node, and none for a replayed snapshot (its
replay must not depend on this machine's state). A state file that cannot be read is kept
aside (`<file>.bad`) when its check starts afresh (`StateDir.set_aside`), never overwritten.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from gpuprobe.config import Config
from gpuprobe.errors import UsageError
from gpuprobe.host import Host, state_files

S = TypeVar("S")
T = TypeVar("T")
LOG = logging.getLogger("gpuprobe.state")

# The live node's state directory when no configuration names one.
DEFAULT_STATE_DIR = "/var/lib/gpuprobe"


@dataclass(frozen=True, eq=False)
class Keeps(Generic[S]):
    """What a check keeps between its runs: its state's type, made empty by `new`, and
    whether it must survive a restart of the agent (kept in the state directory too)."""

    new: Callable[[], S]
    survives_restart: bool = False
    # Where the check's configuration names the state directory, if it does (the xid check's
    # `xid.state_dir`), and the setting's name (said when two settings disagree); None: it
    # names none.
    configured_dir: Callable[[Config], str | None] | None = None
    setting: str = ""


class CheckStates:
    """The checks' states, one per declaration, kept for the life of one runner, and the
    state directory of those that survive a restart."""

    def __init__(self, directory: str | None = None, resolved: bool = False) -> None:
        # The state directory (None: none); `resolved`: worked out by the runner for its
        # checks (else a context works it out from its check's declaration and the config).
        self.directory = directory
        self.resolved = resolved
        self._states: dict[Keeps[Any], Any] = {}
        self._lock = threading.Lock()

    def of(self, keeps: Keeps[S]) -> S:
        """The state `keeps` declares (made empty on first use)."""
        with self._lock:
            if keeps not in self._states:
                self._states[keeps] = keeps.new()
            state: S = self._states[keeps]
            return state

    def reset(self, keeps: Keeps[S]) -> S:
        """Start the state `keeps` declares afresh (a reboot voids it); returns the new one."""
        with self._lock:
            state = self._states[keeps] = keeps.new()
            return state


def state_directory(host: Host, config: Config, keeps: Iterable[Keeps[Any]]) -> str | None:
    """The runner's state directory: the one the checks' configuration names, else the live
    default; None for a snapshot without one (its replay must not read this machine's
    state), or where no check's state survives a restart. Raises StateError when two
    settings name different directories (the agent keeps one)."""
    keeps = list(keeps)
    if not keeps:
        return None
    named: dict[str, tuple[str, str]] = {}  # normalised path -> (as given, setting)
    for declared in keeps:
        if declared.configured_dir is not None:
            configured = declared.configured_dir(config)
            if configured is not None:
                named.setdefault(os.path.normpath(configured), (configured, declared.setting))
    if len(named) > 1:
        settings = " and ".join(f"{setting} ({path})" for path, setting in named.values())
        raise StateError(
            f"{settings} name different state directories: the agent keeps one; set them "
            "to the same directory, or set one"
        )
    if named:
        return next(iter(named.values()))[0]
    return None if host.is_snapshot else DEFAULT_STATE_DIR


class StateError(UsageError):
    """The state directory is missing or read-only, or a state file in it is unreadable."""


@dataclass(frozen=True)
class StateDir:
    """The runner's state directory: one JSON file per name, each replaced atomically."""

    path: str

    def file(self, name: str) -> Path:
        """Where the named state file lies."""
        return Path(self.path) / name

    def load(self, name: str, what: str) -> Any:
        """The named file's JSON (None when there is none); raises StateError (naming it
        `what`, e.g. "xid state") for an unreadable file or one that is not JSON."""
        path = self.file(name)
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise StateError(f"{what} {path}: {_why(exc)}") from None
        except json.JSONDecodeError as exc:
            raise StateError(f"{what} {path}: line {exc.lineno}: {exc.msg}") from None

    def save(self, name: str, what: str, content: Any, missing: str) -> None:
        """Write the named file atomically (indented, sorted keys); raises StateError when
        the directory is missing (saying `missing`: what to do about it) or read-only."""
        directory = Path(self.path)
        if not directory.is_dir():
            state = "is not a directory" if directory.exists() else "does not exist"
            raise StateError(f"{what} directory {self.path} {state}: {missing}")
        prefix = "." + name.removesuffix(".json") + "-"
        try:
            fd, tmp = tempfile.mkstemp(prefix=prefix, dir=directory)
        except OSError as exc:
            raise StateError(f"{what} directory {self.path}: {_why(exc)}") from None
        path = self.file(name)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(content, f, indent=1, sort_keys=True)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())  # on disk before it replaces the file it was read from
            os.replace(tmp, path)
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            raise StateError(f"{what} {path}: {_why(exc)}") from None

    def load_kept(
        self, name: str, what: str, parse: Callable[[Any], T]
    ) -> tuple[T | None, str | None]:
        """The named file's state, `parse` making it of its JSON (raising ValueError for
        content it does not take), None without a file; and, for a file that cannot be read
        or parsed, what was done: it is set aside (`set_aside`), and the state starts afresh."""
        try:
            content = self.load(name, what)
            return (None if content is None else parse(content)), None
        except StateError as exc:
            return None, self.set_aside(name, str(exc))
        except ValueError as exc:
            return None, self.set_aside(name, f"{what} {self.file(name)}: {exc}")

    def save_said(self, name: str, what: str, content: Any, missing: str) -> str | None:
        """`save`, its failure returned as one line rather than raised, and said in the
        agent's log once, not every round (`host.state_files`)."""
        try:
            self.save(name, what, content, missing)
        except StateError as exc:
            state_files.saved(str(self.file(name)), str(exc))
            return str(exc)
        state_files.saved(str(self.file(name)), None)
        return None

    def set_aside(self, name: str, error: str) -> str:
        """Keep the named file, which could not be read (`error`: why, naming the file, as
        `load` says it), aside as `<name>.bad`, so that the fresh state written next never
        overwrites it; logs it and returns what was done, said in one line."""
        path = self.file(name)
        aside = path.with_name(f"{name}.bad")
        try:
            os.replace(path, aside)
            kept = f"kept as {aside}"
        except OSError as exc:
            kept = f"and could not be kept aside ({_why(exc)})"
        said = f"{error}; {kept}; starting afresh"
        LOG.warning("%s", said)
        return said

    def writable(self) -> bool:
        """Whether the directory exists and this process may write in it."""
        return os.path.isdir(self.path) and os.access(self.path, os.W_OK | os.X_OK)


def _why(exc: OSError | UnicodeDecodeError) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return (exc.strerror or str(exc)).lower()
