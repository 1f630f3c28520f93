"""One look at the node for the XID check: both sources, what was remembered, the verdicts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.rules.kernel_reading import read_sources
from gpuprobe.checks.state import StateDir
from gpuprobe.checks.xid import events, kernel, policy, recovery, sticky
from gpuprobe.checks.xid import state as xid_state
from gpuprobe.checks.xid.model import Gpu, Observation, Seen, later
from gpuprobe.checks.xid.persist import KEEPS
from gpuprobe.config import Config
from gpuprobe.gpu import kernel_log
from gpuprobe.gpu.event_drain import drain_events
from gpuprobe.gpu.kernel_sources import boot_id as read_boot_id
from gpuprobe.gpu.view import GpuView
from gpuprobe.host import Host


def observe(ctx: CheckContext, config: Config, directory: StateDir | None) -> Observation:
    """Read both sources and the state (the check's memory the runner keeps, and the state
    file in `directory`, the runner's state directory), and judge each XID active, cleared
    or past."""
    host = ctx.host
    now = datetime.fromtimestamp(host.clock.wall(), UTC)
    boot_id = read_boot_id(host)
    memory = ctx.kept(KEEPS)
    if memory.booted and memory.boot_id != boot_id:
        memory = ctx.forget(KEEPS)  # rebooted: what the last boot left behind is gone
    memory.boot_id, memory.booted = boot_id, True
    gpus, pci_order = _gpus(host)
    sources: dict[str, Any] = {}
    seen: dict[str, Seen] = {}
    for x in events.drain(drain_events(host), gpus, memory, sources, now):
        seen[x.key] = x
    log = read_sources(host, config, now)
    observation = Observation(boot_id, [], log, sources, gpus=gpus, now=now)
    for x in kernel.sightings(
        log, gpus, pci_order, sources, observation.sxids, observation.resets_logged
    ):
        _merge(seen, x)
    try:
        observation.state = xid_state.load(directory) if directory is not None else None
    except xid_state.StateError as exc:
        observation.state_error = str(exc)
    state = observation.state
    same_boot = state is not None and state.boot_id == boot_id
    remembered = [*memory.sticky.values()]
    if same_boot and state is not None:
        remembered += list(state.sticky.values())
    for entry in remembered:
        kept = Seen.from_entry(entry)
        if kept is not None:
            _merge(seen, kept)
    driver = observation.driver = GpuView(host).driver("nvidia").library_version
    for x in seen.values():
        if x.is_xid:
            x.override = policy.find(config, "xid", x.xid, driver)
    saved = dict(state.cleared) if same_boot and state is not None else {}
    cleared = observation.cleared = sticky.newest_clearings(saved, memory.cleared)
    nvml_seen = recovery.observe_gpus(host, gpus, memory, now)
    recovery.apply(list(seen.values()), observation.resets_logged, nvml_seen, cleared, memory, now)
    sticky.judge(list(seen.values()), cleared, memory, config, now)
    observation.xids = sorted(seen.values(), key=lambda x: (x.gpu.index or 0, x.xid, x.event))
    return observation


def _gpus(host: Host) -> tuple[dict[str, Gpu], list[str]]:
    """The GPUs NVML knows, by NVML index (as text) and by PCI address (`0000:3a:00`), and
    the NVIDIA GPUs on the PCI bus in address order (NVML's default order)."""
    known: dict[str, Gpu] = {}
    view = GpuView(host)
    for listed in view.nvidia.listed():
        gpu = Gpu(listed.index, listed.uuid or "", listed.pci_address)
        known[str(listed.index)] = gpu
        if gpu.pci_bus_id:
            known[kernel_log.pci_prefix(gpu.pci_bus_id)] = gpu
    return known, sorted(d.address for d in view.nvidia.bus_gpus())


def _merge(seen: dict[str, Seen], x: Seen) -> None:
    """Fold another sighting of an XID in: the larger count, the later time, events first."""
    old = seen.get(x.key)
    if old is None:
        seen[x.key] = x
        return
    old.count = max(old.count, x.count)
    if len(x.times) > len(old.times):
        old.times = x.times
    old.last_seen = later(old.last_seen, x.last_seen)
    old.message = old.message or x.message
    old.recovery_field = old.recovery_field or x.recovery_field
    if x.source == "nvml-event":
        old.source = "nvml-event"
