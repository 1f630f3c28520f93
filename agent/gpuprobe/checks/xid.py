"""Check `xid`: which XID errors did the GPUs raise this boot, and what should be done?

Two sources, read in every run: the NVML event set (XidCriticalError events and the other
critical types of `gpuprobe.gpu.nvml_events`, drained without waiting; in the daemon the set
is registered from the first run on, and a snapshot's `events` are handed to it once) and the
host's kernel log files (`NVRM: Xid (PCI:...): N, ...` lines of the current boot, see
`gpuprobe.gpu.kernel_log`). An XID is tied to its GPU by PCI address or NVML index; one entry
per (GPU, XID), counted once even when both sources saw it; one per (GPU, event type) for the
other events, which raise the code the `gpus` check raises for the same fault
(ECC_UNCORRECTABLE, ROW_REMAP_FAILURE, GPU_LOST, GPU_RECOVERY_REQUIRED). What the daemon saw
is kept in `host.memory`, so events are not lost between runs.

Each XID is classified by NVIDIA's catalog (`gpuprobe.gpu.xid_catalog`). Critical XIDs (and
critical events) are sticky: they stay reported until the boot id changes (a reboot) or an
operator clears them (`clear()`, `gpuprobe clear-xid`); the clearing, and in the live daemon
the sticky XIDs themselves, are kept in the state file (`gpuprobe.gpu.xid_state`). A replayed
snapshot uses a state file only when `xid.state_dir` is configured, so a replay gives the same
findings on every machine; without one, a clearing lives in the process's memory. A warning
XID (an application's) stays reported in the daemon for `xid.warning_window_seconds` after it
last grew; a one-shot check reports every XID of the boot.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict, cast

from gpuprobe.checks.record import Check
from gpuprobe.config import Config, XidConfig
from gpuprobe.families import GPU_LABELS, Family, gpu_labels, mappings, number
from gpuprobe.gpu import kernel_log, nvml_events, xid_state
from gpuprobe.gpu.devices import Device, gpu_count
from gpuprobe.gpu.nvml_events import EventInfo
from gpuprobe.gpu.pci import nvidia_gpus
from gpuprobe.gpu.xid_catalog import CATALOG_URL, XidInfo, classify
from gpuprobe.host import Host
from gpuprobe.host.nvml import NvmlError
from gpuprobe.report import Action, CheckResult, Finding, Severity, format_time, gpu_resource

NAME = "xid"
# The live node's state directory when `xid.state_dir` is not configured.
DEFAULT_STATE_DIR = "/var/lib/gpuprobe"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
PROC_STAT = "/proc/stat"
# The event type of an XID, whichever source saw it.
XID_EVENT = "XidCriticalError"
# Bounds the drain of the event set: a GPU in an XID storm must not hold the check forever.
MAX_EVENT_DRAINS = 10_000
# The clock (seconds since the epoch); tests replace it to step through time.
clock: Callable[[], float] = time.time


@dataclass(frozen=True)
class Gpu:
    """A GPU as XIDs name it: NVML index, UUID and PCI address, whichever are known."""

    index: int | None
    uuid: str
    pci_bus_id: str | None

    @property
    def ident(self) -> str:
        """What keys this GPU's XIDs across runs and boots: its UUID, else its address."""
        return self.uuid or self.pci_bus_id or f"index:{self.index}"


