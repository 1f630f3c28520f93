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
zone) before the boot time. Syslog's traditional stamps (`Nov 29 20:58:01`) carry no year and
no zone: the year is inferred from the boot time (else from now) and the zone taken as UTC.

Only the kernel's lines count. A syslog file (`syslog`, `messages`) holds every program's
lines, each under its tag (`Nov 29 20:58:01 gpu-node-17 myapp[4242]: ...`); a line counts only
when its tag is `kernel` (`is_kernel_line`), so no program can log an XID or a boot marker
that reads as the kernel's. Lines without a syslog header (`dmesg` output, `/dev/kmsg`'s
records) are the kernel's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

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
# A syslog line's header: its stamp (RFC 3339 as rsyslog and `journalctl -o short-iso` write
# it, or the traditional `Nov 29 20:58:01`, `.123456` with `-o short-precise`), then the host
# and the tag (`kernel:`, `myapp[4242]:`); `/dev/kmsg`'s lines carry no host.
_HEADER = re.compile(
    r"^(?:\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|[A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)"
    r"\s+(?P<first>\S+)(?:\s+(?P<second>\S+))?"
)
# A syslog tag with its process id (`myapp[4242]:`) opening a line without a stamp.
_PID_TAG = re.compile(r"[^\s\[\]]+\[\d+\]:")
KERNEL_TAG = "kernel:"
# The kinds of event this reads, by the text each kind's lines bear (`gpu.kernel_events`):
# every line of NVIDIA's driver (XIDs, XID-less faults, GPUs' UUIDs), NVSwitch SXids, and
# the kernel's boot line.
EVENTS = {"nvrm": "NVRM: ", "sxid": "SXid", "boot": "Linux version"}
# dmesg's stamp opening a message: `[ 6002.511207]`, `[Sun Nov 29 09:40:02 2026]`.
_LEADING_STAMP = re.compile(r"^\s*\[(?:\s*\d+\.\d+|\w{3} \w{3} +\d{1,2} [\d:]{8} \d{4})\]\s*")
_RFC3339 = re.compile(
    r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\s"
)
_SYSLOG = re.compile(r"^([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})\s")
_CTIME = re.compile(r"^\[(\w{3} \w{3} +\d{1,2} \d{2}:\d{2}:\d{2} \d{4})\]")
_MONTHS = {
    m: i
    for i, m in enumerate(
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1
    )
}
# A kernel line written just before the boot time is still this boot's (clock adjustments).
BOOT_SLACK = timedelta(minutes=5)
# How far ahead of UTC a local syslog stamp can read (the zone UTC+14).
ZONE_AHEAD = timedelta(hours=14)


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


def read_stream(
    texts: Iterable[str], *, boot: datetime | None, now: datetime, boots: bool = True
) -> KernelLog:
    """The current boot's XIDs and SXids in one log, given oldest part first (`kern.log.1`,
    `kern.log`). `boots` False: the log is one boot's by its nature (`/dev/kmsg`'s ring), a
    `Linux version` line in it begins nothing."""
    log = KernelLog([], {})
    falling: tuple[str, int, str] | None = None  # (pci, lines since its start, its lines)
    for text in texts:
        for line in text.splitlines():
            if "NVRM" not in line and "SXid" not in line and "Linux version" not in line:
                continue  # the cheap test first: kernel logs are long
            if not is_kernel_line(line):
                continue  # another program's line in syslog: not the kernel's
            if boots and _BOOT.search(line):
                log, falling = KernelLog([], {}), None
                continue
            if _zoned(line) and _before_boot(line_time(line, boot=boot, now=now), boot):
                continue
            if falling is not None:
                pci, seen, joined = falling
                joined = f"{joined} {_nvrm_text(line)}"
                falling = (pci, seen + 1, joined) if seen + 1 < _FALLEN_SPAN else None
                if _FALLEN_END in line:
                    log.xids.append(_derived(pci, FALLEN_OFF_THE_BUS, joined, line, boot, now))
                    falling = None
                    continue
            _read_line(line, log, boot, now)
            start = _FALLEN_START.search(line)
            if start is not None:
                pci = pci_prefix(start.group("pci"))
                if _FALLEN_END in line:  # the whole message on one line (a journal export)
                    text_ = _nvrm_text(line)
                    log.xids.append(_derived(pci, FALLEN_OFF_THE_BUS, text_, line, boot, now))
                else:
                    falling = (pci, 0, _nvrm_text(line))
    numbered = {(x.pci, x.xid) for x in log.xids if x.logged_xid}
    log.xids = [x for x in log.xids if x.logged_xid or (x.pci, x.xid) not in numbered]
    return log


