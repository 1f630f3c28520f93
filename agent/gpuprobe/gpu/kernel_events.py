"""The kinds of kernel-log event the vendors' parsers read, the mark each kind's lines bear,
and the parsers themselves, each run once on each record.

Each parser declares its kinds (`EVENTS`: kind → the text every line of that kind holds) and
reads one record into its own typed event (`event_of`): NVIDIA's driver lines
(`gpuprobe.gpu.kernel_log`: XIDs, XID-less faults, GPUs' UUIDs: all `NVRM: `; SXids; the
kernel's boot line), amdgpu's (`gpuprobe.gpu.amd.faults`), PCIe AER's (`gpuprobe.gpu.aer`).
`PARSERS` registers them; `entry_of` runs each once on a record (the kernel journal keeps the
entry, `gpu.journal`) with the kinds of event the record is; the event path subscribes by kind
(`Entry.kinds`; `markers` for the follower's cheap test of a file's bytes) instead of keeping
its own copy of the texts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from gpuprobe.gpu import aer, kernel_log
from gpuprobe.gpu.amd import faults
from gpuprobe.gpu.journal.record import Entry, Item, LogRecord, Span

# Every parser of kernel lines, by vendor: each module's EVENTS and event_of.
PARSERS = (kernel_log, faults, aer)
EVENTS: dict[str, str] = {kind: mark for parser in PARSERS for kind, mark in parser.EVENTS.items()}
READERS: tuple[Callable[[LogRecord], object | None], ...] = tuple(
    parser.event_of for parser in PARSERS
)
# Every parser's cheap test in one: a line matching none is one no parser reads.
_READ_BY_ANY = re.compile(
    "|".join(re.escape(m) for m in dict.fromkeys(m for p in PARSERS for m in p.PREFILTER))
)
# How many of a file's lines `items_of` tests at once.
_BLOCK = 256
# Each parser's kinds and their marks, in READERS' order.
_KINDS: tuple[tuple[tuple[str, str], ...], ...] = tuple(
    tuple(parser.EVENTS.items()) for parser in PARSERS
)


def entry_of(record: LogRecord) -> Entry:
    """The record with the events every registered parser makes of it (each run once) and
    the kinds of event it is."""
    events = []
    kinds: set[str] = set()
    for read, marks in zip(READERS, _KINDS, strict=True):
        event = read(record)
        if event is not None:
            events.append(event)
            kinds.update(kind for kind, mark in marks if mark in record.text)
    if not events:
        return Entry(record)
    return Entry(record, tuple(events), frozenset(kinds))


def markers(kinds: Iterable[str]) -> tuple[str, ...]:
    """The texts the lines of `kinds` bear (raises KeyError for a kind no parser reads)."""
    return tuple(dict.fromkeys(EVENTS[kind] for kind in kinds))


def items_of(lines: Sequence[str], now: datetime) -> list[Item]:
    """A log file's lines as stream items: an entry for each line a parser may read (made
    and parsed once), the runs of lines between them kept as spans of text. Lines are tested
    a block at a time first (one scan of the block's text): a log is mostly lines no parser
    reads."""
    items: list[Item] = []
    run: list[str] = []
    search = _READ_BY_ANY.search
    for start in range(0, len(lines), _BLOCK):
        block = lines[start : start + _BLOCK]
        if search("\n".join(block)) is None:
            run += block
            continue
        for line in block:
            if search(line) is None:
                run.append(line)
                continue
            if run:
                items.append(Span(run, now))
                run = []
            items.append(entry_of(LogRecord.of_line(line, now)))
    if run:
        items.append(Span(run, now))
    return items
