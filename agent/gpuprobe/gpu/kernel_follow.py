"""Following the kernel log as it grows: the new lines of the log files and the new records of
`/dev/kmsg`, each read once, for the daemon's event path.

The files are followed by position: a file whose inode changed (rotated: `kern.log` renamed to
`kern.log.1` and a new one created) is read from its start, one that shrank (truncated,
`copytruncate`) from its start too. `/dev/kmsg` is followed by sequence number
(`gpuprobe.gpu.kmsg`) through the host's kernel journal (`kernel_sources.kernel_journal`), so
a record the follower takes is parsed once and kept, with its events, for the checks' rounds,
never read from the device twice.
What is already there when following starts is not given: the checks' own rounds read it.
Every path is resolved inside the root as a chroot would (`HostFS.tree`).

A burst is read to its end before waiting again (`behind`: `wait` returns at once), so the line
after a burst of megabytes is given within the same wake-up. What one read takes is bounded
(`READ_BYTES`), and so is a line: one longer than `MAX_LINE_BYTES` (no kernel line is; a
program writing a 100 MB "line") is passed over to its end without being held, counted in
`lost`, and following goes on after it. Only the kernel's lines are given (a syslog file's
other programs' lines are not, `kernel_log.is_kernel_line`).

`wait` blocks until something may have arrived: on the live device's descriptor (readable when
the kernel logged a record), on an inotify watch of the logs' directories (a write, a rotation),
and on a caller's descriptor (to be woken for shutdown), with a timeout; where inotify cannot be
had it returns after `poll_seconds` and the files are looked at again (a stat each).
"""

from __future__ import annotations

import os
import select
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from gpuprobe.gpu.journal.journal import KernelJournal
from gpuprobe.gpu.journal.record import Entry, LogRecord
from gpuprobe.gpu.kernel_events import entry_of
from gpuprobe.gpu.kernel_log import is_kernel_line
from gpuprobe.gpu.log_tail import MAX_LINE_BYTES
from gpuprobe.host.fs import HostFS
from gpuprobe.host.inotify import Inotify, open_inotify
from gpuprobe.host.kmsg import KMSG

# The most of a followed file read in one go (the rest of a burst comes in the next go).
READ_BYTES = 4 * 1024 * 1024
# The most of the files read in one `new_lines` call: past it the caller is `behind` and calls
# again without waiting (a burst never holds the lines after it for a wait).
MAX_CALL_BYTES = 16 * 1024 * 1024
# Without inotify, how often the files are looked at (the 2 s target of the event path).
POLL_SECONDS = 1.0
# With inotify, still look this often (a watch can miss what a remote filesystem did).
SAFETY_POLL_SECONDS = 30.0


@dataclass
class _Position:
    inode: tuple[int, int] | None = None
    offset: int = 0
    skipping: bool = False  # inside a line longer than MAX_LINE_BYTES


