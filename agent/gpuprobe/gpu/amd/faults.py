"""amdgpu faults in the kernel log: what AMD GPUs log where NVIDIA's log an XID.

amdgpu has no XID numbers; its faults are classes of messages (the shapes are the driver's,
as kernel logs in public bug reports show them; newer kernels prefix the device, older ones
log some lines through DRM without it):

- a ring timeout, the scheduler giving up on a job:
  `amdgpu 0000:c5:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=2662395, emitted
  seq=2662397` (older: `[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring sdma0 timeout, ...`),
  followed by the process (`Process information: process python3 pid 1234 ...`);
- a GPU reset: `GPU reset begin!`, then `GPU reset(2) succeeded!`, or `GPU reset(2) failed`,
  `GPU reset end with ret = -110` and (through DRM, without the device) `*ERROR* GPU Recovery
  Failed: -110`; a reset that began and never said how it ended before the log moved on (a
  line stamped `RESET_SETTLE` later, or the same GPU's next reset) is a fault of its own, the
  GPU hung in its reset (NixOS/nixpkgs#176915: `amdgpu 0000:03:00.0: amdgpu: GPU reset
  begin!`, then three minutes later `INFO: task InputThread:1375 blocked for more than 122
  seconds.`, no outcome);
- an uncorrectable RAS error: `socket: 0, die: 0 1 uncorrectable hardware errors detected in
  umc block` (or without the socket), and the fatal interrupt
  `{1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!`;
- GPU VM faults, a bad address in a workload:
  `amdgpu 0000:0b:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:8 pasid:32770, for
  process python pid 1796 thread python pid 1796)` (or `[mmhub0] no-retry page fault`).

Each becomes an `AmdgpuFault` with its cause; how bad each cause is, and what to do, is in
`CAUSES`, the analogue of NVIDIA's XID catalog. Each record is parsed once (`event_of`,
registered with `gpu.kernel_events`) into an `AmdgpuEvent` the kernel journal keeps; `fold`
reads one boot's faults from the kept events.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuprobe.gpu.journal.record import Entry, Item, LogRecord

RING_TIMEOUT = "ring_timeout"
GPU_RESET = "gpu_reset"
GPU_RESET_FAILED = "gpu_reset_failed"
GPU_RESET_UNFINISHED = "gpu_reset_unfinished"
RAS_UNCORRECTABLE = "ras_uncorrectable"
RAS_FATAL = "ras_fatal"
VM_FAULT = "vm_fault"


@dataclass(frozen=True)
class Cause:
    """How bad one class of amdgpu fault is and what to do about it."""

    severity: str
    action: str
    description: str


CAUSES: dict[str, Cause] = {
    RING_TIMEOUT: Cause("WARNING", "RESTART_APP", "a GPU job hung and the driver timed it out"),
    GPU_RESET: Cause(
        "WARNING", "RESTART_APP", "the driver reset the GPU; work on it was lost and it recovered"
    ),
    GPU_RESET_FAILED: Cause(
        "CRITICAL",
        "REBOOT_NODE",
        "the driver's GPU reset failed; the GPU is unusable until a reboot",
    ),
    GPU_RESET_UNFINISHED: Cause(
        "CRITICAL",
        "REBOOT_NODE",
        "the driver began a GPU reset and never said it ended; the GPU hangs until a reboot",
    ),
    RAS_UNCORRECTABLE: Cause(
        "CRITICAL", "RESET_GPU", "uncorrectable hardware errors (RAS); a reset retires bad pages"
    ),
    RAS_FATAL: Cause(
        "CRITICAL",
        "RESET_GPU",
        "a fatal RAS interrupt; the GPU needs a reset (a reboot if it fails)",
    ),
    VM_FAULT: Cause(
        "WARNING", "RESTART_APP", "GPU page faults: a workload touched memory it does not own"
    ),
}

_PCI = r"(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
_DEVICE = re.compile(r"amdgpu " + _PCI + r": ")
_RING = re.compile(r"ring (?P<ring>\S+) timeout, signaled seq=(\d+), emitted seq=(\d+)")
_RESET_DONE = re.compile(r"GPU reset(?:\(\d+\))? succeeded!")
_RESET_BEGIN = "GPU reset begin!"
# The reset itself done, the driver resuming the GPU (its outcome line follows).
_RESET_RESUMING = "GPU reset succeeded, trying to resume"
# A reset takes seconds (the MODE1 reset, the PSP's resume); one that said nothing of its end
# this long after it began, while the log went on, hung.
RESET_SETTLE = timedelta(seconds=60)
_MONOTONIC = re.compile(r"\[\s*(\d+\.\d+)\]")
_RESET_FAILED = re.compile(
    r"GPU reset(?:\(\d+\))? failed|GPU reset end with ret = -\d+|GPU Recovery Failed"
)
_RAS = re.compile(
    r"(?P<count>\d+) (?:new )?uncorrectable hardware errors detected in (?P<block>\w+) block"
)
_RAS_FATAL = re.compile(r"uncorrectable hardware error\((?P<event>\w+)\) detected!")
_VM = re.compile(r"\[(?P<hub>\w+)\] (?:no-retry |retry )?page fault \(src_id:")
_PROCESS = re.compile(r"process (?P<process>\S*) pid (?P<pid>\d+)")
# The line after a ring timeout or VM fault that names the process, old and new shapes:
# `Process information: process blender pid 10728 thread ...`, `  Process code pid 1048641
# thread ...`, `  in process cosmic-comp pid 4732 thread ...`.
_PROCESS_LINE = re.compile(
    r"(?:Process information: process|\bProcess|\bin process) (?P<process>\S*) pid (?P<pid>\d+)"
)
_BOOT = re.compile(r"(?:kernel: )?(?:\[\s*\d+\.\d+\] )?Linux version \d")
# The kind of event this reads, by the text its lines bear (`gpu.kernel_events`).
EVENTS = {"amdgpu_fault": "amdgpu"}


@dataclass(frozen=True)
class AmdgpuFault:
    """One amdgpu fault line: the GPU's PCI address (None where the line names none), its
    cause, the detail (ring, RAS block, hub), the process it names, when, and the line."""

    pci: str | None
    cause: str
    detail: str
    process: str | None
    time: datetime | None
    line: str


@dataclass(frozen=True, slots=True)
class AmdgpuEvent:
    """What one kernel record says in amdgpu's words, parsed once: whether it is the kernel's
    boot line, the fault it reports, the device it names, the process it names (the line after
    a ring timeout or VM fault), and whether a GPU reset begins or resumes on it."""

    record: LogRecord
    boot: bool
    fault: AmdgpuFault | None
    device: str | None
    process: str | None
    reset_begin: bool
    reset_resuming: bool


def event_of(record: LogRecord) -> AmdgpuEvent | None:
    """The record in amdgpu's words, or None when it holds none of the lines this reads
    (another program's line in syslog included)."""
    line = record.text
    if not _marked(line) or not record.kernel:
        return None
    device = _DEVICE.search(line)
    named = _PROCESS_LINE.search(line)
    return AmdgpuEvent(
        record,
        boot="Linux version" in line and _BOOT.search(line) is not None,
        fault=_fault(record),
        device=device.group("pci").lower() if device else None,
        process=f"{named.group('process')} (pid {named.group('pid')})"
        if named is not None and named.group("process")
        else None,
        reset_begin=_RESET_BEGIN in line,
        reset_resuming=_RESET_RESUMING in line,
    )


# The cheap test (`_marked`): what a line this reads holds (a fault, its device, its process,
# a boot); a line holding none of these is none this reads (`event_of` gives None).
PREFILTER = ("amdgpu", "GPU reset", "GPU Recovery", "Linux version", "rocess")


def _marked(line: str) -> bool:
    """Whether a line holds one of PREFILTER (written out: it runs on every kernel record)."""
    return (
        "amdgpu" in line
        or "GPU reset" in line
        or "GPU Recovery" in line
        or "Linux version" in line
        or "rocess" in line
    )


def parse_fault(line: str, *, boot: datetime | None, now: datetime) -> AmdgpuFault | None:
    """The amdgpu fault a kernel log line reports, or None."""
    return _fault(LogRecord.of_line(line, now))


def _fault(record: LogRecord) -> AmdgpuFault | None:
    line = record.text
    if "amdgpu" not in line and "GPU reset" not in line:
        return None
    device = _DEVICE.search(line)
    pci = device.group("pci").lower() if device else None
    cause, detail = _classify(line)
    if cause is None:
        return None
    process = _PROCESS.search(line)
    return AmdgpuFault(
        pci=pci,
        cause=cause,
        detail=detail,
        process=f"{process.group('process')} (pid {process.group('pid')})"
        if process and process.group("process")
        else None,
        time=record.time,
        line=line.strip(),
    )


def _classify(line: str) -> tuple[str | None, str]:
    ring = _RING.search(line)
    if ring:
        return RING_TIMEOUT, ring.group("ring")
    if _RESET_FAILED.search(line):
        return GPU_RESET_FAILED, ""
    if _RESET_DONE.search(line):
        return GPU_RESET, ""
    ras = _RAS.search(line)
    if ras:
        return RAS_UNCORRECTABLE, f"{ras.group('count')} in {ras.group('block')}"
    fatal = _RAS_FATAL.search(line)
    if fatal:
        return RAS_FATAL, fatal.group("event")
    vm = _VM.search(line)
    if vm:
        return VM_FAULT, vm.group("hub")
    return None, ""


def read_faults(
    texts: Iterable[str], *, boot: datetime | None, now: datetime, boots: bool = True
) -> list[AmdgpuFault]:
    """This boot's amdgpu faults in one log's text, given oldest part first: each line
    parsed once and folded (`fold`)."""
    entries = []
    for text in texts:
        for line in text.splitlines():
            record = LogRecord.of_line(line, now)
            event = event_of(record)
            entries.append(Entry(record, (event,) if event is not None else ()))
    return fold(entries, boot=boot, boots=boots)


def fold(
    entries: Iterable[Item], *, boot: datetime | None, boots: bool = True
) -> list[AmdgpuFault]:
    """This boot's amdgpu faults in one log's entries, oldest first, from the events `event_of`
    made of them: what a log held before its last `Linux version` line belongs to earlier
    boots (`boots` False: the log is one boot's by its nature, `/dev/kmsg`'s ring). A fault
    line without a device (the older DRM-prefixed ones) takes the device of the next line that
    names one within the same burst (the driver logs the reset of that GPU right after), else
    the device of the fault before it (`GPU Recovery Failed` follows its device's lines). A
    reset that began and said nothing of its end before the log moved on (every record counts,
    another program's too) is GPU_RESET_UNFINISHED."""
    faults: list[AmdgpuFault] = []
    resets = _Resets()
    for entry in entries:
        for record in entry.records() if resets.begun else ():
            if not resets.begun:
                break
            faults += resets.moved_on(record)
        event = entry.event(AmdgpuEvent)
        if event is None:
            continue  # no line this reads, or another program's line in syslog
        if boots and event.boot:
            faults, resets = [], _Resets()
            continue
        fault = event.fault
        if fault is None:
            if event.device:
                _adopt(faults, event.device)
            _name_process(faults, event.process)
            faults += resets.read(event)
            continue
        if fault.pci is not None:
            _adopt(faults, fault.pci)
        if fault.cause in (GPU_RESET, GPU_RESET_FAILED):
            resets.ended(fault.pci)
        faults.append(fault)
    for i in range(1, len(faults)):
        if faults[i].pci is None and faults[i - 1].pci is not None:
            old = faults[i]
            faults[i] = AmdgpuFault(
                faults[i - 1].pci, old.cause, old.detail, old.process, old.time, old.line
            )
    return faults


class _Resets:
    """The GPU resets a log began and has not said the end of, by device."""

    def __init__(self) -> None:
        self.begun: dict[str | None, tuple[datetime | None, float | None, str]] = {}

    def read(self, event: AmdgpuEvent) -> list[AmdgpuFault]:
        """A line of amdgpu's that is no fault: a reset's beginning (a reset of the same GPU
        still open is unfinished), or its resume (the reset itself done)."""
        pci = event.device
        if event.reset_resuming:
            self.ended(pci)
            return []
        if not event.reset_begin:
            return []
        unfinished = self._unfinished(pci) if pci in self.begun else []
        record = event.record
        self.begun[pci] = (record.time, _monotonic(record), record.text.strip())
        return unfinished

    def ended(self, pci: str | None) -> None:
        """The reset of `pci` said its end (any open one's, for a line naming no device)."""
        if pci is None:
            self.begun.clear()
        else:
            self.begun.pop(pci, None)

    def moved_on(self, record: LogRecord) -> list[AmdgpuFault]:
        """The resets still open when the log has gone on past RESET_SETTLE (by its wall or
        monotonic stamps)."""
        time = record.time
        mono = _monotonic(record)
        found: list[AmdgpuFault] = []
        for pci, (began, began_mono, _) in list(self.begun.items()):
            late = (time is not None and began is not None and time - began >= RESET_SETTLE) or (
                mono is not None
                and began_mono is not None
                and mono - began_mono >= RESET_SETTLE.total_seconds()
            )
            if late:
                found += self._unfinished(pci)
        return found

    def _unfinished(self, pci: str | None) -> list[AmdgpuFault]:
        began, _, line = self.begun.pop(pci)
        return [AmdgpuFault(pci, GPU_RESET_UNFINISHED, "", None, began, line)]


def _monotonic(record: LogRecord) -> float | None:
    """A record's seconds since boot: the source's (`/dev/kmsg`'s stamp), else the line's
    (`[37937.169164]`), when it carries them."""
    if record.usec is not None:
        return record.usec / 1e6
    match = _MONOTONIC.search(record.text, 0, 80)
    return float(match.group(1)) if match else None


def _name_process(faults: list[AmdgpuFault], process: str | None) -> None:
    """Give the last fault, when it names no process, the process a line names."""
    if not faults or faults[-1].process is not None or process is None:
        return
    if faults[-1].cause not in (RING_TIMEOUT, VM_FAULT):
        return
    old = faults[-1]
    faults[-1] = AmdgpuFault(old.pci, old.cause, old.detail, process, old.time, old.line)


def _adopt(faults: list[AmdgpuFault], pci: str) -> None:
    """Give the device-less faults just before a line naming `pci` that device."""
    i = len(faults) - 1
    while i >= 0 and faults[i].pci is None:
        old = faults[i]
        faults[i] = AmdgpuFault(pci, old.cause, old.detail, old.process, old.time, old.line)
        i -= 1
