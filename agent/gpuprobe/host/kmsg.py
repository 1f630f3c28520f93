"""`/dev/kmsg`, the kernel's log ring, read record by record through HostFS.

On the live node `/dev/kmsg` is a character device: each `read()` returns one record
(`<priority>,<sequence>,<microseconds since boot>,<flags>;<message>`, then its dictionary
lines, each beginning with a space), `EAGAIN` when no record is left (the device is opened
non-blocking), and `EPIPE` when records were overwritten in the ring before this reader got to
them: the kernel then moves the reader to the oldest record still there, and the next read
goes on from it (Documentation/ABI/testing/dev-kmsg). Each open has its own position, so one
reader follows the ring without re-reading what it read.

In a node snapshot, `rootfs/dev/kmsg` is a regular file holding the records one a line, as the
device gave them (continuation lines beginning with a space); it is read the same way, from
where the last read ended, so lines appended to it are the records that arrived since. A file
that shrank (truncated) or was replaced is read again from its start: the reader above drops
the records it already had by their sequence numbers.

The path is resolved inside the root as a chroot would (`HostFS.tree`, like every host path):
a snapshot's `rootfs/dev/kmsg` planted as a link out of the tree never reads the agent's own
files, and a character device there is read only when it is the kernel's log device (1:11,
not a `/dev/zero` linked in its place). What one read takes is bounded (`READ_BYTES`; `more`
says the rest is there for the next read): a device that never runs dry costs that much, no
more. A file line longer than the kernel's longest record is no record: it is skipped to its
end (`skipped`), and the lines after it are read.

`capture` keeps what the device gave (`recorded`), and writes it as the snapshot's file.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from dataclasses import dataclass, field

from gpuprobe.host.fs import HostFS

KMSG = "/dev/kmsg"
# The kernel's log device, char 1:11 (Documentation/admin-guide/devices.txt): any other
# character device found at the path (a link to /dev/zero) is not read.
KMSG_DEVICE = (1, 11)
# The kernel's longest record with its dictionary (CONSOLE_EXT_LOG_MAX): a smaller read buffer
# makes the device answer EINVAL.
RECORD_MAX = 8192
# Bytes one read takes at most, from the device or a file (the rest is left for the next
# read: the device keeps this reader's place, a file its offset). The kernel's largest ring
# (CONFIG_LOG_BUF_SHIFT 25) is 32 MiB: `gpuprobe.gpu.kmsg` reads it in a few goes.
READ_BYTES = 4 * 1024 * 1024
# Overruns (EPIPE) one read takes at most: the kernel answers one and moves the reader on.
MAX_OVERRUNS = 1024
# A file's line longer than this is no record (a record with its dictionary is at most
# RECORD_MAX; escaped, each byte may read as four): passed over, to its end.
RECORD_LINE_MAX = 4 * RECORD_MAX
# What `capture` keeps of the device at most (records, oldest dropped first).
MAX_RECORDED = 200_000


@dataclass
class KmsgBatch:
    """What one read gave: the records' raw text (as the device gave each, without its last
    newline), how many times the ring overran this reader since the last read (`EPIPE`), the
    error that stopped the read (None when it ran dry), whether it stopped at its bound with
    more to read, and how many over-long file lines it passed over."""

    records: list[str] = field(default_factory=list)
    overruns: int = 0
    error: str | None = None
    more: bool = False  # stopped at READ_BYTES: more is there to read now
    skipped: int = 0  # file lines longer than any record, passed over


class KmsgReader:
    """One reader of `/dev/kmsg` (the live device, or a snapshot's regular file), following it
    from where its last read ended. Thread-safe; `close()` releases the device."""

    def __init__(self, fs: HostFS, path: str = KMSG, *, record: bool = False) -> None:
        self.fs = fs
        self.path = path
        self._fd: int | None = None
        self._device: bool | None = None
        self._offset = 0
        self._inode: tuple[int, int] | None = None
        self._skipping = False  # inside a file line longer than any record
        self._lock = threading.Lock()
        self._recorded: list[str] | None = [] if record else None
        self.read_once = False  # whether a read ever succeeded (capture writes the file then)

    def read(self) -> KmsgBatch:
        """The records that arrived since the last read (all of this boot's the first time).
        An absent device or file gives `error` "absent"; one that cannot be opened, its
        errno name (`EPERM`: no CAP_SYSLOG and `kernel.dmesg_restrict` is 1)."""
        with self._lock:
            # Not noted in the HostFS's record: capture writes what this reader gave (a copy
            # of the device would read the ring once more, and a placeholder would read empty).
            fd = self._fd
            batch = self._read_device(fd) if fd is not None else self._open_and_read()
            if batch.error is None:
                self.read_once = True
            if self._recorded is not None:
                self._recorded.extend(batch.records)
                del self._recorded[:-MAX_RECORDED]
            return batch

    def _open_and_read(self) -> KmsgBatch:
        """Open the path inside the root and read it as what it is: the live device (kept
        open: it keeps this reader's place), or a file (opened again each read: it may have
        been replaced)."""
        try:
            fd = self.fs.tree.open_read(self.path)
        except FileNotFoundError:
            return KmsgBatch(error="absent")
        except (OSError, ValueError) as exc:
            return KmsgBatch(error=_name(exc) if isinstance(exc, OSError) else str(exc))
        try:
            st = os.fstat(fd)
            if stat.S_ISCHR(st.st_mode) and not self.fs.snapshot:
                device = (os.major(st.st_rdev), os.minor(st.st_rdev))
                if device != KMSG_DEVICE:  # /dev/zero planted as kmsg: never read
                    return KmsgBatch(
                        error=f"not the kernel's log device (char {device[0]}:{device[1]})"
                    )
                self._fd, self._device, fd = fd, True, -1
                return self._read_device(self._fd)
            if stat.S_ISREG(st.st_mode):
                return self._read_file(fd, st)
            return KmsgBatch(error="not a device or file")
        finally:
            if fd >= 0:
                os.close(fd)

    def fileno(self) -> int | None:
        """The open device's descriptor, to wait on with select/poll (None for a snapshot's
        file, or before the first read)."""
        with self._lock:
            return self._fd if self._device else None

    def recorded(self) -> list[str]:
        """Every record read since the reader was made with `record=True` (for capture)."""
        with self._lock:
            return list(self._recorded or [])

    def close(self) -> None:
        """Release the device."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _read_device(self, fd: int) -> KmsgBatch:
        batch = KmsgBatch()
        taken = 0
        while taken < READ_BYTES:
            try:
                data = os.read(fd, RECORD_MAX)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten before we read them: go on
                    batch.overruns += 1
                    if batch.overruns >= MAX_OVERRUNS:  # one that only ever overruns: stop
                        batch.more = True
                        break
                    continue
                batch.error = _name(exc)
                break
            if not data:
                break
            taken += len(data)
            batch.records.append(data.decode("utf-8", errors="replace").rstrip("\n"))
        else:
            batch.more = True
        return batch

    def _read_file(self, fd: int, st: os.stat_result) -> KmsgBatch:
        self._device = False
        inode = (st.st_dev, st.st_ino)
        if inode != self._inode or st.st_size < self._offset:
            # replaced or truncated: from its start
            self._inode, self._offset, self._skipping = inode, 0, False
        try:
            os.lseek(fd, self._offset, os.SEEK_SET)
            data = os.read(fd, READ_BYTES)
        except OSError as exc:
            return KmsgBatch(error=_name(exc))
        batch = KmsgBatch(more=len(data) == READ_BYTES)
        start = 0
        if self._skipping:  # the rest of an over-long line: up to its newline
            start = data.find(b"\n") + 1
            if start == 0:
                self._offset += len(data)
                return batch
            self._skipping = False
        end = data.rfind(b"\n") + 1
        if end <= start:
            end = start
        if len(data) - end >= RECORD_LINE_MAX:  # a line longer than any record: pass it
            batch.skipped += 1
            self._skipping = True
            self._offset += len(data)
        else:
            self._offset += end
        text = data[start:end].decode("utf-8", errors="replace")
        batch.records = split_records(text)
        return batch


def split_records(text: str) -> list[str]:
    """A kmsg file's text as records: a line beginning with a space continues the record
    above it (its dictionary: ` SUBSYSTEM=pci`, ` DEVICE=+pci:0000:18:00.0`)."""
    records: list[str] = []
    for line in text.splitlines():
        if line.startswith(" ") and records:
            records[-1] += "\n" + line
        elif line.strip():
            records.append(line)
    return records


def _name(exc: OSError) -> str:
    """An OS error's errno name (`EPERM`), else its text."""
    return errno.errorcode.get(exc.errno or 0, exc.strerror or str(exc))
