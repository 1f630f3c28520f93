"""XID lines in the host's kernel log files (kern.log, syslog, messages).

The NVIDIA driver logs every XID as a kernel message:

    NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.

and names each GPU's UUID once it is attached (`NVRM: GPU at PCI:0000:3a:00: GPU-5f1c...`).

Some faults come without an XID number (NVIDIA's driver, nv.c and the RM init path; the shapes
from public bug reports): a GPU found fallen off the bus at probe or open time,

    NVRM: The NVIDIA GPU 0000:b3:00.0
    NVRM: (PCI ID: 10de:26b5) installed in this system has
    NVRM: fallen off the bus and is not responding to commands.

(or the first two joined: `NVRM: The NVIDIA GPU 0000:05:00.0 (PCI ID: 10de:2f04)`), the one-line
`NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.`, and a GPU whose initialization failed,
`NVRM: GPU 0000:0b:00.0: RmInitAdapter failed! (0x62:0x65:2522)`. They are read as the XID
NVIDIA files the same fault under (79, fallen off the bus; 143, GPU initialization error), marked
`logged_xid=False`, and dropped where the same GPU's log also holds that XID by number (the driver
prints both lines for one fault). An `RmInitAdapter failed!` line without a PCI address (old
drivers name only a device minor number) cannot be tied to a GPU and is passed over.

The NVSwitch driver logs SXids (NVIDIA Fabric Manager user guide, "NVSwitch SXid errors"):

    nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 28006, Non-fatal, Link 46 MC TS crumbstore MCTO
        (First)
    nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 28006, Severity 0 Engine instance 46 Sub-engine
        instance 00
    nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 28006, Data {0x00140004, 0x00100000, ...}

(each one line in the log)
the first line the error (its `Fatal` / `Non-fatal` word, port and text), the others its details.
Only the current boot counts (a reboot clears what an XID left behind): a log's lines before
its last `Linux version` line belong to earlier boots, and so do lines stamped (with a time
zone) before the boot time. The lines' shapes (stamps, hosts, tags; only the kernel's lines
count) are read by `gpuprobe.gpu.journal.syslog`.

Each record is parsed once (`event_of`, registered with `gpu.kernel_events`), into an `NvrmEvent`
the kernel journal keeps with it; `fold` reads one boot's XIDs, SXids and GPUs' UUIDs from the
kept events (the multi-line fallen-off-the-bus message joined), running no parser again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from gpuprobe.gpu.journal.record import Entry, Item, LogRecord
from gpuprobe.gpu.journal.syslog import KERNEL_TAG, is_kernel_line, kernel_text
from gpuprobe.gpu.journal.syslog import line_time as _line_time

__all__ = [
    "KERNEL_TAG",
    "GpuAttached",
    "KernelLog",
    "NvrmEvent",
    "SxidLine",
    "XidLine",
    "boot_time",
    "event_of",
    "fold",
    "is_kernel_line",
    "kernel_text",
    "line_time",
    "parse_sxid",
    "parse_xid",
    "pci_prefix",
    "read_stream",
]

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})"
    r"(?:\.[0-7])?\): (?P<xid>\d+)(?:,\s*(?P<message>.*))?"
)
_FALLEN_START = re.compile(
    r"NVRM: The NVIDIA GPU (?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])"
)
_FALLEN_END = "fallen off the bus and is not responding to commands"
_FALLEN_ONE_LINE = re.compile(
    r"NVRM: GPU (?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?: "
    r"GPU has fallen off the bus"
)
_INIT_FAILED = re.compile(
    r"NVRM: GPU (?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?: "
    r"(?P<message>RmInitAdapter failed!.*)"
)
# A multi-line fallen-off-the-bus message ends within this many lines of its first.
_FALLEN_SPAN = 3
FALLEN_OFF_THE_BUS, INIT_ERROR = 79, 143
_SXID = re.compile(
    r"(?P<device>nvidia-nvswitch\d+): SXid \(PCI:(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
    r"[0-9A-Fa-f]{2}(?:\.[0-7])?)\): (?P<sxid>\d+), (?P<word>Fatal|Non-fatal)\b,?\s*(?P<message>.*)"
)
_SXID_LINK = re.compile(r"\bLink (\d+)\b")
_GPU_AT = re.compile(r"NVRM: GPU at PCI:(?P<pci>[0-9A-Fa-f:.]+): (?P<uuid>GPU-[0-9A-Fa-f-]+)")
_BOOT = re.compile(r"kernel: (?:\[\s*\d+\.\d+\] )?Linux version \d")
# The kinds of event this reads, by the text each kind's lines bear (`gpu.kernel_events`):
# every line of NVIDIA's driver (XIDs, XID-less faults, GPUs' UUIDs), NVSwitch SXids, and
# the kernel's boot line.
EVENTS = {"nvrm": "NVRM: ", "sxid": "SXid", "boot": "Linux version"}
# The cheap test: a line holding none of these is none this reads (`event_of` gives None).
PREFILTER = ("NVRM", "SXid", "Linux version")
# A kernel line written just before the boot time is still this boot's (clock adjustments).
BOOT_SLACK = timedelta(minutes=5)


@dataclass(frozen=True)
class XidLine:
    """One XID the driver logged: the GPU's PCI address (`0000:3a:00`), the XID, its text;
    `logged_xid` is False for a fault the driver logged without an XID number."""

    pci: str
    xid: int
    message: str
    time: datetime | None
    line: str
    logged_xid: bool = True


@dataclass(frozen=True)
class SxidLine:
    """One SXid the NVSwitch driver logged: the switch's PCI address (`0000:c1:00.0`), its
    driver instance (`nvidia-nvswitch3`), the SXid, Fatal or not, the port, the text."""

    pci: str
    device: str
    sxid: int
    fatal: bool
    link: int | None
    message: str
    time: datetime | None
    line: str


@dataclass
class KernelLog:
    """What the kernel log says about this boot: its XID and SXid lines and each GPU's UUID
    by PCI (with the time of the last line that named it: the driver attached the GPU then)."""

    xids: list[XidLine]
    uuids: dict[str, str]
    sxids: list[SxidLine] = field(default_factory=list)


def pci_prefix(address: str) -> str:
    """A PCI address as `domain:bus:device`, 4-digit domain: `00000000:3A:00.0` → `0000:3a:00`."""
    parts = address.strip().lower().split(".")[0].split(":")
    if len(parts) == 2:  # bus:device without a domain
        parts = ["0000", *parts]
    if len(parts) != 3:
        return address.strip().lower()
    try:
        return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
    except ValueError:
        return address.strip().lower()


@dataclass(frozen=True, slots=True)
class GpuAttached:
    """The driver named a GPU's UUID as it attached it (`NVRM: GPU at PCI:...: GPU-...`)."""

    pci: str
    uuid: str


