"""Following the kernel log as it grows: the new lines of the log files and the new records of
`/dev/kmsg`, each read once, for the daemon's event path.

The files are followed by position: a file whose inode changed (rotated: `kern.log` renamed to
`kern.log.1` and a new one created) is read from its start, one that shrank (truncated,
`copytruncate`) from its start too. `/dev/kmsg` is followed by sequence number
(`gpuprobe.gpu.kmsg`). What is already there when following starts is not given: the checks'
own rounds read it.

`wait` blocks until something may have arrived: on the live device's descriptor (readable when
the kernel logged a record), on an inotify watch of the logs' directories (a write, a rotation),
and on a caller's descriptor (to be woken for shutdown), with a timeout; where inotify cannot be
had it returns after `poll_seconds` and the files are looked at again (a stat each).
"""

from __future__ import annotations

import os
import select
from collections.abc import Sequence
from dataclasses import dataclass

from gpuprobe.gpu.kmsg import KmsgLog
from gpuprobe.host.fs import HostFS
from gpuprobe.host.inotify import Inotify, open_inotify
from gpuprobe.host.kmsg import KMSG, KmsgReader

# The most of a followed file read in one go (a burst of lines; the rest comes next time).
MAX_READ_BYTES = 4 * 1024 * 1024
# Without inotify, how often the files are looked at (the 2 s target of the event path).
POLL_SECONDS = 1.0
# With inotify, still look this often (a watch can miss what a remote filesystem did).
SAFETY_POLL_SECONDS = 30.0


@dataclass
class _Position:
    inode: tuple[int, int] | None = None
    offset: int = 0


class KernelLogFollower:
    """The log files `paths` (host paths) and, when `kmsg`, `/dev/kmsg`, followed from now."""

    def __init__(self, fs: HostFS, paths: Sequence[str], kmsg: bool) -> None:
        self.fs = fs
        self.paths = list(dict.fromkeys(paths))
        self._positions = {path: _Position() for path in self.paths}
        self._kmsg = KmsgLog(KmsgReader(fs), max_records=1024) if kmsg else None
        self._inotify: Inotify | None = None
        self.watching = False

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
            if self._kmsg is not None and self._kmsg.reader.fileno() is None:
                directories.add(os.path.dirname(KMSG))  # a snapshot's file, not the device
            watched = [self._inotify.watch(str(self._real(d))) for d in sorted(directories)]
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

    def new_lines(self) -> list[str]:
        """The lines logged since the last call: the files' new lines, then the new kernel
        records' messages."""
        lines: list[str] = []
        for path in self.paths:
            lines += self._read_file(path)
        if self._kmsg is not None:
            lines += [r.message for r in self._kmsg.follow()]
        return lines

    def close(self) -> None:
        """Release the watches and the device."""
        if self._inotify is not None:
            self._inotify.close()
        if self._kmsg is not None:
            self._kmsg.reader.close()

    def _kmsg_fd(self) -> int | None:
        return self._kmsg.reader.fileno() if self._kmsg is not None else None

    def _real(self, path: str) -> str:
        return str(self.fs.root / path.lstrip("/"))

    def _stat(self, path: str) -> os.stat_result | None:
        try:
            return os.stat(self._real(path))
        except OSError:
            return None

    def _read_file(self, path: str) -> list[str]:
        position = self._positions[path]
        try:
            with open(self._real(path), "rb", opener=_nonblocking) as f:
                st = os.fstat(f.fileno())
                inode = (st.st_dev, st.st_ino)
                if inode != position.inode or st.st_size < position.offset:
                    position.inode, position.offset = inode, 0  # rotated or truncated
                if st.st_size == position.offset:
                    return []
                f.seek(position.offset)
                data = f.read(MAX_READ_BYTES)
        except OSError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []  # a line being written: next time
        position.offset += end + 1
        return data[:end].decode("utf-8", errors="replace").split("\n")


def _nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NONBLOCK)