@dataclass
class Seen:
    """One XID (or other critical NVML event: `event`, with `xid` 0) on one GPU this boot: how
    often, when last, from which source, and its verdict. A GpuRecoveryAction event's
    `message` is the recovery action the GPU's field named when the event was drained."""

    gpu: Gpu
    xid: int
    count: int
    last_seen: str | None
    source: str
    message: str = ""
    active: bool = True
    cleared: bool = False
    event: str = XID_EVENT

    @property
    def is_xid(self) -> bool:
        """Whether this is an XID (not another NVML event)."""
        return self.event == XID_EVENT

    @property
    def key(self) -> str:
        """The key in memory and in the state file: `<gpu ident>|<xid>` for an XID,
        `<gpu ident>|<event type>` for another event."""
        return f"{self.gpu.ident}|{self.xid if self.is_xid else self.event}"

    @property
    def info(self) -> XidInfo | EventInfo:
        """The catalog's verdict on this XID, or the verdict on the event type."""
        if self.is_xid:
            return classify(self.xid, self.message)
        verdict = nvml_events.info(self.event, self.message)
        if verdict is None:  # an entry that no run of this version wrote
            raise ValueError(f"no verdict on NVML event type {self.event}")
        return verdict

    def to_entry(self) -> dict[str, Any]:
        """The XID as kept in memory and in the state file."""
        return {
            "gpu": self.gpu.index,
            "uuid": self.gpu.uuid,
            "pci_bus_id": self.gpu.pci_bus_id,
            "xid": self.xid,
            "count": self.count,
            "last_seen": self.last_seen,
            "source": self.source,
            "message": self.message,
            "event": self.event,
        }

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> Seen | None:
        """Read an XID back from memory or the state file (None for a malformed entry)."""
        try:
            index = entry.get("gpu")
            pci = entry.get("pci_bus_id")
            gpu = Gpu(
                None if index is None else int(index),
                str(entry.get("uuid") or ""),
                None if pci is None else str(pci),
            )
            event = str(entry.get("event") or XID_EVENT)
            if event != XID_EVENT and event not in nvml_events.EVENTS:
                return None
            return cls(
                gpu,
                int(entry["xid"]),
                int(entry["count"]),
                _time_text(entry.get("last_seen")),
                str(entry.get("source") or "kernel-log"),
                str(entry.get("message") or ""),
                event=event,
            )
        except (KeyError, TypeError, ValueError):
            return None

    def to_data(self) -> XidEntry:
        """The XID as an entry of the check's `data.xids`."""
        info = self.info
        return {
            "gpu": self.gpu.index,
            "uuid": self.gpu.uuid,
            "xid": self.xid,
            "count": self.count,
            "last_seen": self.last_seen,
            "severity": info.severity.value,
            "action": info.action.value,
            "description": info.description,
            "source": self.source,
            "pci_bus_id": self.gpu.pci_bus_id,
            "message": self.message,
            "active": self.active,
            "cleared": self.cleared,
        }

    def to_event_data(self) -> EventEntry:
        """A non-XID event as an entry of the check's `data.events`."""
        info = self.info
        return {
            "gpu": self.gpu.index,
            "uuid": self.gpu.uuid,
            "pci_bus_id": self.gpu.pci_bus_id,
            "type": self.event,
            "code": self.code,
            "count": self.count,
            "last_seen": self.last_seen,
            "severity": info.severity.value,
            "action": info.action.value,
            "description": info.description,
            "recovery_action": (self.message or None)
            if self.event == nvml_events.RECOVERY
            else None,
            "active": self.active,
            "cleared": self.cleared,
        }

    @property
    def code(self) -> str:
        """The finding code: XID, or the event type's."""
        info = self.info
        return info.code if isinstance(info, EventInfo) else "XID"


@dataclass
class Observation:
    """Everything one look at the node found: the boot, the XIDs, where they came from."""

    boot_id: str | None
    xids: list[Seen]
    sources: dict[str, Any] = field(default_factory=dict)
    state: xid_state.XidState | None = None
    state_error: str | None = None


def run(host: Host, config: Config) -> CheckResult:
    """Gather this boot's XIDs, classify them, and report the active ones."""
    directory = state_dir(host, config)
    with xid_state.LOCK:
        seen = observe(host, config, directory)
        persist_error = _persist(host, seen, directory)
    active = [x for x in seen.xids if x.active]
    findings = [_finding(x) for x in active]
    data: XidData = {
        "xids": [x.to_data() for x in seen.xids if x.is_xid],
        "events": [x.to_event_data() for x in seen.xids if not x.is_xid],
        "boot_id": seen.boot_id,
        "sources": seen.sources,
        "state_file": str(xid_state.state_path(directory)) if directory else None,
    }
    if seen.state_error or persist_error:
        data["state_error"] = seen.state_error or persist_error
    return CheckResult(NAME, _summary(seen.xids, active), findings, data)


