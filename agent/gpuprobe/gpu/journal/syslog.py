"""The shapes of a kernel log file's lines: their stamps, hosts and tags.

A syslog line's header is its stamp (RFC 3339 as rsyslog and `journalctl -o short-iso` write
it, or the traditional `Nov 29 20:58:01`, `.123456` with `-o short-precise`), then the host and
the tag (`kernel:`, `myapp[4242]:`); dmesg's lines carry no header (`[ 6002.511207] ...`, or
`[Sun Nov 29 09:40:02 2026] ...` with `--ctime`). Syslog's traditional stamps carry no year and
no zone: the year is inferred from now and the zone taken as UTC.

Only the kernel's lines count. A syslog file (`syslog`, `messages`) holds every program's
lines, each under its tag (`Nov 29 20:58:01 gpu-node-17 myapp[4242]: ...`); a line counts only
when its tag is `kernel` (`is_kernel_line`), so no program can log an XID or a boot marker
that reads as the kernel's. Lines without a syslog header (dmesg's output) are the kernel's.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_HEADER = re.compile(
    r"^(?:\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|[A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)"
    r"\s+(?P<first>\S+)(?:\s+(?P<second>\S+))?"
)
# A syslog tag with its process id (`myapp[4242]:`) opening a line without a stamp.
_PID_TAG = re.compile(r"[^\s\[\]]+\[\d+\]:")
KERNEL_TAG = "kernel:"
# dmesg's stamp opening a message: `[ 6002.511207]`, `[Sun Nov 29 09:40:02 2026]`.
_LEADING_STAMP = re.compile(r"^\s*\[(?:\s*\d+\.\d+|\w{3} \w{3} +\d{1,2} [\d:]{8} \d{4})\]\s*")
_RFC3339 = re.compile(
    r"^(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\s"
)
_ZONE = re.compile(r"(Z|[+-]\d{2}:?\d{2})$")
_SYSLOG = re.compile(r"^([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})\s")
_CTIME = re.compile(r"^\[(\w{3} \w{3} +\d{1,2} \d{2}:\d{2}:\d{2} \d{4})\]")
_MONTHS = {
    m: i
    for i, m in enumerate(
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1
    )
}
# How far ahead of UTC a local syslog stamp can read (the zone UTC+14).
ZONE_AHEAD = timedelta(hours=14)


def is_kernel_line(line: str) -> bool:
    """Whether a log line is the kernel's: its syslog tag is `kernel` (after the stamp, with
    or without a host), or it has no syslog header (dmesg's lines) and opens with no process's
    tag."""
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


def line_time(line: str, *, now: datetime) -> datetime | None:
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


def zoned(line: str) -> bool:
    """Whether a line's stamp carries its zone (RFC 3339 with an offset), so it can be held
    against the boot time; a syslog stamp in local time could be hours off."""
    match = _RFC3339.match(line)
    return match is not None and bool(_ZONE.search(match.group(1)))
