"""A log file's last lines, by size: what the kernel-log readers read of each file.

The last `max_bytes` of the file, without the partial line it starts with when cut. A line
longer than `max_line` is no kernel line (a program wrote a 100 MB "line" into syslog): it is
passed over without being held, counted (`skipped`), and the window reaches back past it for
lines to fill `max_bytes` (scanning at most `max_scan` bytes beyond it), so a line written
just before it is still read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import BinaryIO

# Bytes read from the file at a time when reading it backwards.
CHUNK_BYTES = 1024 * 1024
# A line longer than this is no kernel line (the kernel's are under 1 KiB; rsyslog's default
# maxMessageSize is 8 KiB, journald's LineMax 48 KiB).
MAX_LINE_BYTES = 64 * 1024
# How far back past the window's size over-long lines are scanned through at most.
MAX_SCAN_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Tail:
    """What was read of a log's end: whole lines (the text the readers read), the lines
    passed over as too long, and whether reading stopped at `max_scan` before the window was
    full (more of the log was not read)."""

    data: bytes
    skipped: int = 0
    cut: bool = False


def read_tail(f: BinaryIO, max_bytes: int, max_line: int, max_scan: int) -> Tail:
    """The log's last `max_bytes` by lines (see the module's docstring)."""
    size = f.seek(0, os.SEEK_END)
    start = max(0, size - max_bytes)
    f.seek(start)
    head = b""
    if size >= max_bytes:  # the window is cut: its first line is part of one
        head = f.readline(max_line + 1)
        ended = head.endswith(b"\n")
        if (ended and len(head) > max_line) or (not ended and len(head) >= max_line):
            # the window begins inside an over-long line: lines before it are read past it
            return _backwards(f, size, max_bytes, max_line, max_scan)
        if not ended:
            return Tail(b"")  # no newline in the window: not one whole line
    data = f.read(max_bytes - len(head))
    if longest_line(data) <= max_line:
        return Tail(data)  # the common case: the window as it is
    return _backwards(f, size, max_bytes, max_line, max_scan)


def longest_line(data: bytes) -> int:
    """The length of `data`'s longest line, measured a piece at a time (what is held at once
    is one piece's lines, not the whole window's)."""
    longest = at = 0
    while at < len(data):
        cut = data.find(b"\n", at + CHUNK_BYTES)
        end = len(data) if cut < 0 else cut
        longest = max(longest, max(map(len, data[at:end].split(b"\n"))))
        at = end + 1
    return longest


def _backwards(f: BinaryIO, size: int, max_bytes: int, max_line: int, max_scan: int) -> Tail:
    """Whole lines from the end, over-long ones passed over, until `max_bytes` are kept."""
    kept: list[bytes] = []  # newest first
    kept_bytes = skipped = scanned = 0
    frag = b""  # the end of the line being assembled (the part read so far)
    skipping = False  # the line being assembled is past `max_line`: not held
    pos = size
    ended = size > 0 and _byte_at(f, size - 1) == b"\n"
    if ended:
        pos -= 1  # the file's last newline ends its last line, not an empty one
    while pos > 0 and kept_bytes < max_bytes:
        if scanned >= max_bytes + max_scan:
            return Tail(_joined(kept, ended), skipped, cut=True)
        n = min(CHUNK_BYTES, pos)
        pos -= n
        f.seek(pos)
        chunk = f.read(n)
        scanned += n
        i = len(chunk)
        while True:
            j = chunk.rfind(b"\n", 0, i)
            piece = chunk[j + 1 : i]
            if not skipping:
                frag = piece + frag
                if len(frag) > max_line:
                    skipping, frag = True, b""
            if j < 0:
                break  # the line goes on before this chunk
            if skipping:
                skipped += 1
            else:
                kept.append(frag)
                kept_bytes += len(frag) + 1
            frag, skipping, i = b"", False, j
    if pos == 0 and kept_bytes < max_bytes:  # the file's first line, whole
        if skipping:
            skipped += 1
        elif frag:
            kept.append(frag)
    return Tail(_joined(kept, ended), skipped)


def _joined(kept: list[bytes], ended: bool) -> bytes:
    text = b"\n".join(reversed(kept))
    return text + b"\n" if ended and kept else text


def _byte_at(f: BinaryIO, offset: int) -> bytes:
    f.seek(offset)
    return f.read(1)
