"""Clearing sticky XIDs: the xid record's `clear` (`gpuprobe clear-xid`, gRPC ClearFindings)."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuprobe.checks import record
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.xid import state as xid_state
from gpuprobe.checks.xid import sxid
from gpuprobe.checks.xid.observation import observe
from gpuprobe.checks.xid.persist import KEEPS
from gpuprobe.config import Config


class NoSuchGpu(record.NoSuchGpu):
    """The GPU index to clear names no GPU of this node: clearing nothing there would read as
    done, and the operator's intended GPU stays reported."""


def clear(ctx: CheckContext, config: Config, gpu: int | None = None) -> int:
    """Clear the sticky (critical) XIDs reported now, on one GPU index or all (and, clearing
    all, the critical SXids of the NVSwitches); returns how many.

    The clearing is saved in the state file, so it holds for later runs, other processes and
    agent restarts, until an XID grows again or the node reboots. Raises StateError (one
    line) when the state directory is missing or read-only, or its file is corrupt. A snapshot
    without a configured state directory keeps the clearing in this process's memory only
    (the check's state in `ctx`: the daemon's runner's, so its next run sees the clearing).
    """
    host = ctx.host
    directory = ctx.state_dir(KEEPS, config)
    with xid_state.LOCK:
        seen = observe(ctx, config, directory)
        if seen.state_error:
            raise xid_state.StateError(seen.state_error)
        if gpu is not None:
            # NVML's order (PCI address order), also where NVML is absent.
            on_bus: set[int | None] = set(range(len(ctx.gpus.nvidia.bus_gpus())))
            listed = {g.index for g in seen.gpus.values()} | {x.gpu.index for x in seen.xids}
            _known(gpu, on_bus | listed)
        targets = [
            x
            for x in seen.xids
            if x.active and x.info.critical and (gpu is None or x.gpu.index == gpu)
        ]
        state = seen.state or xid_state.XidState()
        if state.boot_id != seen.boot_id:
            state = xid_state.XidState(seen.boot_id)
        marks = {x.key: {"count": x.count, "last_seen": x.last_seen} for x in targets}
        if gpu is None:
            now = seen.now or datetime.fromtimestamp(host.clock.wall(), UTC)
            switches = sxid.gather(seen, config)
            sxid.judge(switches, seen.cleared, ctx.kept(KEEPS), config, now)
            marks |= {
                e.key: {"count": e.count, "last_seen": e.last_seen}
                for e in switches
                if e.active and e.info.critical
            }
        state.cleared.update(marks)
        for key in marks:
            state.sticky.pop(key, None)
        if directory is not None:
            xid_state.save(directory, state)  # first, so a failure changes nothing
        memory = ctx.kept(KEEPS)
        memory.cleared.update(marks)
        for key in marks:
            memory.sticky.pop(key, None)
        return len(marks)


def _known(gpu: int, indices: set[int | None]) -> None:
    """Raise NoSuchGpu unless `gpu` is the index of a GPU NVML lists now, of an NVIDIA GPU on
    the PCI bus (in address order, NVML's), or of one whose XIDs are remembered (a GPU fallen
    off the bus keeps its sticky findings clearable)."""
    known = sorted(i for i in indices if i is not None)
    if gpu in known:
        return
    listed = ", ".join(str(i) for i in known)
    there = f"its GPUs are {listed}" if known else "it has no NVIDIA GPU"
    raise NoSuchGpu(f"clear-xid: no GPU {gpu} on this node ({there})")
