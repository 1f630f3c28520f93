"""The host's kernel journal: `/dev/kmsg`'s records, each read once and parsed once, kept per
boot with cursors.

`/dev/kmsg` is read by the host's one followed ring (`gpu.kmsg.KmsgLog`, made in
`gpu.kernel_sources.followed_kmsg`); the journal takes each record the ring keeps once
(whoever made the ring read it: a check's round or the daemon's follower), makes it a
`LogRecord` (the kernel's message; its time the boot time plus its monotonic stamp; its cursor
`kmsg;b=<boot id>;s=<sequence number>`) and runs every registered parser on it once
(`gpu.kernel_events.entry_of`), keeping the `Entry`. A reader asks for `this_boot()` (every
record of the current boot still kept) or `since(cursor)` (the records after one it saw: a
cursor of an earlier boot gives the whole current boot); the daemon's event path asks
`follow()` for the records that arrived since it last asked, whoever read them first. A boot
id that changed (the host rebooted under a kept journal, a replay's next snapshot) starts a
new boot; the previous one is kept until the next change.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from datetime import datetime

from gpuprobe.gpu import kernel_events
from gpuprobe.gpu.journal.record import KMSG_CURSOR, Entry, LogRecord
from gpuprobe.gpu.kmsg import KmsgLog, KmsgRecord, KmsgView


@dataclass(frozen=True)
class Cursor:
    """Where a reader stands in `/dev/kmsg`: the boot, and the last record's sequence
    number (written by `LogRecord.cursor`)."""

    boot_id: str | None
    sequence: int

    @classmethod
    def parse(cls, text: str) -> Cursor | None:
        """A cursor as a record wrote it; None when it is not one."""
        kind, _, rest = text.partition(";")
        fields = dict(part.partition("=")[::2] for part in rest.split(";"))
        if kind != KMSG_CURSOR or "b" not in fields or not fields.get("s", "").isdigit():
            return None
        boot = fields["b"]
        return cls(None if boot == "-" else boot, int(fields["s"]))


@dataclass(frozen=True)
class JournalRead:
    """What one read of the journal's `/dev/kmsg` gave: the entries asked for, oldest first,
    the ring's state (whether it could be read, the first record kept, how many were kept and
    lost) and the cursor after the last record of this boot (None before any)."""

    entries: list[Entry]
    ring: KmsgView
    cursor: str | None


class KernelJournal:
    """This host's kernel journal over its followed `/dev/kmsg` (see the module's
    docstring). Thread-safe."""

    def __init__(self, kmsg: KmsgLog, *, boot: datetime | None, boot_id: str | None) -> None:
        self.kmsg = kmsg
        self._boot, self._boot_id = boot, boot_id
        self._entries: deque[Entry] = deque(maxlen=kmsg.max_records)
        self._previous: tuple[str | None, list[Entry]] | None = None
        self._made = 0  # how many of the ring's kept records were made entries
        self._view: KmsgView | None = None
        self._lock = threading.Lock()
        # Once followed, the records any read made that `follow` has not given yet (a round's
        # read must not take a record from the event path).
        self._following = False
        self._unfollowed: deque[Entry] = deque(maxlen=kmsg.max_records)

    def follow(self) -> list[Entry]:
        """The records that arrived since the last `follow`, whoever read them from the ring
        first (kept, too)."""
        with self._lock:
            self._following = True
            self._sync()
            new = list(self._unfollowed)
            self._unfollowed.clear()
            return new

    def this_boot(
        self, boot: datetime | None = None, boot_id: str | None = None, *, known: bool = False
    ) -> JournalRead:
        """Every kept record of the current boot. With `known`, `boot` and `boot_id` are the
        host's as read now (a changed boot id starts a new boot; a changed boot time re-times
        the kept records)."""
        with self._lock:
            if known:
                self._update(boot, boot_id)
            self._sync()
            return self._read(list(self._entries))

    def since(self, cursor: str | None) -> JournalRead:
        """The current boot's records after `cursor` (all of them when it is None, not one,
        or of another boot)."""
        with self._lock:
            self._sync()
            at = Cursor.parse(cursor) if cursor else None
            entries = list(self._entries)
            if at is not None and at.boot_id == self._boot_id:
                entries = [e for e in entries if _sequence(e) > at.sequence]
            return self._read(entries)

    def previous_boot(self) -> tuple[str | None, list[Entry]] | None:
        """The boot before the current one (its id and its records), when the journal saw
        the boot change."""
        with self._lock:
            return self._previous

    def _read(self, entries: list[Entry]) -> JournalRead:
        assert self._view is not None
        last = self._entries[-1].record.cursor if self._entries else None
        return JournalRead(entries, self._view, last)

    def _update(self, boot: datetime | None, boot_id: str | None) -> None:
        if boot_id != self._boot_id:
            # what the ring gives from now on is the new boot's (the old boot's ring is gone)
            self._previous = (self._boot_id, list(self._entries))
            self._entries.clear()
            self._boot, self._boot_id = boot, boot_id
        elif boot != self._boot:
            # the kept records made again, timed from the new boot time, by the next sync
            self._boot = boot
            self._made -= len(self._entries)
            self._entries.clear()

    def _sync(self) -> None:
        new, self._view = self.kmsg.kept_since(self._made)
        self._made = self._view.records
        made = [self._entry(record) for record in new]
        self._entries.extend(made)
        if self._following:
            self._unfollowed.extend(made)

    def _entry(self, record: KmsgRecord) -> Entry:
        made = LogRecord.of_kmsg(
            record.message,
            boot=self._boot,
            usec=record.usec,
            sequence=record.sequence,
            boot_id=self._boot_id,
        )
        return kernel_events.entry_of(made)


def _sequence(entry: Entry) -> int:
    sequence = entry.record.sequence
    return sequence if sequence is not None else -1
