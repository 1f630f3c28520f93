"""XID lines in the host's kernel log files (kern.log, syslog, messages).

The NVIDIA driver logs every XID as a kernel message:

    NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.

and names each GPU's UUID once it is attached (`NVRM: GPU at PCI:0000:3a:00: GPU-5f1c...`).
Only the current boot counts (a reboot clears what an XID left behind): a log's lines before
its last `Linux version` line belong to earlier boots, and so do lines stamped (with a time
zone) before the boot time. Syslog's traditional stamps (`Nov 29 20:58:01`) carry no year and
no zone: the year is inferred from the boot time (else from now) and the zone taken as UTC.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})"
    r"(?:\.[0-7])?\): (?P<xid>\d+)(?:,\s*(?P<message>.*))?"
)
_GPU_AT = re.compile(r"NVRM: GPU at PCI:(?P<pci>[0-9A-Fa-f:.]+): (?P<uuid>GPU-[0-9A-Fa-f-]+)")
_BOOT = re.compile(r"kernel: (?:\[\s*\d+\.\d+\] )?Linux version \d")
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


@dataclass(frozen=True)
class XidLine:
    """One XID the driver logged: the GPU's PCI address (`0000:3a:00`), the XID, its text."""

    pci: str
    xid: int
    message: str
    time: datetime | None
    line: str


@dataclass
class KernelLog:
    """What the kernel log says about this boot: its XID lines and each GPU's UUID by PCI."""

    xids: list[XidLine]
    uuids: dict[str, str]


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


def read_stream(texts: Iterable[str], *, boot: datetime | None, now: datetime) -> KernelLog:
    """The current boot's XIDs in one log, given oldest part first (`kern.log.1`, `kern.log`)."""
    xids: list[XidLine] = []
    uuids: dict[str, str] = {}
    for text in texts:
        for line in text.splitlines():
            if "NVRM" not in line and "Linux version" not in line:
                continue  # the cheap test first: kernel logs are long
            if _BOOT.search(line):
                xids, uuids = [], {}
                continue
            found = _GPU_AT.search(line)
            if found:
                uuids[pci_prefix(found.group("pci"))] = found.group("uuid")
                continue
            xid = parse_xid(line, boot=boot, now=now)
            if xid is not None and not (_zoned(line) and _before_boot(xid.time, boot)):
                xids.append(xid)
    return KernelLog(xids, uuids)


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
        return _syslog_time(match, boot=boot, now=now)
    match = _CTIME.match(line)
    if match:
        try:
            return datetime.strptime(match.group(1), "%a %b %d %H:%M:%S %Y").replace(tzinfo=UTC)
        except ValueError:
            return None
    return None


def _syslog_time(match: re.Match[str], *, boot: datetime | None, now: datetime) -> datetime | None:
    month = _MONTHS.get(match.group(1))
    if month is None:
        return None
    day, hour, minute, second = (int(match.group(i)) for i in range(2, 6))

    def at(year: int) -> datetime | None:
        try:
            return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
        except ValueError:  # 29 February in a year without it
            return None

    if boot is not None:  # the first such date on or after the boot (a day's slack for zones)
        stamp = at(boot.year)
        if stamp is not None and stamp < boot - timedelta(days=1):
            stamp = at(boot.year + 1)
        return stamp
    stamp = at(now.year)
    if stamp is not None and stamp > now + timedelta(days=1):
        stamp = at(now.year - 1)
    return stamp


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