def clear(host: Host, config: Config, gpu: int | None = None) -> int:
    """Clear the sticky (critical) XIDs reported now, on one GPU index or all; returns how many.

    The clearing is saved in the state file, so it holds for later runs, other processes and
    agent restarts, until an XID grows again or the node reboots. Raises StateError (one
    line) when the state directory is missing or read-only, or its file is corrupt. A snapshot
    without a configured state directory keeps the clearing in this process's memory only.
    """
    directory = state_dir(host, config)
    with xid_state.LOCK:
        seen = observe(host, config, directory)
        if seen.state_error:
            raise xid_state.StateError(seen.state_error)
        targets = [
            x
            for x in seen.xids
            if x.active and x.info.critical and (gpu is None or x.gpu.index == gpu)
        ]
        state = seen.state or xid_state.XidState()
        if state.boot_id != seen.boot_id:
            state = xid_state.XidState(seen.boot_id)
        marks = {x.key: {"count": x.count, "last_seen": x.last_seen} for x in targets}
        state.cleared.update(marks)
        for key in marks:
            state.sticky.pop(key, None)
        if directory is not None:
            xid_state.save(directory, state)  # first, so a failure changes nothing
        memory = host.memory.of(NAME)
        memory.setdefault("cleared", {}).update(marks)
        for key in marks:
            memory.setdefault("sticky", {}).pop(key, None)
        return len(targets)


def state_dir(host: Host, config: Config) -> str | None:
    """The state directory this host uses: the configured one, else the live default; None
    for a snapshot without one (its replay must not read this machine's state)."""
    if config.xid.state_dir is not None:
        return config.xid.state_dir
    return None if host.is_snapshot else DEFAULT_STATE_DIR


def observe(host: Host, config: Config, directory: str | None) -> Observation:
    """Read both sources and the state (in `directory`, this host's `state_dir`), and judge
    each XID active, cleared or past."""
    now = datetime.fromtimestamp(clock(), UTC)
    boot_id = (host.fs.try_read_text(BOOT_ID) or "").strip() or None
    memory = host.memory.of(NAME)
    if "boot_id" in memory and memory["boot_id"] != boot_id:
        memory.clear()  # rebooted: what the last boot left behind is gone
    memory["boot_id"] = boot_id
    gpus, pci_order = _gpus(host)
    sources: dict[str, Any] = {}
    seen: dict[str, Seen] = {}
    for x in _drain_events(host, gpus, memory, sources, now):
        seen[x.key] = x
    logged = _kernel_logs(host, config, gpus, pci_order, sources, now)
    for x in logged:
        _merge(seen, x)
    observation = Observation(boot_id, [], sources)
    try:
        observation.state = xid_state.load(directory) if directory is not None else None
    except xid_state.StateError as exc:
        observation.state_error = str(exc)
    state = observation.state
    same_boot = state is not None and state.boot_id == boot_id
    remembered = [*memory.get("sticky", {}).values()]
    if same_boot and state is not None:
        remembered += list(state.sticky.values())
    for entry in remembered:
        sticky = Seen.from_entry(entry)
        if sticky is not None:
            _merge(seen, sticky)
    cleared = dict(state.cleared) if same_boot and state is not None else {}
    for key, mark in memory.get("cleared", {}).items():
        if key not in cleared or _count(mark) >= _count(cleared[key]):
            cleared[key] = mark
    _judge(list(seen.values()), cleared, memory, config, now)
    observation.xids = sorted(seen.values(), key=lambda x: (x.gpu.index or 0, x.xid, x.event))
    return observation


# --- sources ---------------------------------------------------------------------------


def _gpus(host: Host) -> tuple[dict[str, Gpu], list[str]]:
    """The GPUs NVML knows, by NVML index (as text) and by PCI address (`0000:3a:00`), and
    the NVIDIA GPUs on the PCI bus in address order (NVML's default order)."""
    known: dict[str, Gpu] = {}
    count = gpu_count(host.nvml) or 0
    for index in range(count):
        device = Device(host.nvml, index)
        gpu = Gpu(index, device.uuid() or "", device.pci_bus_id())
        known[str(index)] = gpu
        if gpu.pci_bus_id:
            known[kernel_log.pci_prefix(gpu.pci_bus_id)] = gpu
    return known, sorted(d.address for d in nvidia_gpus(host.fs))


