"""Following the kernel log as it grows: the new records of `/dev/kmsg` and the new lines of
the log files, each read once, for the daemon's event path.

Both are followed through the host's kernel journal, which the checks' rounds read too:
`/dev/kmsg` by sequence number (`kernel_sources.kernel_journal`), the log files by their
cursors (`kernel_sources.followed_files`, `gpu.journal.files.LogFiles`: a file that grew read
from its cursor, one renamed by a rotation kept under its new name, one truncated, or grown by
more than `max_bytes` at once, read afresh from its end). A record the follower takes is
parsed once and kept, with its events, for the checks' rounds, never read twice; one a round
read first is given to the follower all the same (`follow`: what arrived since it last
asked). What is already there when following begins is not given: the checks' own rounds
read it. Every path is resolved inside the root as a chroot would (`HostFS.tree`).

What one call reads is bounded (a file's `max_bytes`, the kernel journal's ring), and so is a
line: one longer than `MAX_LINE_BYTES` (no kernel line is; a program writing a 100 MB "line")
is passed over to its end without being held, counted in `lost`, and following goes on after
it. Only the kernel's lines make events (the parsers read a syslog line's tag,
`LogRecord.kernel`).

`wait` blocks until something may have arrived: on the live device's descriptor (readable when
the kernel logged a record), on an inotify watch of the logs' directories (a write, a rotation),
and on a caller's descriptor (to be woken for shutdown), with a timeout; where inotify cannot be
had it returns after `poll_seconds` and the files are looked at again.
"""

from __future__ import annotations

import os
import select
from collections.abc import Sequence
from datetime import UTC, datetime

from gpuprobe.gpu.journal.files import LogFiles
from gpuprobe.gpu.journal.journal import KernelJournal
from gpuprobe.gpu.journal.record import Entry
from gpuprobe.host.fs import HostFS
from gpuprobe.host.inotify import Inotify, open_inotify
from gpuprobe.host.kmsg import KMSG

# Without inotify, how often the files are looked at (the 2 s target of the event path).
POLL_SECONDS = 1.0
# With inotify, still look this often (a watch can miss what a remote filesystem did).
SAFETY_POLL_SECONDS = 30.0
# How much of a file's end is read when it is read afresh (the xid check's default
# `kernel_log_max_bytes`).
MAX_BYTES = 16 * 1024 * 1024


class KernelLogFollower:
    """The log files `paths` (host paths) through the host's followed files (`files`) and,
    given the host's kernel journal, the records of its `/dev/kmsg`, followed from now."""

    def __init__(
        self,
        fs: HostFS,
        paths: Sequence[str],
        kmsg: KernelJournal | None,
        files: LogFiles,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.fs = fs
        self.paths = list(dict.fromkeys(paths))
        self.max_bytes = max_bytes
        # The host's followed files (`kernel_sources.followed_files`) and kernel journal
        # (`kernel_sources.kernel_journal`): what the follower takes is kept there for the
        # checks' rounds, read once.
        self._files = files
        self._kmsg = kmsg
        self._inotify: Inotify | None = None
        self.watching = False
        # Lines passed over since following began (longer than any kernel line).
        self.lost = 0

    def start(self) -> None:
        """Begin following (`begin`), and set up the watches (`watch`)."""
        self.begin()
        self.watch()

    def begin(self) -> None:
        """Take what is there now: the rounds read it; what comes after is given, whoever
        reads it first. Sets up no watch (`watch` does)."""
        self._files.follow(self.fs, self.paths, self.max_bytes, datetime.now(UTC))
        if self._kmsg is not None:
            self._kmsg.follow()  # this boot's records so far: the rounds read those

    def watch(self) -> None:
        """Set up the watches `wait` blocks on."""
        self._inotify = open_inotify()
        if self._inotify is not None:
            directories = {os.path.dirname(p) for p in self.paths}
            if self._kmsg is not None and self._kmsg.kmsg.reader.fileno() is None:
                directories.add(os.path.dirname(KMSG))  # a snapshot's file, not the device
            watched = [self._watch(d) for d in sorted(directories)]
            self.watching = any(watched)

    def wait(self, timeout: float, wake_fd: int | None = None) -> None:
        """Block until something may have arrived, `wake_fd` is readable, or `timeout`."""
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

    def new_entries(self) -> list[Entry]:
        """The kernel-journal entries of what was logged since the last call (or a round's
        read): the files' new lines that a parser reads (each parsed once, its stamp read as
        of now), then the new `/dev/kmsg` records."""
        entries, lost = self._files.follow(self.fs, self.paths, self.max_bytes, datetime.now(UTC))
        self.lost += lost
        if self._kmsg is not None:
            entries += self._kmsg.follow()
        return entries

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
