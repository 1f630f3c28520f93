"""Sequential write and read throughput of a directory, measured the way fio measures it.

The test writes its own file (see `testfile`) in `jobs` threads, each over its own slice in
blocks of `block_size` bytes, with O_DIRECT from page-aligned (mmap-allocated) buffers, each
job fsyncing when its slice is written, before the write clock stops; it then reads the
slices back the same way. That is fio's
`--rw=write|read --direct=1 --ioengine=psync --end_fsync=1 --numjobs=N --offset_increment`.

Where the filesystem refuses O_DIRECT (ramfs, overlayfs on some kernels, some FUSE), the test
falls back to buffered I/O: the write clock still stops after fsync, and the file's pages are
dropped from the page cache (posix_fadvise DONTNEED) before it is read back, so the read comes
from the storage, not from memory. The result says which method ran and why.

Both phases stop early at their time bound; the figures are then over the bytes moved so far.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gpuprobe.measure.testfile import TestFile
from gpuprobe.threads import start_thread

DIRECT = "direct"
BUFFERED = "buffered"
# How often (in bytes moved) a job looks at the clock and at the other jobs' errors.
CHECK_BYTES = 1024 * 1024
_STAMP = struct.Struct("<Q").pack_into


@dataclass(frozen=True)
class Plan:
    """What to measure: block size, total bytes, parallel jobs, and the time bound.

    The write phase may take half of `seconds`; the read phase what the write left.
    """

    block_size: int
    size: int
    jobs: int
    seconds: float

    @property
    def bytes_per_job(self) -> int:
        """Each job's slice: whole blocks, the total shared out evenly."""
        return self.size // self.jobs // self.block_size * self.block_size

    @property
    def total_bytes(self) -> int:
        """The bytes the test writes when it is not cut short by its time bound."""
        return self.bytes_per_job * self.jobs


@dataclass(frozen=True)
class Throughput:
    """What a test measured."""

    method: str
    direct_refused: str | None
    bytes_written: int
    write_seconds: float
    bytes_read: int
    read_seconds: float
    time_limited: bool

    @property
    def write_bytes_per_second(self) -> float:
        """Bytes written per second, fsync included."""
        return self.bytes_written / self.write_seconds if self.write_seconds > 0 else 0.0

    @property
    def read_bytes_per_second(self) -> float:
        """Bytes read per second."""
        return self.bytes_read / self.read_seconds if self.read_seconds > 0 else 0.0


class MeasureError(Exception):
    """An I/O error during the test, with the phase it happened in."""

    def __init__(self, phase: str, error: OSError) -> None:
        super().__init__(f"{phase}: {error.strerror or error}")
        self.phase = phase
        self.errno = error.errno
        self.strerror = error.strerror or str(error)


def measure(directory: Path, plan: Plan, owner: str) -> Throughput:
    """Write then read a test file in `directory`; the file is gone when this returns.

    Raises MeasureError when an I/O call fails (the phase and errno say which and why).
    """
    try:
        test = TestFile(directory, owner)
    except OSError as exc:
        raise MeasureError("create", exc) from None
    with test:
        fd, method, refused = _open_for_test(test)
        try:
            return _run(fd, method, refused, plan)
        finally:
            if fd != test.fd:
                os.close(fd)