@dataclass(frozen=True, slots=True)
class NvrmEvent:
    """What one kernel record says in NVIDIA's words, parsed once: whether it is the kernel's
    boot line, its text after `NVRM: ` (a multi-line message's part), what it reports (an XID,
    an XID-less fault read as its XID, an SXid, a GPU's UUID), and whether it begins or ends
    the multi-line fallen-off-the-bus message (the GPU's address where it begins it)."""

    record: LogRecord
    boot: bool
    text: str
    found: XidLine | SxidLine | GpuAttached | None
    fallen_start: str | None
    fallen_end: bool


def event_of(record: LogRecord) -> NvrmEvent | None:
    """The record in NVIDIA's words, or None when it holds none of the lines this reads
    (another program's line in syslog included)."""
    line = record.text
    if "NVRM" not in line and "SXid" not in line and "Linux version" not in line:
        return None  # the cheap test first: kernel logs are long
    if not record.kernel:
        return None  # another program's line in syslog: not the kernel's
    start = _FALLEN_START.search(line)
    return NvrmEvent(
        record,
        boot=_BOOT.search(line) is not None,
        text=_nvrm_text(line),
        found=_found(record),
        fallen_start=pci_prefix(start.group("pci")) if start is not None else None,
        fallen_end=_FALLEN_END in line,
    )


def fold(entries: Iterable[Item], *, boot: datetime | None, boots: bool = True) -> KernelLog:
    """The current boot's XIDs and SXids in one log's entries, oldest first, from the events
    `event_of` made of them. `boots` False: the log is one boot's by its nature (`/dev/kmsg`'s
    ring, a journal's boot), a `Linux version` line in it begins nothing."""
    log = KernelLog([], {})
    falling: tuple[str, int, str] | None = None  # (pci, lines since its start, its lines)
    for entry in entries:
        event = entry.event(NvrmEvent)
        if event is None:
            continue
        record = event.record
        if boots and event.boot:
            log, falling = KernelLog([], {}), None
            continue
        if record.zoned and _before_boot(record.time, boot):
            continue
        if falling is not None:
            pci, seen, joined = falling
            joined = f"{joined} {event.text}"
            falling = (pci, seen + 1, joined) if seen + 1 < _FALLEN_SPAN else None
            if event.fallen_end:
                log.xids.append(_derived(pci, FALLEN_OFF_THE_BUS, joined, record))
                falling = None
                continue
        found = event.found
        if isinstance(found, GpuAttached):
            log.uuids[found.pci] = found.uuid
        elif isinstance(found, XidLine):
            log.xids.append(found)
        elif isinstance(found, SxidLine):
            log.sxids.append(found)
        if event.fallen_start is not None:
            if event.fallen_end:  # the whole message on one line (a journal export)
                log.xids.append(
                    _derived(event.fallen_start, FALLEN_OFF_THE_BUS, event.text, record)
                )
            else:
                falling = (event.fallen_start, 0, event.text)
    numbered = {(x.pci, x.xid) for x in log.xids if x.logged_xid}
    log.xids = [x for x in log.xids if x.logged_xid or (x.pci, x.xid) not in numbered]
    return log


