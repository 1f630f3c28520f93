"""The host's kernel log files as kernel-journal records: each log's last bytes, each line read
and parsed once while the agent lives.

A log file is first read from its last `max_bytes` by whole lines, lines longer than any kernel
line passed over and counted (`gpu.log_tail`); the rotated files of one log (`kern.log.1`,
`kern.log`) are one stream, oldest first (`rotation_streams`). A line a parser may read is made
a `LogRecord` whose stamp, zone and tag are read when first asked for (`gpu.journal.syslog`);
the runs of lines between are kept as text (`gpu.kernel_events.items_of`); a file's boots are
told by its boot lines (the vendors' folds). Every path is resolved inside the root as a chroot
would (`HostFS.tree`); a device or FIFO in a log's place is no log.

`LogFiles` keeps each file's reads by its inode with a cursor (the offset past the last whole
line taken), so a long-lived agent reads and parses only what was written since its last
read: a file that grew is read from its cursor; one renamed by a rotation (`kern.log` become
`kern.log.1`) keeps what was read of it under its new name; one that shrank (`copytruncate`),
or grew by more than `max_bytes` since, is read afresh from its end. What is kept is the reads
that reach into the file's last `max_bytes` (a read is kept or let go whole, so a kept window
holds between `max_bytes` and about twice it), each run of lines no parser reads cut to its
first and last line as it is read (a fold asks a run only for its times, which grow along a
log), a chunk of lines at a time: a read holds its bytes and one chunk's lines at once. A
last line without its newline is a line being written (rsyslog's file writer writes its
buffer out whenever it fills, mid-line: omfile's `ioBufferSize`, 4 KiB by default): it is
read once it has ended, never as the part written so far (`...): 7` of an XID 79 is no
XID 7).
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import BinaryIO

from gpuprobe.gpu import kernel_events, log_tail
from gpuprobe.gpu.journal.record import Entry, Item, LogRecord, Span
from gpuprobe.gpu.log_tail import MAX_LINE_BYTES, MAX_SCAN_BYTES, longest_line
from gpuprobe.host.fs import HostFS

# A file is (st_dev, st_ino).
Inode = tuple[int, int]
# The most entries kept for the next `follow` (a round's reads between two of its calls).
UNFOLLOWED = 65_536
# A read's lines are made items this many bytes at a time (to the next newline).
CHUNK_BYTES = 1024 * 1024
# Since when a log holds records: the first stamped line among its first lines.
FIRST_LINES = 100


@dataclass(frozen=True)
class LogRead:
    """One file's read: its host path, its items (oldest first: an entry made of each line a
    parser reads, the runs of lines between as spans, `gpu.kernel_events.items_of`), since
    when it holds records (its first stamped line's time; None when unknown) and how many of
    its lines were passed over as too long to be the kernel's."""

    path: str
    items: list[Item]
    since: datetime | None
    lost: int


@dataclass
class _Piece:
    """One read's whole lines of a file: where they begin in it, their items, how many lines
    among them were passed over as too long, and the time of the first stamped line among
    its first 100."""

    start: int
    items: list[Item]
    lost: int = 0
    since: datetime | None = None


@dataclass
class _Kept:
    """What is kept of one file: its reads, oldest first; the offset past the last whole line
    taken (`end`); whether that is inside a line too long to be the kernel's (`skipping`: it
    is passed over to its newline)."""

    end: int
    pieces: deque[_Piece] = field(default_factory=deque)
    skipping: bool = False


class LogFiles:
    """The host's kernel log files, each followed by its cursor (see the module's docstring).
    Thread-safe."""

    def __init__(self) -> None:
        self._kept: dict[Inode, _Kept] = {}
        self._lock = threading.Lock()
        # Once followed, what any read found new and `follow` has not given yet (a round's
        # read must not take a line from the event path), and the lines passed over.
        self._following = False
        self._unfollowed: deque[Entry] = deque(maxlen=UNFOLLOWED)
        self._unfollowed_lost = 0

    def read(
        self, fs: HostFS, paths: Iterable[str], max_bytes: int, now: datetime
    ) -> list[list[LogRead]]:
        """Each log's rotated files that could be read (`rotation_streams`, oldest first),
        each as its last `max_bytes`, their syslog stamps read as of `now`: what was kept of
        it and what was written to it since. The files this read did not find are let go."""
        with self._lock:
            return [[r for r, _ in group] for group in self._read_all(fs, paths, max_bytes, now)]

    def follow(
        self, fs: HostFS, paths: Iterable[str], max_bytes: int, now: datetime
    ) -> tuple[list[Entry], int]:
        """The entries of the lines written to the files since the last `follow` that a parser
        read (those of a file read afresh: its last `max_bytes`), whoever read them first,
        and how many new lines were passed over as too long to be the kernel's."""
        with self._lock:
            self._following = True
            self._read_all(fs, paths, max_bytes, now)
            entries, lost = list(self._unfollowed), self._unfollowed_lost
            self._unfollowed.clear()
            self._unfollowed_lost = 0
            return entries, lost

    def inodes(self) -> list[Inode]:
        """The files kept."""
        with self._lock:
            return list(self._kept)

    def _read_all(
        self, fs: HostFS, paths: Iterable[str], max_bytes: int, now: datetime
    ) -> list[list[tuple[LogRead, _Piece]]]:
        found: set[Inode] = set()
        streams = []
        for group in rotation_streams(paths):
            reads = [self._read(fs, path, max_bytes, now, found) for path in group]
            streams.append([read for read in reads if read is not None])
            for _, new in streams[-1] if self._following else ():
                self._unfollowed.extend(i for i in new.items if isinstance(i, Entry) and i.kinds)
                self._unfollowed_lost += new.lost
        for inode in [i for i in self._kept if i not in found]:
            del self._kept[inode]
        return streams

    def _read(
        self, fs: HostFS, path: str, max_bytes: int, now: datetime, found: set[Inode]
    ) -> tuple[LogRead, _Piece] | None:
        """A file's read, and its new whole lines (their items, and those passed over)."""
        try:
            with fs.open_binary(path) as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    return None  # a device or FIFO in a log's place (/dev/zero): no log
                inode = (st.st_dev, st.st_ino)
                found.add(inode)
                kept = self._kept.get(inode)
                if kept is None or st.st_size < kept.end or st.st_size - kept.end > max_bytes:
                    kept = _afresh(f, st.st_size, max_bytes, now)
                    self._kept[inode] = kept
                    new = kept.pieces[0]
                else:
                    new = _catch_up(f, kept, st.st_size, now)
        except OSError:
            return None
        while len(kept.pieces) > 1 and kept.pieces[1].start <= kept.end - max_bytes:
            kept.pieces.popleft()  # the later reads reach back `max_bytes` without it
        items = [item for piece in kept.pieces for item in piece.items]
        lost = sum(piece.lost for piece in kept.pieces)
        return LogRead(path, items, kept.pieces[0].since if kept.pieces else None, lost), new


def _afresh(f: BinaryIO, size: int, max_bytes: int, now: datetime) -> _Kept:
    """A file read from its end: its last `max_bytes` by whole lines (`gpu.log_tail`)."""
    tail = log_tail.read_tail(f, max_bytes, MAX_LINE_BYTES, MAX_SCAN_BYTES)
    data = tail.data
    ended = size == 0 or _byte_at(f, size - 1) == b"\n"
    if ended or not data or data.endswith(b"\n"):
        # every line ended, or the one not ended is too long to be held (passed over)
        whole, end, skipping = data, size, not ended
    else:  # the last line is being written: read once it has ended
        cut = data.rfind(b"\n") + 1
        whole, end, skipping = data[:cut], size - len(data) + cut, False
    piece = _piece(end - len(whole), whole, now, tail.skipped)
    return _Kept(end, deque([piece]), skipping)


def _catch_up(f: BinaryIO, kept: _Kept, size: int, now: datetime) -> _Piece:
    """Take the whole lines written to a kept file since its cursor (the caller reads a file
    that grew by more than `max_bytes` afresh) as a new read, and give it."""
    f.seek(kept.end)
    data = f.read(size - kept.end)
    start = 0
    if kept.skipping:  # the rest of a line too long to be the kernel's: up to its newline
        start = data.find(b"\n") + 1
        if start == 0:
            kept.end += len(data)
            return _Piece(kept.end, [])
        kept.skipping = False
    cut = max(data.rfind(b"\n") + 1, start)
    whole, taken, lost = data[start:cut], cut, 0
    if len(data) - cut > MAX_LINE_BYTES:  # a line past any kernel line's length, not ended
        kept.skipping, taken, lost = True, len(data), 1
    if longest_line(whole) > MAX_LINE_BYTES:
        raw = whole.split(b"\n")
        short = [line for line in raw if len(line) <= MAX_LINE_BYTES]
        lost += len(raw) - len(short)
        whole = b"\n".join(short)
    piece = _piece(kept.end + start, whole, now, lost)
    if piece.items or piece.lost:
        kept.pieces.append(piece)
    kept.end += taken
    return piece


def _piece(start: int, data: bytes, now: datetime, lost: int) -> _Piece:
    """A read of whole lines made items a chunk of lines at a time (what a read holds at once
    is its bytes and one chunk's lines), each run of lines no parser reads cut to its first
    and last line as it is made."""
    piece = _Piece(start, [], lost)
    seen = 0  # lines looked at for the first stamp
    at = 0
    while at < len(data):
        cut = data.find(b"\n", at + CHUNK_BYTES)
        end = len(data) if cut < 0 else cut + 1
        lines = data[at:end].decode("utf-8", errors="replace").splitlines()
        at = end
        for line in lines[: max(0, FIRST_LINES - seen)] if piece.since is None else ():
            piece.since = LogRecord.of_line(line, now).time
            if piece.since is not None:
                break
        seen += len(lines)
        piece.items += [_cut(item) for item in kernel_events.items_of(lines, now)]
    return piece


def _cut(item: Item) -> Item:
    """An item as kept: a span cut to its first and last line."""
    if isinstance(item, Span) and len(item.lines) > 2:
        return Span([item.lines[0], item.lines[-1]], item.now)
    return item


def _byte_at(f: BinaryIO, offset: int) -> bytes:
    f.seek(offset)
    return f.read(1)


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
