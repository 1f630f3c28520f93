"""The kernel log from `/dev/kmsg`: its records parsed and followed by sequence number, for the
kernel journal (`gpuprobe.gpu.journal.journal`), which makes each kept record a `LogRecord`
once and runs the vendors' parsers on it once.

A record, as the kernel prints it (Documentation/ABI/testing/dev-kmsg):

    4,1542,4361822917,-;NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU...
     SUBSYSTEM=pci
     DEVICE=+pci:0000:18:00.0

(the message cut here): the syslog priority and facility in one number
(`facility << 3 | level`), the record's
sequence number, its monotonic time stamp in microseconds since boot, its flags (`-`, or `c`
for a continued line), then the message (non-printable bytes escaped as `\\xNN`); the lines
after it that begin with a space are its dictionary (`KEY=value`).

Only kernel records (facility 0) are read as the kernel's: a process writing to `/dev/kmsg`
(systemd, a container's init) is given the user facility by the kernel, so no process can plant
an `NVRM: Xid` line that reads as the driver's.

`KmsgLog` follows one reader: a record it already read is dropped (a snapshot file read again
from its start), a jump in the sequence numbers is records the ring overwrote before they were
read, and what it kept is bounded. A record is known by its whole content (`SeenRecords`), not
by "a number at or below the highest so far": a forged record with a huge number, or another
record under a number already read, in a snapshot's file must not hide the records after it.
The kernel's sequence numbers and time stamps are unsigned 64-bit: a larger one is no record.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpuprobe.host.kmsg import KmsgReader

KERNEL_FACILITY = 0
# The kernel's sequence numbers and time stamps are u64.
U64_MAX = 2**64 - 1
# Reads of the reader in one `read()`/`follow()` at most (each bounded by READ_BYTES): the
# kernel's largest ring (32 MiB) in one go; a device that never runs dry stops there.
MAX_READS = 8
# A jump in the sequence numbers larger than this is no overrun (the ring holds far fewer
# records than this): not counted as lost.
MAX_GAP = 2**32
# Records known by fingerprint, beyond those kept: a file read again from its start holds
# the whole ring (its records beyond what is kept, up to the ring's size, are known too).
SEEN_SLACK = 65_536


@dataclass(frozen=True)
class KmsgRecord:
    """One kmsg record: its facility and level, sequence number, microseconds since boot,
    flags, message and dictionary (` KEY=value` lines)."""

    facility: int
    level: int
    sequence: int
    usec: int
    flags: str
    message: str
    dictionary: dict[str, str] = field(default_factory=dict)

    @property
    def kernel(self) -> bool:
        """Whether the kernel wrote it (not a process writing to /dev/kmsg)."""
        return self.facility == KERNEL_FACILITY


def parse_record(text: str) -> KmsgRecord | None:
    """A record as the device gives it (with its dictionary lines), or None when it is not
    one (a damaged line in a snapshot's file)."""
    first, *rest = text.split("\n")
    prefix, sep, message = first.partition(";")
    fields = prefix.split(",")
    if not sep or len(fields) < 4:
        return None
    try:
        priority, sequence, usec = int(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        return None
    if not (0 <= priority <= U64_MAX and 0 <= sequence <= U64_MAX and 0 <= usec <= U64_MAX):
        return None
    dictionary: dict[str, str] = {}
    for line in rest:
        key, eq, value = line.strip().partition("=")
        if eq and key:
            dictionary[key] = value
    return KmsgRecord(priority >> 3, priority & 7, sequence, usec, fields[3], message, dictionary)


def since_boot(boot: datetime | None, usec: int) -> datetime | None:
    """The time `usec` microseconds after the boot; None when the boot is unknown or the
    time lies past any calendar (a forged stamp)."""
    if boot is None:
        return None
    try:
        return boot + timedelta(microseconds=usec)
    except OverflowError:
        return None


class SeenRecords:
    """The records read so far, by fingerprint (sequence number, stamp, facility, level and
    message), the most recent `limit` of them: a record read again (a snapshot's file read
    again from its start) is known; another record under a number already read (a forged
    or damaged one) is not hidden by it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._order: deque[int] = deque()
        self._set: set[int] = set()

    def add(self, record: KmsgRecord) -> bool:
        """Note a record; False when it was read before."""
        mark = hash((record.sequence, record.usec, record.facility, record.level, record.message))
        if mark in self._set:
            return False
        self._set.add(mark)
        self._order.append(mark)
        if len(self._order) > self.limit:
            self._set.discard(self._order.popleft())
        return True

    def __len__(self) -> int:
        return len(self._order)


@dataclass
class KmsgView:
    """What a `KmsgLog` holds after a read: whether the device could be read (`error` None),
    the first record it kept (sequence and microseconds since boot: "since when"), how many
    records it kept, and how many it lost (overwritten in the ring before they were read, or
    dropped past its bound)."""

    error: str | None
    first_sequence: int | None
    first_usec: int | None
    records: int
    lost: int


class KmsgLog:
    """Follows `/dev/kmsg` without re-reading: each read takes only the records that arrived
    since the last, and keeps every kernel record (at most `max_records`, the oldest dropped
    first). Thread-safe."""

    def __init__(self, reader: KmsgReader, max_records: int = 65_536) -> None:
        self.max_records = max_records
        self.reader = reader
        self._records: deque[KmsgRecord] = deque(maxlen=max_records)
        self._seen = SeenRecords(max_records + SEEN_SLACK)
        self._last: int | None = None
        self._first: KmsgRecord | None = None
        self._kept = 0
        self._lost = 0
        self._error: str | None = None
        self._lock = threading.Lock()

    def read(self) -> KmsgView:
        """Read what arrived; the ring's state."""
        with self._lock:
            self._take()
            return self._view()

    def follow(self) -> list[KmsgRecord]:
        """The kernel records that arrived since the last read (kept, too)."""
        with self._lock:
            return self._take()

    def kept_since(self, count: int) -> tuple[list[KmsgRecord], KmsgView]:
        """Read what arrived; the kept records after the first `count` ever kept (those
        still kept, oldest first) and the ring's state (its `records`: how many were ever
        kept, the next call's `count`)."""
        with self._lock:
            self._take()
            missing = min(self._kept - count, len(self._records))
            new = [self._records[i] for i in range(-missing, 0)] if missing > 0 else []
            return new, self._view()

    def kept(self) -> list[KmsgRecord]:
        """Every kernel record kept, oldest first."""
        with self._lock:
            return list(self._records)

    def _view(self) -> KmsgView:
        first = self._first
        return KmsgView(
            self._error,
            first.sequence if first else None,
            first.usec if first else None,
            self._kept,
            self._lost,
        )

    def _take(self) -> list[KmsgRecord]:
        new: list[KmsgRecord] = []
        for _ in range(MAX_READS):
            batch = self.reader.read()
            self._error = batch.error
            for text in batch.records:
                record = parse_record(text)
                if record is not None and self._fresh(record):
                    self._keep(record, new)
            if batch.overruns and self._last is None:
                self._lost += batch.overruns  # an overrun before the first record: count unknown
            if not batch.more:
                break
        return new

    def _fresh(self, record: KmsgRecord) -> bool:
        """Whether a record is new (not read before), counting the gap before it as lost
        when it jumps ahead of the last one read by a plausible count."""
        if not self._seen.add(record):
            return False
        if self._last is not None and self._last + 1 < record.sequence <= self._last + MAX_GAP:
            self._lost += record.sequence - self._last - 1  # overwritten in the ring
        if self._last is None or record.sequence > self._last:
            self._last = record.sequence
        return True

    def _keep(self, record: KmsgRecord, new: list[KmsgRecord]) -> None:
        if not record.kernel:
            return
        if self._first is None:
            self._first = record
        if len(self._records) == self._records.maxlen:
            self._lost += 1
        self._records.append(record)
        self._kept += 1
        new.append(record)
