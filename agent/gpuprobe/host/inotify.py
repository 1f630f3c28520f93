"""Linux inotify through libc, for waiting on files without polling them.

The kernel-log follower waits on the directories of the logs it follows (`/var/log`, a
snapshot's `rootfs/var/log`): a directory watch sees a file written, created, renamed in or
out (a rotation), whatever its inode, so it outlives the files it covers. `open_inotify`
returns None where inotify cannot be had (no libc symbol, the instances limit reached); the
caller then falls back to a low-rate stat poll.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from collections.abc import Iterable

IN_MODIFY = 0x00000002
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
# What a followed log's directory is watched for: a write, and a rotation or replacement.
LOG_EVENTS = IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (struct inotify_event)


class Inotify:
    """One inotify instance watching directories; `fileno()` is readable when something
    happened in one of them. Closed with `close()`."""

    def __init__(self, fd: int, libc: ctypes.CDLL) -> None:
        self._fd = fd
        self._libc = libc
        self._names: dict[int, str] = {}

    def watch(self, directory: str, mask: int = LOG_EVENTS) -> bool:
        """Watch a directory; False when it cannot be watched (absent, unreadable)."""
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(directory), mask)
        if wd < 0:
            return False
        self._names[wd] = directory
        return True

    def fileno(self) -> int:
        """The descriptor to wait on (select/poll)."""
        return self._fd

    def drain(self) -> list[tuple[str, str]]:
        """The events queued so far, as (directory, file name); never blocks."""
        events: list[tuple[str, str]] = []
        while True:
            try:
                data = os.read(self._fd, 64 * 1024)
            except (BlockingIOError, InterruptedError):
                return events
            except OSError:
                return events
            if not data:
                return events
            events.extend(_parse(data, self._names))

    def close(self) -> None:
        """Release the instance and its watches."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _parse(data: bytes, names: dict[int, str]) -> Iterable[tuple[str, str]]:
    offset = 0
    while offset + _HEADER.size <= len(data):
        wd, _mask, _cookie, length = _HEADER.unpack_from(data, offset)
        start = offset + _HEADER.size
        name = data[start : start + length].split(b"\0", 1)[0]
        offset = start + length
        yield names.get(wd, ""), os.fsdecode(name)


def open_inotify() -> Inotify | None:
    """A new non-blocking inotify instance, or None where there is none to have."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        init = libc.inotify_init1
    except (OSError, AttributeError):
        return None
    fd = init(IN_NONBLOCK | IN_CLOEXEC)
    if fd < 0:
        return None
    return Inotify(fd, libc)
