"""One record of the kernel log, as read once from its source, and the events parsed from it.

A record is what its source gave: `/dev/kmsg`'s and journald's the kernel's message with its
time from the record itself (the boot time plus its monotonic stamp; journald's realtime
stamp); a log file's its line, whose time is its syslog stamp (read once, when first asked,
for the lines a parser holds). The parsers read `text`, never a record printed back to text.

`Entry` is a record with the events every registered parser made of it (`gpu.kernel_events`):
made once when the record is read, kept with it, so a fold over a boot's records (the xid
check's XIDs, amdgpu's faults) runs no parser again. A log file's lines that no parser reads
are kept as a `Span` of text between the entries.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from gpuprobe.gpu.journal import syslog
from gpuprobe.gpu.kmsg import since_boot

T = TypeVar("T")
# A /dev/kmsg cursor: `kmsg;b=<boot id>;s=<sequence number>` (`gpu.journal.journal.Cursor`).
KMSG_CURSOR = "kmsg"


class LogRecord:
    """One kernel-log record: the text the parsers read, when it was written (`time`, None
    when unknown; `zoned` when that time carries its zone, so it can be held against the boot
    time), whether the kernel wrote it, its microseconds since boot (where the source gives
    them), its boot's id and its cursor (where the source gives them: journald's `__CURSOR`;
    a `/dev/kmsg` record's is made from its boot and sequence number when asked for)."""

    __slots__ = (
        "_boot",
        "_cursor",
        "_kernel",
        "_time",
        "_timed",
        "_zoned",
        "boot_id",
        "now",
        "sequence",
        "text",
        "usec",
    )

    def __init__(
        self,
        text: str,
        *,
        time: datetime | None = None,
        zoned: bool = False,
        kernel: bool = True,
        usec: int | None = None,
        boot_id: str | None = None,
        cursor: str | None = None,
    ) -> None:
        self.text = text
        self._time, self._zoned, self._kernel, self._timed = time, zoned, kernel, True
        self.usec, self.boot_id, self._cursor = usec, boot_id, cursor
        self.now: datetime | None = None
        self._boot: datetime | None = None
        self.sequence: int | None = None

    @classmethod
    def of_kmsg(
        cls, message: str, *, boot: datetime | None, usec: int, sequence: int, boot_id: str | None
    ) -> LogRecord:
        """A `/dev/kmsg` record: the kernel's message, its time the boot time plus its
        monotonic stamp (made when first asked for: most records no parser holds). Made
        without `__init__`'s defaults: a full ring makes 65,536 of them."""
        record = cls.__new__(cls)
        record.text, record.usec, record.boot_id, record.sequence = message, usec, boot_id, sequence
        record._boot, record._timed, record._kernel = boot, False, True
        record._time, record._zoned, record._cursor, record.now = None, False, None, None
        return record

    @property
    def cursor(self) -> str | None:
        """Where a reader stands after this record (`since`)."""
        if self._cursor is None and self.sequence is not None:
            self._cursor = f"{KMSG_CURSOR};b={self.boot_id or '-'};s={self.sequence}"
        return self._cursor

    @classmethod
    def of_line(cls, line: str, now: datetime) -> LogRecord:
        """A log file's line: its stamp, zone and tag read when first asked for (most lines
        of a log no parser holds)."""
        record = cls(line)
        record._timed, record.now = False, now
        return record

    def _read_stamp(self) -> None:
        if self._timed:
            return
        self._timed = True
        if self.now is None:  # a /dev/kmsg record: the kernel's, timed from the boot
            self._time = since_boot(self._boot, self.usec or 0)
            self._zoned = self._time is not None
            return
        self._time = syslog.line_time(self.text, now=self.now)
        self._zoned = syslog.zoned(self.text)
        self._kernel = syslog.is_kernel_line(self.text)

    @property
    def time(self) -> datetime | None:
        self._read_stamp()
        return self._time

    @property
    def zoned(self) -> bool:
        self._read_stamp()
        return self._zoned

    @property
    def kernel(self) -> bool:
        """Whether the kernel wrote it (a syslog file's other programs' lines are not)."""
        self._read_stamp()
        return self._kernel

    def __repr__(self) -> str:
        return f"LogRecord({self.text!r}, cursor={self.cursor!r})"


@dataclass(frozen=True, slots=True)
class Entry:
    """A record with the events the registered parsers made of it (each parser's own typed
    event; none when no parser reads the record) and the kinds of event it is (a kind whose
    parser read it and whose mark it bears: what the event path subscribes to)."""

    record: LogRecord
    events: tuple[object, ...] = ()
    kinds: frozenset[str] = frozenset()

    def event(self, kind: type[T]) -> T | None:
        """The record's event of one parser's type, or None."""
        for event in self.events:
            if isinstance(event, kind):
                return event
        return None

    def records(self) -> Iterator[LogRecord]:
        """The records this stands for: its own."""
        yield self.record


@dataclass(frozen=True, slots=True)
class Span:
    """A run of a log file's lines no registered parser reads (most of a log: they hold none
    of the parsers' cheap tests), kept as text: no record is made of them unless a fold needs
    their times (`records`: an amdgpu reset still open, waiting for the log to move on)."""

    lines: list[str]
    now: datetime
    events: tuple[object, ...] = ()
    kinds: frozenset[str] = frozenset()

    def event(self, kind: type[T]) -> T | None:
        """None: no parser reads these lines."""
        return None

    def records(self) -> Iterator[LogRecord]:
        """The lines as records, each made as it is reached."""
        for line in self.lines:
            yield LogRecord.of_line(line, self.now)


# One item of a log's stream: a record with its events, or a run of lines none reads.
Item = Entry | Span