def is_kernel_line(line: str) -> bool:
    """Whether a log line is the kernel's: its syslog tag is `kernel` (after the stamp, with
    or without a host), or it has no syslog header (dmesg's lines, kmsg's records) and opens
    with no process's tag."""
    header = _HEADER.match(line)
    if header is None:
        words = line.split(maxsplit=1)
        return not (words and _PID_TAG.fullmatch(words[0]))
    first, second = header.group("first"), header.group("second")
    if first == KERNEL_TAG:
        return True
    return not first.endswith(":") and second == KERNEL_TAG


def kernel_text(line: str) -> str:
    """A kernel line's message without its stamps, host and tag: the same record read from
    kern.log, syslog and /dev/kmsg gives the same text."""
    _, tag, rest = line.partition(KERNEL_TAG + " ")
    text = rest if tag else line
    return _LEADING_STAMP.sub("", text, count=1).strip()


def _read_line(line: str, log: KernelLog, boot: datetime | None, now: datetime) -> None:
    """Fold one NVRM or SXid line into `log`."""
    found = _GPU_AT.search(line)
    if found:
        log.uuids[pci_prefix(found.group("pci"))] = found.group("uuid")
        return
    xid = parse_xid(line, boot=boot, now=now)
    if xid is not None:
        log.xids.append(xid)
        return
    sxid = parse_sxid(line, boot=boot, now=now)
    if sxid is not None:
        log.sxids.append(sxid)
        return
    fallen = _FALLEN_ONE_LINE.search(line)
    if fallen is not None:
        pci = pci_prefix(fallen.group("pci"))
        log.xids.append(_derived(pci, FALLEN_OFF_THE_BUS, _nvrm_text(line), line, boot, now))
        return
    failed = _INIT_FAILED.search(line)
    if failed is not None:
        pci = pci_prefix(failed.group("pci"))
        message = failed.group("message").strip()
        log.xids.append(_derived(pci, INIT_ERROR, message, line, boot, now))


def _derived(
    pci: str, xid: int, message: str, line: str, boot: datetime | None, now: datetime
) -> XidLine:
    """An XID-less fault read as the XID NVIDIA files it under."""
    return XidLine(pci, xid, message, line_time(line, boot=boot, now=now), line.strip(), False)


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
    match = _SXID.search(line)
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
        time=line_time(line, boot=boot, now=now),
        line=line.strip(),
    )


def parse_xid(line: str, *, boot: datetime | None, now: datetime) -> XidLine | None:
    """The XID a kernel log line reports, or None."""
    match = _XID.search(line)
    if match is None:
        return None
    return XidLine(
        pci=pci_prefix(match.group("pci")),
        xid=int(match.group("xid")),
        message=(match.group("message") or "").strip(),
        time=line_time(line, boot=boot, now=now),
        line=line.strip(),
    )


def line_time(line: str, *, boot: datetime | None, now: datetime) -> datetime | None:
    """When a log line was written, from its RFC 3339, syslog or `dmesg --ctime` stamp."""
    match = _RFC3339.match(line)
    if match:
        try:
            stamp = datetime.fromisoformat(match.group(1).replace(" ", "T"))
        except ValueError:
            return None
        return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
    match = _SYSLOG.match(line)
    if match:
        return _syslog_time(match, now=now)
    match = _CTIME.match(line)
    if match:
        try:
            return datetime.strptime(match.group(1), "%a %b %d %H:%M:%S %Y").replace(tzinfo=UTC)
        except ValueError:
            return None
    return None


def _syslog_time(match: re.Match[str], *, now: datetime) -> datetime | None:
    month = _MONTHS.get(match.group(1))
    if month is None:
        return None
    day, hour, minute, second = (int(match.group(i)) for i in range(2, 6))

    def at(year: int) -> datetime | None:
        try:
            return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
        except ValueError:  # 29 February in a year without it
            return None

    # The year that puts the line last before now: a log holds no line from the future. A
    # syslog stamp is local time, so one written just now may read up to 14 hours ahead
    # (UTC+14); such a line is this year's, held at now. (The boot does not decide: a line
    # read on 1 December from 28 November is this year's even after a reboot on 30 November.)
    stamp = at(now.year)
    if stamp is None or stamp > now + ZONE_AHEAD:
        stamp = at(now.year - 1)
    return min(stamp, now) if stamp is not None else None


def _zoned(line: str) -> bool:
    """Whether a line's stamp carries its zone (RFC 3339 with an offset), so it can be held
    against the boot time; a syslog stamp in local time could be hours off."""
    match = _RFC3339.match(line)
    return match is not None and bool(re.search(r"(Z|[+-]\d{2}:?\d{2})$", match.group(1)))


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
