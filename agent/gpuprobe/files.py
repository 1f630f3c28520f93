"""Reading the files a user hands gpuprobe (its configuration, a snapshot's JSON): regular
files only, and only up to a size bound.

A FIFO would block the reader forever, a link to /dev/zero would grow it without end, and a
100 MB file named by mistake would take minutes to parse: each is refused with a reason
instead, before a byte is parsed.
"""

from __future__ import annotations

import os
import stat


class FileRefused(Exception):
    """The file is there but is not one gpuprobe reads (not regular, or too big)."""


def read_regular(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of the regular file at `path` (links followed), at most `max_bytes`.

    Raises FileNotFoundError when absent, OSError when unreadable, FileRefused when the path
    is not a regular file or holds more than `max_bytes`.
    """
    # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(f"not a regular file (a {_kind(st.st_mode)})")
        if st.st_size > max_bytes:
            raise FileRefused(f"larger than {max_bytes} bytes")
        chunks, size = [], 0
        while size <= max_bytes:  # read to the end, the file may have grown since fstat
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise FileRefused(f"larger than {max_bytes} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


# Deeper than any configuration, CDI spec or snapshot file is written (they nest a dozen levels
# at most). PyYAML's and tomllib's parsers recurse per level; deep enough, a RecursionError
# caught mid-way can turn into a fatal "Cannot recover from stack overflow": such a text is
# refused before it reaches them.
MAX_NESTING = 64


def nesting_depth(text: str) -> int:
    """An upper bound on how deep a YAML, JSON or TOML text nests: flow brackets (`[`, `{`,
    counted even inside strings, so never under) plus block levels (indentation, and `- `
    items opening on one line). Linear in the text."""
    deepest = flow = 0
    indents: list[int] = []
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if stripped and not stripped.startswith("#"):
            indent = len(line) - len(stripped)
            while indents and indents[-1] >= indent:
                indents.pop()
            indents.append(indent)
            dashes = 0
            while stripped.startswith("- ") or stripped == "-":
                dashes += 1
                stripped = stripped[2:].lstrip(" ")
            deepest = max(deepest, flow + len(indents) + dashes)
        for char in line:
            if char in "[{":
                flow += 1
                deepest = max(deepest, flow + len(indents))
            elif char in "]}" and flow:
                flow -= 1
    return deepest
