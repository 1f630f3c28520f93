"""The host's kernel log files as kernel-journal records: each log's last bytes, read once a
run, one record a line.

A log file is read from its last `max_bytes` by whole lines, lines longer than any kernel
line passed over and counted (`gpu.log_tail`); the rotated files of one log (`kern.log.1`,
`kern.log`) are one stream, oldest first (`rotation_streams`). A line a parser may read is made
a `LogRecord` whose stamp, zone and tag are read when first asked for (`gpu.journal.syslog`);
the runs of lines between are kept as text (`gpu.kernel_events.items_of`); a file's boots are
told by its boot lines (the vendors' folds). Every path is resolved inside the root as a chroot
would (`HostFS.tree`); a device or FIFO in a log's place is no log.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from gpuprobe.gpu import log_tail
from gpuprobe.gpu.journal.record import LogRecord
from gpuprobe.gpu.log_tail import MAX_LINE_BYTES, MAX_SCAN_BYTES, Tail
from gpuprobe.host import Host


@dataclass(frozen=True)
class LogRead:
    """One file's read: its host path, its lines (oldest first; a record made of each line a
    parser reads, `gpu.kernel_events.items_of`), when it was read (an undated syslog stamp
    takes its year from it) and how many lines were passed over as too long to be the
    kernel's."""

    path: str
    lines: list[str]
    now: datetime
    lost: int

    def first_time(self) -> datetime | None:
        """The stamp of the log's first stamped line (of its first 100 lines): since when it
        holds records."""
        for line in self.lines[:100]:
            time = LogRecord.of_line(line, self.now).time
            if time is not None:
                return time
        return None


def read_logs(host: Host, group: list[str], max_bytes: int, now: datetime) -> list[LogRead]:
    """One log's rotated files that could be read (oldest first), each file's last
    `max_bytes` as records (their syslog stamps read as of `now`)."""
    reads = []
    for path in group:
        tail = tail_log(host, path, max_bytes)
        if tail is not None:
            lines = tail.data.decode("utf-8", errors="replace").splitlines()
            reads.append(LogRead(path, lines, now, tail.skipped))
    return reads


def rotation_streams(paths: Iterable[str]) -> list[list[str]]:
    """The log files grouped by log (`kern.log` with its `kern.log.1`, ...), each group oldest
    first: by rotation number, the highest first and the live log last, whatever order they
    are listed in (a boot marker in an older file must not drop the current boot's lines)."""
    streams: dict[str, list[str]] = {}
    for path in paths:
        group = streams.setdefault(re.sub(r"\.\d+$", "", path), [])
        if path not in group:
            group.append(path)
    return [sorted(group, key=_rotation, reverse=True) for group in streams.values()]


def _rotation(path: str) -> int:
    """A rotated file's number (`kern.log.2`: 2); the live log's is 0."""
    match = re.search(r"\.(\d+)$", path)
    return int(match.group(1)) if match else 0


def tail_log(host: Host, path: str, max_bytes: int) -> Tail | None:
    """A log file's last `max_bytes` by whole lines, lines longer than any kernel line passed
    over (`gpuprobe.gpu.log_tail`); None when it cannot be read or is no regular file."""
    try:
        with host.fs.open_binary(path) as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None  # a device or FIFO in a log's place (/dev/zero): no log
            return log_tail.read_tail(f, max_bytes, MAX_LINE_BYTES, MAX_SCAN_BYTES)
    except OSError:
        return None
