"""The storage test's own file: uniquely named, locked while in use, removed on every way out.

A test file is hidden and named `.gpuprobe-storage-<owner>-<unique>.tmp`, where `<owner>` is a
short hash of the node's name: several nodes may measure the same shared filesystem at once,
and each only ever removes its own files. The file is registered with `gpuprobe.cleanup`
before it exists (SIGTERM and Ctrl-C remove it) and held under an exclusive `flock` while the
test runs, so a later run tells a crashed test's leftover (unlocked) from a live one (locked).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
import time
import zlib
from pathlib import Path

from gpuprobe import cleanup

PREFIX = ".gpuprobe-storage-"
# A leftover younger than this is left alone: its test may be between create and lock.
STALE_AFTER_SECONDS = 60.0


def owner_tag(node_name: str) -> str:
    """The 8-hex-digit tag of a node in its test files' names."""
    return f"{zlib.crc32(node_name.encode('utf-8')):08x}"


def _own_name(tag: str) -> re.Pattern[str]:
    return re.compile(re.escape(PREFIX) + re.escape(tag) + r"-[0-9a-f]{32}\.tmp")


class TestFile:
    """A new test file in `directory`, opened read-write, registered and locked.

    Use as a context manager: on exit the file is unlinked and unregistered, whatever
    happened inside.
    """

    __test__ = False  # not a pytest test class, despite its name

    def __init__(self, directory: Path, owner: str) -> None:
        self.path = directory / f"{PREFIX}{owner_tag(owner)}-{os.urandom(16).hex()}.tmp"
        self.fd = -1
        # Registered before it exists: a signal between create and register leaves nothing.
        cleanup.register(str(self.path))
        try:
            self.fd = os.open(
                self.path,
                os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
            )
        except BaseException:
            cleanup.unregister(str(self.path))
            raise
        # A filesystem without locks (some FUSE) still runs the test: its leftovers then stay
        # until removed by hand, because no run can tell them from a live test's file.
        with contextlib.suppress(OSError):
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def __enter__(self) -> TestFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def remove(self) -> None:
        """Unlink and close the file (idempotent)."""
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        cleanup.unregister(str(self.path))
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def remove_stale(directory: Path, owner: str, now: float | None = None) -> list[str]:
    """Remove this node's test files left in `directory` by a test that died; their names.

    A file is removed only when its name is exactly this node's test-file name, it is a
    regular file (not a link), it is older than STALE_AFTER_SECONDS and no process holds its
    lock. Nothing else in the directory is touched.
    """
    pattern = _own_name(owner_tag(owner))
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    for entry in entries:
        if not pattern.fullmatch(entry.name):
            continue
        if _remove_if_abandoned(Path(entry.path), now):
            removed.append(entry.name)
    return sorted(removed)


def _remove_if_abandoned(path: Path, now: float) -> bool:
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or now - st.st_mtime < STALE_AFTER_SECONDS:
            return False
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # Unlink only the very file that was locked, not one put in its place meanwhile.
        if os.fstat(fd).st_ino != os.lstat(path).st_ino:
            return False
        os.unlink(path)
        return True
    except OSError:  # locked by a live test, locks unsupported, or gone already
        return False
    finally:
        os.close(fd)