def _open_for_test(test: TestFile) -> tuple[int, str, str | None]:
    """An O_DIRECT descriptor of the test file, or its buffered one and why O_DIRECT failed."""
    try:
        fd = os.open(test.path, os.O_RDWR | os.O_DIRECT | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise MeasureError("open", exc) from None
        return test.fd, BUFFERED, "the filesystem refuses O_DIRECT (EINVAL on open)"
    # Some filesystems accept the flag at open and refuse the first I/O instead.
    probe = mmap.mmap(-1, 4096)
    try:
        os.pwrite(fd, probe, 0)
        os.ftruncate(fd, 0)
    except OSError as exc:
        os.close(fd)
        if exc.errno != errno.EINVAL:
            raise MeasureError("write", exc) from None
        return test.fd, BUFFERED, "the filesystem refuses O_DIRECT (EINVAL on write)"
    finally:
        probe.close()
    return fd, DIRECT, None


def _run(fd: int, method: str, refused: str | None, plan: Plan) -> Throughput:
    written, write_seconds, write_cut = _phase(fd, plan, plan.seconds / 2, None)
    # After fsync the pages are clean: drop any the file has in the page cache (all of them
    # when buffered) so the read comes from the storage, as fio's `invalidate` does. Advice
    # a filesystem rejects leaves the figure as good as fio's would be there.
    with contextlib.suppress(OSError):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    read, read_seconds, read_cut = _phase(fd, plan, plan.seconds - write_seconds, written)
    return Throughput(
        method=method,
        direct_refused=refused,
        bytes_written=sum(written),
        write_seconds=write_seconds,
        bytes_read=sum(read),
        read_seconds=read_seconds,
        time_limited=write_cut or read_cut,
    )


def _phase(
    fd: int, plan: Plan, limit: float, to_read: list[int] | None
) -> tuple[list[int], float, bool]:
    """Run one phase in `plan.jobs` threads: write (to_read None) or read back each job's
    bytes. Returns the bytes each job moved, the seconds taken and whether time ran out.

    As fio's jobs with `end_fsync`, each writing job fsyncs when its slice is written; the
    phase ends when the last job is done.
    """
    writing = to_read is None
    done = [0] * plan.jobs
    errors: list[tuple[str, OSError]] = []
    stop = threading.Event()
    buffers = [_buffer(plan.block_size, writing) for _ in range(plan.jobs)]

    def job(index: int) -> None:
        base = index * plan.bytes_per_job
        length = plan.bytes_per_job if to_read is None else to_read[index]
        try:
            done[index] = _transfer(fd, buffers[index], base, length, writing, deadline, stop)
            if writing:
                os.fsync(fd)  # the write is done when it is on the storage
        except _Failed as failed:
            done[index] = failed.moved
            errors.append(("write" if writing else "read", failed.error))
            stop.set()
        except OSError as exc:
            errors.append(("fsync", exc))
            stop.set()

    threads: list[threading.Thread] = []
    try:
        started = time.monotonic()
        deadline = started + limit
        for i in range(plan.jobs):
            thread = start_thread(job, f"storage-job-{i}", (i,))
            if thread is None:  # refused (a pids limit): stop the jobs that run, then say so
                stop.set()
                errors.append(("start", OSError(errno.EAGAIN, "cannot start a thread per job")))
                break
            threads.append(thread)
        for t in threads:
            t.join()  # before the buffers they use are closed
        elapsed = time.monotonic() - started
    finally:
        for buf in buffers:
            buf.close()
    if errors:
        raise MeasureError(*errors[0])
    expected = plan.total_bytes if to_read is None else sum(to_read)
    return done, elapsed, sum(done) < expected


def _buffer(size: int, writing: bool) -> mmap.mmap:
    """A page-aligned buffer (as O_DIRECT needs), its pages touched before the clock starts:
    random bytes to write (incompressible, like fio's), zeros to read into."""
    buf = mmap.mmap(-1, size)
    buf.write(os.urandom(size) if writing else bytes(size))
    return buf


class _Failed(Exception):
    def __init__(self, moved: int, error: OSError) -> None:
        super().__init__(str(error))
        self.moved = moved
        self.error = error


def _transfer(
    fd: int,
    buf: mmap.mmap,
    base: int,
    length: int,
    writing: bool,
    deadline: float,
    stop: threading.Event,
) -> int:
    """Move `length` bytes at `base` in whole blocks until done, the deadline, or a stop.

    The loop is kept lean (the clock and the stop flag looked at once per MiB, functions
    bound locally): with small blocks on fast storage, each Python step costs throughput.
    """
    block = len(buf)
    every = max(1, CHECK_BYTES // block)
    countdown = 0
    moved = 0
    clock, stamp, pwrite, preadv, buffers = time.monotonic, _STAMP, os.pwrite, os.preadv, [buf]
    try:
        while moved < length:
            if countdown == 0:
                if stop.is_set() or clock() >= deadline:
                    break
                countdown = every
            countdown -= 1
            offset = base + moved
            if writing:
                stamp(buf, 0, offset)  # a distinct first word per block defeats deduplication
                n = pwrite(fd, buf, offset)
                if n < block:  # only a full filesystem writes short
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            else:
                n = preadv(fd, buffers, offset)
                if n <= 0:
                    break
            moved += n
    except OSError as exc:
        raise _Failed(moved, exc) from None
    return moved