def _drain_events(
    host: Host, gpus: dict[str, Gpu], memory: dict[str, Any], sources: dict[str, Any], now: datetime
) -> list[Seen]:
    """Drain the NVML event set into memory; returns every XID and critical event it showed
    this boot (other event types, single-bit ECC among them, are passed over)."""
    events: dict[str, dict[str, Any]] = memory.setdefault("events", {})
    if host.nvml.init_error is not None:
        sources["nvml_events"] = f"unavailable (NVML {host.nvml.init_error})"
    else:
        sources["nvml_events"] = "read"
        try:
            for _ in range(MAX_EVENT_DRAINS):
                batch = host.nvml.wait_events(0)
                if not batch:
                    break
                for event in batch:
                    xid = event.type == XID_EVENT
                    if not xid and event.type not in nvml_events.EVENTS:
                        continue
                    gpu = gpus.get(str(event.device)) or Gpu(event.device, "", None)
                    stamp = _event_time(event.time, now)
                    if xid:
                        x = Seen(gpu, event.data, 1, stamp, "nvml-event")
                    else:
                        said = nvml_events.detail(host.nvml, event.type, event.device)
                        if said == "NONE":  # the recovery is done: the field asks for none
                            continue
                        x = Seen(gpu, 0, 1, stamp, "nvml-event", said, event=event.type)
                    old = events.get(x.key)
                    if old is not None:
                        x.count += int(old.get("count", 0))
                        x.last_seen = _later(old.get("last_seen"), x.last_seen)
                        x.message = x.message or str(old.get("message") or "")
                    events[x.key] = x.to_entry()
        except NvmlError as exc:
            sources["nvml_events"] = f"error ({exc.name})"
    return [x for x in (Seen.from_entry(e) for e in events.values()) if x is not None]


def _event_time(stamp: str | None, now: datetime) -> str:
    """An event's time as RFC 3339 (when NVML gave none: now)."""
    return _time_text(stamp) or format_time(now)


def _kernel_logs(
    host: Host,
    config: Config,
    gpus: dict[str, Gpu],
    pci_order: list[str],
    sources: dict[str, Any],
    now: datetime,
) -> list[Seen]:
    """The current boot's XIDs in the kernel log files, one line counted once across logs."""
    boot = kernel_log.boot_time(host.fs.try_read_text(PROC_STAT))
    streams: dict[str, list[str]] = {}
    for path in config.xid.kernel_logs:
        streams.setdefault(re.sub(r"\.\d+$", "", path), []).append(path)
    read: list[str] = []
    # kern.log and syslog hold the same kernel lines: a line counts as often as the one log
    # that holds it most often (identical lines within one log are separate XIDs).
    lines: dict[str, tuple[kernel_log.XidLine, int]] = {}
    uuids: dict[str, str] = {}
    for paths in streams.values():
        texts = []
        for path in paths:
            content = _tail(host, path, config.xid.kernel_log_max_bytes)
            if content is not None:
                texts.append(content)
                read.append(path)
        found = kernel_log.read_stream(texts, boot=boot, now=now)
        counted = Counter(line.line for line in found.xids)
        for line in found.xids:
            if counted[line.line] > lines.get(line.line, (line, 0))[1]:
                lines[line.line] = (line, counted[line.line])
        uuids.update(found.uuids)
    sources["kernel_logs"] = read
    seen: dict[str, Seen] = {}
    for line, times in lines.values():
        gpu = _gpu_at(line.pci, gpus, pci_order, uuids)
        stamp = format_time(line.time) if line.time else None
        x = Seen(gpu, line.xid, times, stamp, "kernel-log", line.message)
        old = seen.get(x.key)
        if old is not None:
            old.count += times
            if _later(old.last_seen, x.last_seen) == x.last_seen:  # log order breaks ties
                old.message = x.message or old.message
            old.last_seen = _later(old.last_seen, x.last_seen)
        else:
            seen[x.key] = x
    return list(seen.values())


def _tail(host: Host, path: str, max_bytes: int) -> str | None:
    """A log file's last `max_bytes`, without the partial line it starts with when cut."""
    try:
        data = host.fs.read_tail(path, max_bytes)
    except OSError:
        return None
    if len(data) >= max_bytes:
        data = data.split(b"\n", 1)[1] if b"\n" in data else b""
    return data.decode("utf-8", errors="replace")


def _gpu_at(pci: str, gpus: dict[str, Gpu], pci_order: list[str], uuids: dict[str, str]) -> Gpu:
    """The GPU at a PCI address: NVML's, else (a GPU NVML lost) its place on the PCI bus."""
    if pci in gpus:
        return gpus[pci]
    order = [kernel_log.pci_prefix(a) for a in pci_order]
    index = order.index(pci) if pci in order else None
    full = pci_order[index] if index is not None else f"{pci}.0"
    return Gpu(index, uuids.get(pci, ""), full)


