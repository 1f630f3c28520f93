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
# The kernel's longest record with its dictionary (CONSOLE_EXT_LOG_MAX): a smaller read buffer
# makes the device answer EINVAL.
RECORD_MAX = 8192
# Records read in one go at most: the ring holds a few thousand; a device that never ran dry
# (a storm of new records as fast as they are read) must not hold the reader for ever.
MAX_RECORDS_PER_READ = 100_000
# A snapshot's kmsg file is read this much at a time at most (a ring is a few MiB at most).
MAX_FILE_BYTES = 16 * 1024 * 1024
# What `capture` keeps of the device at most (records, oldest dropped first).
MAX_RECORDED = 200_000


@dataclass
class KmsgBatch:
    """What one read gave: the records' raw text (as the device gave each, without its last
    newline), how many times the ring overran this reader since the last read (`EPIPE`), and
    the error that stopped the read (None when it ran dry)."""

    records: list[str] = field(default_factory=list)
    overruns: int = 0
    error: str | None = None


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
            real = self.fs.root / self.path.lstrip("/")
            try:
                mode = os.stat(real).st_mode
            except FileNotFoundError:
                return KmsgBatch(error="absent")
            except OSError as exc:
                return KmsgBatch(error=_name(exc))
            if stat.S_ISCHR(mode) and not self.fs.snapshot:
                batch = self._read_device(str(real))
            elif stat.S_ISREG(mode):
                batch = self._read_file(str(real))
            else:
                return KmsgBatch(error="not a device or file")
            if batch.error is None:
                self.read_once = True
            if self._recorded is not None:
                self._recorded.extend(batch.records)
                del self._recorded[:-MAX_RECORDED]
            return batch

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

    def _read_device(self, real: str) -> KmsgBatch:
        batch = KmsgBatch()
        if self._fd is None:
            try:
                self._fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as exc:
                return KmsgBatch(error=_name(exc))
            self._device = True
        for _ in range(MAX_RECORDS_PER_READ):
            try:
                data = os.read(self._fd, RECORD_MAX)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten before we read them: go on
                    batch.overruns += 1
                    continue
                batch.error = _name(exc)
                break
            if not data:
                break
            batch.records.append(data.decode("utf-8", errors="replace").rstrip("\n"))
        return batch

    def _read_file(self, real: str) -> KmsgBatch:
        self._device = False
        try:
            with open(real, "rb", opener=_nonblocking) as f:
                st = os.fstat(f.fileno())
                inode = (st.st_dev, st.st_ino)
                if inode != self._inode or st.st_size < self._offset:
                    self._inode, self._offset = inode, 0  # replaced or truncated
                f.seek(self._offset)
                data = f.read(MAX_FILE_BYTES)
        except OSError as exc:
            return KmsgBatch(error=_name(exc))
        end = data.rfind(b"\n")
        if end < 0:
            return KmsgBatch()  # no whole line yet: a writer is mid-record
        self._offset += end + 1
        return KmsgBatch(records=split_records(data[: end + 1].decode("utf-8", errors="replace")))


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


def _nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NONBLOCK)