class KernelLogFollower:
    """The log files `paths` (host paths) and, given the host's followed `/dev/kmsg`, its
    records, followed from now;
    with `markers`, only the files' lines holding one of them are given (a burst of others
    is passed over without being decoded)."""

    def __init__(
        self,
        fs: HostFS,
        paths: Sequence[str],
        kmsg: KernelJournal | None,
        markers: Sequence[str] = (),
    ) -> None:
        self.fs = fs
        self.markers = tuple(m.encode() for m in markers)
        self.paths = list(dict.fromkeys(paths))
        self._positions = {path: _Position() for path in self.paths}
        # The host's kernel journal (`kernel_sources.kernel_journal`): what the
        # follower takes is kept there for the checks' rounds, read once.
        self._kmsg = kmsg
        self._inotify: Inotify | None = None
        self.watching = False
        # Whether the last `new_lines` stopped with more to read (a burst): read on at once.
        self.behind = False
        # Lines passed over since following began (longer than any kernel line).
        self.lost = 0

    def start(self) -> None:
        """Skip what is there now, and set up the watches."""
        for path in self.paths:
            st = self._stat(path)
            if st is not None:
                self._positions[path] = _Position((st.st_dev, st.st_ino), st.st_size)
        if self._kmsg is not None:
            self._kmsg.follow()  # this boot's records so far: the rounds read those
        self._inotify = open_inotify()
        if self._inotify is not None:
            directories = {os.path.dirname(p) for p in self.paths}
            if self._kmsg is not None and self._kmsg.kmsg.reader.fileno() is None:
                directories.add(os.path.dirname(KMSG))  # a snapshot's file, not the device
            watched = [self._watch(d) for d in sorted(directories)]
            self.watching = any(watched)

    def wait(self, timeout: float, wake_fd: int | None = None) -> None:
        """Block until something may have arrived, `wake_fd` is readable, or `timeout`; at
        once while `behind`."""
        if self.behind:
            timeout = 0.0
        fds = [fd for fd in (wake_fd, self._kmsg_fd()) if fd is not None]
        if self._inotify is not None and self.watching:
            fds.append(self._inotify.fileno())
        else:
            timeout = min(timeout, POLL_SECONDS)
        try:
            readable, _, _ = select.select(fds, [], [], timeout)
        except (OSError, ValueError):
            return
        if self._inotify is not None and self._inotify.fileno() in readable:
            self._inotify.drain()

    def new_lines(self) -> list[str]:
        """The kernel's lines logged since the last call: the files' new lines, then the new
        kernel records' messages (at most MAX_CALL_BYTES of the files: `behind` says more
        is there)."""
        lines = self._file_lines()
        if self._kmsg is not None:
            lines += [entry.record.text for entry in self._kmsg.follow()]
        return lines

    def new_entries(self) -> list[Entry]:
        """What `new_lines` gives, as kernel-journal entries: each file line parsed once by
        every registered parser (its stamp read as of now), then the new `/dev/kmsg` records
        the journal parsed as they arrived."""
        now = datetime.now(UTC)
        entries = [entry_of(LogRecord.of_line(line, now)) for line in self._file_lines()]
        if self._kmsg is not None:
            entries += self._kmsg.follow()
        return entries

    def _file_lines(self) -> list[str]:
        lines: list[str] = []
        budget = MAX_CALL_BYTES
        self.behind = False
        for path in self.paths:
            while budget > 0:
                more, taken = self._read_file(path, lines)
                budget -= taken
                if not more:
                    break
            else:
                self.behind = True
        return lines

    def close(self) -> None:
        """Release the watches and the device."""
        if self._inotify is not None:
            self._inotify.close()
        if self._kmsg is not None:
            self._kmsg.kmsg.reader.close()

    def _kmsg_fd(self) -> int | None:
        return self._kmsg.kmsg.reader.fileno() if self._kmsg is not None else None

    def _watch(self, directory: str) -> bool:
        assert self._inotify is not None
        try:
            real = self.fs.tree.resolved(directory)
        except (OSError, ValueError):
            return False
        return self._inotify.watch(str(real))

    def _stat(self, path: str) -> os.stat_result | None:
        try:
            return self.fs.tree.stat(path)
        except (OSError, ValueError):
            return None

    def _read_file(self, path: str, lines: list[str]) -> tuple[bool, int]:
        """Add one read's whole kernel lines of a file to `lines`: whether more is there to
        read now, and how many bytes were read."""
        position = self._positions[path]
        try:
            fd = self.fs.tree.open_read(path)
        except (OSError, ValueError):
            return False, 0
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return False, 0  # a device or FIFO in a log's place: nothing to follow
            inode = (st.st_dev, st.st_ino)
            if inode != position.inode or st.st_size < position.offset:
                position.inode, position.offset = inode, 0  # rotated or truncated
                position.skipping = False
            if st.st_size == position.offset:
                return False, 0
            os.lseek(fd, position.offset, os.SEEK_SET)
            data = os.read(fd, READ_BYTES)
        except OSError:
            return False, 0
        finally:
            os.close(fd)
        more = len(data) == READ_BYTES
        start = 0
        if position.skipping:  # the rest of an over-long line: up to its newline
            start = data.find(b"\n") + 1
            if start == 0:
                position.offset += len(data)
                return more, len(data)
            position.skipping = False
        end = max(data.rfind(b"\n") + 1, start)
        if len(data) - end >= MAX_LINE_BYTES:  # a line past any kernel line's length
            self.lost += 1
            position.skipping = True
            position.offset += len(data)
        else:
            position.offset += end
        if end > start:
            lines += self._kernel_lines(data[start : end - 1])
        return more, len(data)

    def _kernel_lines(self, data: bytes) -> list[str]:
        """The kernel's lines among `data`'s lines that hold a marker (others', and lines
        past any kernel line's length, left out; the latter counted lost)."""
        if self.markers and not any(m in data for m in self.markers):
            self.lost += sum(1 for raw in data.split(b"\n") if len(raw) > MAX_LINE_BYTES)
            return []
        found: list[str] = []
        for raw in data.split(b"\n"):
            if len(raw) > MAX_LINE_BYTES:
                self.lost += 1
                continue
            if self.markers and not any(m in raw for m in self.markers):
                continue
            line = raw.decode("utf-8", errors="replace")
            if is_kernel_line(line):
                found.append(line)
        return found