def _merge(seen: dict[str, Seen], x: Seen) -> None:
    """Fold another sighting of an XID in: the larger count, the later time, events first."""
    old = seen.get(x.key)
    if old is None:
        seen[x.key] = x
        return
    old.count = max(old.count, x.count)
    old.last_seen = _later(old.last_seen, x.last_seen)
    old.message = old.message or x.message
    if x.source == "nvml-event":
        old.source = "nvml-event"


def _later(a: str | None, b: str | None) -> str | None:
    """The later of two RFC 3339 times as format_time writes them (None is unknown)."""
    if a is None or b is None:
        return a or b
    return max(a, b)


# --- judging ---------------------------------------------------------------------------


def _judge(
    xids: list[Seen],
    cleared: dict[str, dict[str, Any]],
    memory: dict[str, Any],
    config: Config,
    now: datetime,
) -> None:
    """Mark each XID cleared or active, and remember the critical ones as sticky."""
    grew: dict[str, list[Any]] = memory.setdefault("grew", {})
    sticky: dict[str, dict[str, Any]] = memory.setdefault("sticky", {})
    stamp = now.timestamp()
    for x in xids:
        mark = cleared.get(x.key)
        x.cleared = mark is not None and _covers(mark, x)
        last = grew.get(x.key)
        if last is None or x.count > last[0]:
            grew[x.key] = [x.count, stamp]
        if x.info.critical:
            x.active = not x.cleared
            if x.active:
                sticky[x.key] = x.to_entry()
            else:
                sticky.pop(x.key, None)
        else:
            recent = stamp - grew[x.key][1] <= config.xid.warning_window_seconds
            x.active = not x.cleared and recent


def _covers(mark: dict[str, Any], x: Seen) -> bool:
    """Whether a clearing still covers the XID: nothing new since (count and time)."""
    if x.count > _count(mark):
        return False
    last = _time_text(mark.get("last_seen"))
    return x.last_seen is None or last is None or x.last_seen <= last


def _count(mark: dict[str, Any]) -> int:
    """A clearing's count (-1 when the state file holds no whole number there)."""
    count = mark.get("count")
    return count if isinstance(count, int) and not isinstance(count, bool) else -1


def _time_text(value: Any) -> str | None:
    """An RFC 3339 time as format_time writes it, from a state or memory entry (else None)."""
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return format_time(stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC))


def _persist(host: Host, seen: Observation, directory: str | None) -> str | None:
    """Keep the live daemon's sticky XIDs in the state file (never from a snapshot)."""
    if (
        host.is_snapshot
        or directory is None
        or not xid_state.writable(directory)
        or seen.state_error
    ):
        return None
    sticky = {x.key: x.to_entry() for x in seen.xids if x.active and x.info.critical}
    state = seen.state or xid_state.XidState()
    if state.boot_id != seen.boot_id:
        state = xid_state.XidState(seen.boot_id)
    elif state.sticky == sticky:
        return None
    state.sticky = sticky
    try:
        xid_state.save(directory, state)
    except xid_state.StateError as exc:
        return str(exc)
    return None


def _finding(x: Seen) -> Finding:
    info = x.info
    where = f"GPU {x.gpu.index}" if x.gpu.index is not None else "a GPU"
    if x.gpu.pci_bus_id:
        where += f" ({x.gpu.pci_bus_id})"
    times = f"{x.count} time{'s' if x.count != 1 else ''}"
    last = f", last at {x.last_seen}" if x.last_seen else ""
    sticky = (
        " (reported until the node reboots or `gpuprobe clear-xid` clears it)"
        if info.critical
        else ""
    )
    resource = gpu_resource(x.gpu.index, x.gpu.uuid) if x.gpu.index is not None else "node"
    if isinstance(info, EventInfo):
        gpu = f" -i {x.gpu.index}" if x.gpu.index is not None else ""
        advice = nvml_events.ADVICE.get(info.action, "").format(gpu=gpu)
        action = f" ({x.message})" if x.message else ""
        return Finding(
            info.code,
            info.severity,
            f"{where}: NVML event {x.event}{action}, {info.description}, seen {times} this "
            f"boot{last}: {advice}{sticky}",
            info.action,
            resource,
        )
    said = f' ("{_short(x.message)}")' if x.message else ""
    return Finding(
        "XID",
        info.severity,
        f"{where}: Xid {x.xid}, {info.description}, seen {times} this boot{last}{said}: "
        f"{_advice(info, x.gpu.index)}{sticky}",
        info.action,
        resource,
    )