def read_stream(
    texts: Iterable[str], *, boot: datetime | None, now: datetime, boots: bool = True
) -> KernelLog:
    """The current boot's XIDs and SXids in one log's text, given oldest part first
    (`kern.log.1`, `kern.log`): each line parsed once and folded (`fold`)."""
    entries = []
    for text in texts:
        for line in text.splitlines():
            event = event_of(LogRecord.of_line(line, now))
            if event is not None:
                entries.append(Entry(event.record, (event,)))
    return fold(entries, boot=boot, boots=boots)


def _found(record: LogRecord) -> XidLine | SxidLine | GpuAttached | None:
    """What one NVRM or SXid record reports."""
    line = record.text
    attached = _GPU_AT.search(line)
    if attached:
        return GpuAttached(pci_prefix(attached.group("pci")), attached.group("uuid"))
    xid = _xid(record)
    if xid is not None:
        return xid
    sxid = _sxid(record)
    if sxid is not None:
        return sxid
    fallen = _FALLEN_ONE_LINE.search(line)
    if fallen is not None:
        pci = pci_prefix(fallen.group("pci"))
        return _derived(pci, FALLEN_OFF_THE_BUS, _nvrm_text(line), record)
    failed = _INIT_FAILED.search(line)
    if failed is not None:
        pci = pci_prefix(failed.group("pci"))
        return _derived(pci, INIT_ERROR, failed.group("message").strip(), record)
    return None


def _derived(pci: str, xid: int, message: str, record: LogRecord) -> XidLine:
    """An XID-less fault read as the XID NVIDIA files it under."""
    return XidLine(pci, xid, message, record.time, record.text.strip(), False)


def _function(address: str) -> str:
    """A PCI address with its function (`0000:c1:00` → `0000:c1:00.0`)."""
    return address if "." in address else f"{address}.0"


def _nvrm_text(line: str) -> str:
    """A line's text after its `NVRM: ` (the whole line when it has none)."""
    _, sep, rest = line.partition("NVRM: ")
    return (rest if sep else line).strip()


def parse_sxid(line: str, *, boot: datetime | None, now: datetime) -> SxidLine | None:
    """The SXid error a kernel log line reports (its first line, with the Fatal/Non-fatal
    word; the detail lines that follow it return None)."""
    return _sxid(LogRecord.of_line(line, now))


def _sxid(record: LogRecord) -> SxidLine | None:
    match = _SXID.search(record.text)
    if match is None:
        return None
    message = match.group("message").strip()
    link = _SXID_LINK.search(message)
    return SxidLine(
        pci=match.group("pci").lower()
        if "." in match.group("pci")
        else f"{match.group('pci').lower()}.0",
        device=match.group("device"),
        sxid=int(match.group("sxid")),
        fatal=match.group("word") == "Fatal",
        link=int(link.group(1)) if link else None,
        message=message,
        time=record.time,
        line=record.text.strip(),
    )


def parse_xid(line: str, *, boot: datetime | None, now: datetime) -> XidLine | None:
    """The XID a kernel log line reports, or None."""
    return _xid(LogRecord.of_line(line, now))


def _xid(record: LogRecord) -> XidLine | None:
    match = _XID.search(record.text)
    if match is None:
        return None
    return XidLine(
        pci=pci_prefix(match.group("pci")),
        xid=int(match.group("xid")),
        message=(match.group("message") or "").strip(),
        time=record.time,
        line=record.text.strip(),
    )


def line_time(line: str, *, boot: datetime | None, now: datetime) -> datetime | None:
    """When a log line was written, from its RFC 3339, syslog or `dmesg --ctime` stamp
    (`gpuprobe.gpu.journal.syslog`)."""
    return _line_time(line, now=now)


def _before_boot(time: datetime | None, boot: datetime | None) -> bool:
    """Whether a line was written before this boot (an earlier boot's)."""
    if time is None or boot is None:
        return False
    return time < boot - BOOT_SLACK


def boot_time(proc_stat: str | None) -> datetime | None:
    """The boot time from /proc/stat's `btime` line (seconds since the epoch)."""
    for line in (proc_stat or "").splitlines():
        if line.startswith("btime "):
            try:
                return datetime.fromtimestamp(int(line.split()[1]), UTC)
            except (ValueError, IndexError, OverflowError, OSError):
                return None
    return None
