"""What one run of a check is given to judge: `CheckContext`.

The runner builds it for each run and hands it to the check's function (`run(ctx, config)`).
It carries the node (`host`, which the check hands to its readers) and what the runner keeps
for the checks between runs (`gpuprobe.checks.state`): a check's own state (`ctx.kept(KEEPS)`,
the declaration its record names) and, for a state that survives a restart, the runner's
state directory (`ctx.state_dir(KEEPS, config)`); and the node's GPUs (`ctx.gpus`, a
`gpu.view.GpuView` built from the vendors' backends: the only way a check sees GPUs). The
kernel journal joins it here, so that a check sees the node only through what its context offers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from gpuprobe.checks.state import CheckStates, Keeps, StateDir, state_directory
from gpuprobe.config import Config
from gpuprobe.gpu.view import GpuView
from gpuprobe.host import Host

S = TypeVar("S")


@dataclass(frozen=True)
class CheckContext:
    """One run of one check: the node it reads through its readers, what the runner keeps
    for it (a context made on its own, as in a test, keeps a fresh, empty state) and the GPU
    view the runner built (`view`; None: one is built from `host` when first asked)."""

    host: Host
    states: CheckStates = field(default_factory=CheckStates)
    view: GpuView | None = None

    @cached_property
    def gpus(self) -> GpuView:
        """The node's GPUs: the runner's view, else one of `host`."""
        return self.view if self.view is not None else GpuView(self.host)

    def kept(self, keeps: Keeps[S]) -> S:
        """The check's state as the runner keeps it between runs."""
        return self.states.of(keeps)

    def forget(self, keeps: Keeps[S]) -> S:
        """Start the check's state afresh (a reboot voids it); returns the empty one."""
        return self.states.reset(keeps)

    def state_dir(self, keeps: Keeps[Any], config: Config) -> StateDir | None:
        """The runner's state directory for the check's state that survives a restart (None:
        none, a snapshot replayed without one). A context made on its own (a test, a one-off
        command) works it out as a runner of this one check would."""
        directory = (
            self.states.directory
            if self.states.resolved
            else state_directory(self.host, config, [keeps] if keeps.survives_restart else [])
        )
        return StateDir(directory) if directory is not None else None
