"""The kernel's records from the host's systemd journal, as kernel-journal records.

Each JSON object journalctl gives (`gpuprobe.host.journald`) is one record: its `MESSAGE` (a
string, or the list of its bytes where they are not UTF-8), its time from the record's own
`__REALTIME_TIMESTAMP` (microseconds since the epoch) and `__MONOTONIC_TIMESTAMP`
(microseconds since boot), its boot (`_BOOT_ID`) and its cursor (`__CURSOR`, which journalctl
takes back with `--after-cursor`). Only the kernel's records are asked for (`_TRANSPORT=kernel`:
no process can log a record that reads as the kernel's).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpuprobe.gpu import kernel_events
from gpuprobe.gpu.journal.record import Entry, LogRecord
from gpuprobe.host.fs import HostFS
from gpuprobe.host.journald import JOURNAL_DIRS, read_kernel

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class JournaldBoot:
    """One boot's kernel records in the journal directories that could be read (after a
    cursor when one was given), oldest first, the last one's cursor, and each directory's
    error (None where it was read)."""

    records: list[LogRecord]
    cursor: str | None
    errors: dict[str, str | None]


def read_boot(
    fs: HostFS,
    boot_id: str,
    *,
    after_cursor: str | None = None,
    directories: tuple[str, ...] = JOURNAL_DIRS,
) -> JournaldBoot:
    """Boot `boot_id`'s kernel records in the journal, after `after_cursor` when given."""
    records: dict[str, LogRecord] = {}  # by cursor: an entry in both journals once
    errors: dict[str, str | None] = {}
    for directory in directories:
        read = read_kernel(fs, directory, boot_id=boot_id, after_cursor=after_cursor)
        errors[directory] = read.error
        for fields in read.records:
            record = record_of(fields)
            if record is not None and record.cursor is not None:
                records.setdefault(record.cursor, record)
    ordered = sorted(records.values(), key=lambda r: r.usec if r.usec is not None else -1)
    cursor = ordered[-1].cursor if ordered else after_cursor
    return JournaldBoot(ordered, cursor, errors)


def record_of(fields: dict[str, object]) -> LogRecord | None:
    """One journal entry as a record; None when it has no message."""
    message = _text(fields.get("MESSAGE"))
    if message is None:
        return None
    realtime = _number(fields.get("__REALTIME_TIMESTAMP"))
    time = None
    if realtime is not None:
        try:
            time = EPOCH + timedelta(microseconds=realtime)
        except OverflowError:
            time = None
    cursor = fields.get("__CURSOR")
    boot = fields.get("_BOOT_ID")
    return LogRecord(
        message,
        time=time,
        zoned=time is not None,
        usec=_number(fields.get("__MONOTONIC_TIMESTAMP")),
        boot_id=boot if isinstance(boot, str) else None,
        cursor=cursor if isinstance(cursor, str) else None,
    )


def _text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value).decode("utf-8", errors="replace")
    return None


def _number(value: object) -> int | None:
    if isinstance(value, str) and value.isdigit() and len(value) <= 20:
        return int(value)
    return None


class JournaldJournal:
    """The host's journal followed by cursor: each read asks journalctl only for the records
    after the last one it kept (the whole boot the first time, and again when the boot id
    changed), parses each once (`gpu.kernel_events.entry_of`) and keeps at most
    `max_records` of the boot with their events. Thread-safe."""

    def __init__(self, fs: HostFS, max_records: int = 65_536) -> None:
        self.fs = fs
        self._entries: deque[Entry] = deque(maxlen=max_records)
        self._boot_id: str | None = None
        self._cursor: str | None = None
        self._lock = threading.Lock()

    def this_boot(self, boot_id: str) -> tuple[list[Entry], dict[str, str | None]]:
        """Every kept record of boot `boot_id` (the new ones read now), and each journal
        directory's error of this read (None where it was read)."""
        with self._lock:
            if boot_id != self._boot_id:
                self._entries.clear()
                self._boot_id, self._cursor = boot_id, None
            read = read_boot(self.fs, boot_id, after_cursor=self._cursor)
            self._entries.extend(kernel_events.entry_of(record) for record in read.records)
            self._cursor = read.cursor
            return list(self._entries), read.errors
