"""Host paths resolved inside a root directory, as a chroot would resolve them.

Under `--root /host` (the DaemonSet) or a snapshot's `rootfs/`, the tree holds the host's
links as the host made them: an absolute one (`/etc/alternatives/x`, a pod log planted as a
link to `/etc/shadow`) names a path of the host, which is `root/etc/shadow` here, never the
agent's own `/etc/shadow`. `RootTree` walks every path one component at a time from the root
(openat-style, O_NOFOLLOW on each step, so a link swapped in mid-walk is never followed by
the kernel): absolute link targets start again at the root, `..` stops there, and at most
`MAX_LINKS` links are followed, Linux's own limit. Relative links that stay inside (sysfs's
`../../../devices/pci0000:00/...`) lead where they lead on the host.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# Links followed in one path at most (Linux's MAXSYMLINKS).
MAX_LINKS = 40
# O_PATH: walking through a directory needs only its search (x) bit, as in the kernel's walk.
_WALK_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@dataclass(frozen=True)
class Located:
    """A host path walked to its last component: `name` in the directory open as `dir_fd`
    (the link-free host path of that directory is `parents`)."""

    dir_fd: int
    name: str
    parents: tuple[str, ...]


class RootTree:
    """The files under `root`, every path resolved inside it. A root that is `/` itself is
    the machine's own tree: paths go to the kernel as they are (procfs's magic links, which
    no user-space walk reproduces, keep working on the live node)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.confined = os.path.realpath(self.root) != "/"

    def open_read(self, path: str) -> int:
        """An fd open for reading the file at the host path; raises OSError. Non-blocking: a
        FIFO planted in the tree would otherwise hold the reader for good."""
        if not self.confined:
            return os.open(self._plain(path), _READ_FLAGS & ~os.O_NOFOLLOW)
        with self._located(path, follow=True) as at:
            return os.open(at.name, _READ_FLAGS, dir_fd=at.dir_fd)

    def open_dir(self, path: str) -> int:
        """An fd open for listing the directory at the host path; raises OSError."""
        if not self.confined:
            return os.open(self._plain(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        with self._located(path, follow=True) as at:
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            return os.open(at.name, flags, dir_fd=at.dir_fd)

    def listdir(self, path: str) -> list[str]:
        """The names in the directory at the host path, sorted; raises OSError."""
        fd = self.open_dir(path)
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    def stat(self, path: str, follow: bool = True) -> os.stat_result:
        """What is at the host path (the link itself when `follow` is false); raises
        OSError."""
        if not self.confined:
            return os.stat(self._plain(path), follow_symlinks=follow)
        with self._located(path, follow=follow) as at:
            return os.stat(at.name, dir_fd=at.dir_fd, follow_symlinks=False)

    def mode(self, path: str, follow: bool = True) -> int | None:
        """The st_mode at the host path; None when nothing is there (or it cannot be
        reached)."""
        try:
            return self.stat(path, follow).st_mode
        except (OSError, ValueError):
            return None

    def readlink(self, path: str) -> str:
        """The text of the link at the host path; raises OSError (EINVAL: no link)."""
        if not self.confined:
            return os.readlink(self._plain(path))
        with self._located(path, follow=False) as at:
            return os.readlink(at.name, dir_fd=at.dir_fd)

    def access(self, path: str, mode: int) -> bool:
        """Whether this process may use the file at the host path as `mode` says."""
        if not self.confined:
            return os.access(self._plain(path), mode)
        try:
            with self._located(path, follow=True) as at:
                return os.access(at.name, mode, dir_fd=at.dir_fd)
        except (OSError, ValueError):
            return False

    def resolved(self, path: str) -> Path:
        """Where the host path lies on this machine, its links resolved inside the root
        (for what must be handed over as a path: a unix socket to connect to)."""
        if not self.confined:
            return self._plain(path)
        with self._located(path, follow=True) as at:
            return self.root.joinpath(*at.parents, at.name)

    def _plain(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    @contextmanager
    def _located(self, path: str, follow: bool) -> Iterator[Located]:
        at = self._walk(path, follow)
        try:
            yield at
        finally:
            os.close(at.dir_fd)

    def _walk(self, path: str, follow: bool) -> Located:
        """The directory holding the host path's last component, every link before it (and
        the last one too when `follow`) resolved inside the root."""
        pending = _parts(path)
        done: list[str] = []
        fd = os.open(self.root, _WALK_FLAGS)
        links = 0
        try:
            while pending:
                part = pending.pop(0)
                if part == "..":  # never above the root
                    done = done[:-1]
                    os.close(fd)
                    fd = self._reopen(done)
                    continue
                last = not pending
                if last and not follow:
                    return Located(fd, part, tuple(done))
                try:
                    mode = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
                except FileNotFoundError:
                    if last:  # absent: the caller's own call says so
                        return Located(fd, part, tuple(done))
                    raise
                if stat.S_ISLNK(mode):
                    links += 1
                    if links > MAX_LINKS:
                        raise OSError(errno.ELOOP, "too many levels of symbolic links", path)
                    target = os.readlink(part, dir_fd=fd)
                    if target.startswith("/"):
                        done = []
                        os.close(fd)
                        fd = os.open(self.root, _WALK_FLAGS)
                    pending = _parts(target) + pending
                    continue
                if last:
                    return Located(fd, part, tuple(done))
                child = os.open(part, _WALK_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
                done.append(part)
            # The path named a directory by `/`, `..` or a link: itself, as ".".
            return Located(fd, ".", tuple(done))
        except BaseException:
            os.close(fd)
            raise

    def _reopen(self, parts: list[str]) -> int:
        """The fd of a directory already walked (no links among `parts`)."""
        fd = os.open(self.root, _WALK_FLAGS)
        for part in parts:
            try:
                child = os.open(part, _WALK_FLAGS, dir_fd=fd)
            finally:
                os.close(fd)
            fd = child
        return fd


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]