def _advice(info: XidInfo, index: int | None) -> str:
    gpu = f" -i {index}" if index is not None else ""
    if info.bucket == "UNKNOWN":
        return f"look it up in NVIDIA's Xid catalog ({CATALOG_URL})"
    return {
        Action.RESTART_APP: (
            "restart the application that hit it and reset the GPU when convenient"
            if info.severity is Severity.CRITICAL
            else "restart the application that hit it; the GPU itself stays usable"
        ),
        Action.RESET_GPU: (
            f"drain the GPU and reset it (nvidia-smi -r{gpu}) or reboot; inspect the GPU "
            "if it recurs"
        ),
        Action.REBOOT_NODE: "drain and reboot the node; inspect the GPU if it happens again",
        Action.DRAIN_NODE: "drain the node's peer-to-peer (NVLink) work, as the driver asks",
        Action.NONE: "informational: nothing to do unless it repeats",
    }.get(info.action, "see NVIDIA's Xid catalog")


def _short(message: str, limit: int = 120) -> str:
    message = " ".join(message.split())
    return message if len(message) <= limit else message[: limit - 1] + "…"


def _summary(xids: list[Seen], active: list[Seen]) -> str:
    if not xids:
        return "no XID errors this boot"
    if not active:
        return f"no active XID ({len(xids)} seen this boot: cleared, or warnings past their window)"
    shown = [
        (f"Xid {x.xid}" if x.is_xid else x.event)
        + f" on GPU {x.gpu.index if x.gpu.index is not None else '?'}"
        + (f" (x{x.count})" if x.count > 1 else "")
        for x in sorted(
            active, key=lambda x: (not x.info.critical, x.gpu.index or 0, x.xid, x.event)
        )
    ]
    more = f" and {len(shown) - 4} more" if len(shown) > 4 else ""
    active_xids = sum(1 for x in active if x.is_xid)
    counted = [
        f"{n} active {what}{'s' if n != 1 else ''}"
        for n, what in ((active_xids, "XID"), (len(active) - active_xids, "NVML event"))
        if n
    ]
    return f"{' and '.join(counted)}: {', '.join(shown[:4])}{more}"


class XidEntry(TypedDict):
    """One XID in `data.xids` (docs/checks.md, check `xid`)."""

    gpu: int | None
    uuid: str
    xid: int
    count: int
    last_seen: str | None
    severity: str
    action: str
    description: str
    source: str
    pci_bus_id: str | None
    message: str
    active: bool
    cleared: bool


class EventEntry(TypedDict):
    """One critical NVML event other than an XID in `data.events`."""

    gpu: int | None
    uuid: str
    pci_bus_id: str | None
    type: str
    code: str
    count: int
    last_seen: str | None
    severity: str
    action: str
    description: str
    recovery_action: str | None
    active: bool
    cleared: bool


class XidData(TypedDict):
    """The check's data (docs/checks.md, check `xid`)."""

    xids: list[XidEntry]
    events: list[EventEntry]
    boot_id: str | None
    sources: dict[str, Any]
    state_file: str | None
    state_error: NotRequired[str | None]


def metric_families(data: XidData) -> Iterator[Family]:
    """`gpuprobe_gpu_xid_errors_total` from the check's data."""
    # `data[key] if key in data`, not `.get`: mypy holds an index to the TypedDict's keys.
    records: object = data["xids"] if "xids" in data else None
    if not isinstance(records, list):
        return
    xids = Family(
        "gpuprobe_gpu_xid_errors",
        "XID errors seen per GPU and XID since the agent started or they were cleared",
        (*GPU_LABELS, "xid"),
        counter=True,
    )
    for entry in mappings(records):
        record = cast(XidEntry, entry)  # its values still held to numbers: a report from elsewhere
        xid = number(record["xid"] if "xid" in record else None)
        count = number(record["count"] if "count" in record else None)
        gpu = number(record["gpu"] if "gpu" in record else None)
        if xid is None or count is None or gpu is None:
            continue
        xids.add([*gpu_labels(record, "gpu"), str(int(xid))], count)
    yield xids


CHECK: Check[XidData] = Check(NAME, run, section=XidConfig, metrics=metric_families)
