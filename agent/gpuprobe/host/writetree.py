"""A directory tree written through directory file descriptors, never through a link.

`gpuprobe capture` runs as root and writes a snapshot into a directory: a symlink planted there
(or a link copied from the host, absolute, like `/sys/class/net/eth0 -> /sys/devices/...`) must
never redirect a write onto the machine's own files. Every path is walked one component at a
time from the tree's open root (openat-style, O_NOFOLLOW on each step); a link met on the way is
resolved inside the tree, as a chroot would (absolute links from the tree's root, `..` stopping
there), so a snapshot's own copied links still lead where they led on the host.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

# Links followed in one path at most (Linux's own limit, MAXSYMLINKS).
MAX_LINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


class WriteTree:
    """Writes under the directory open as `root_fd` (which the tree takes over)."""

    def __init__(self, root_fd: int) -> None:
        self._root = root_fd

    def close(self) -> None:
        """Close the tree's root."""
        os.close(self._root)

    def subtree(self, path: str) -> WriteTree:
        """The directory `path` (created as needed) as a tree of its own: links in it resolve
        from it (a snapshot's rootfs/ is the host's /)."""
        return WriteTree(self._directory(_parts(path), create=True))

    def makedirs(self, path: str) -> None:
        """Create the directory `path` and those above it, as needed."""
        os.close(self._directory(_parts(path), create=True))

    def write(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write `data` as the file `path` (replacing its content), its directories created."""
        fd = self._open_file(_parts(path), mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)

    def symlink(self, target: str, path: str) -> None:
        """Create the link `path` → `target` (the text as is), unless something is there."""
        *above, name = _parts(path)
        parent = self._directory(above, create=True)
        try:
            os.symlink(target, name, dir_fd=parent)
        except FileExistsError:
            pass
        finally:
            os.close(parent)

    def kind(self, path: str) -> int | None:
        """The st_mode of what is at `path` (a link itself, not what it names); None when
        nothing is, or a directory on the way is missing."""
        *above, name = _parts(path)
        try:
            parent = self._directory(above, create=False)
        except OSError:
            return None
        try:
            return os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
        except OSError:
            return None
        finally:
            os.close(parent)

    def _open_file(self, parts: list[str], mode: int) -> int:
        for _ in range(MAX_LINKS):
            *above, name = parts
            parent = self._directory(above, create=True)
            try:
                return os.open(name, _FILE_FLAGS, mode, dir_fd=parent)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                link = os.readlink(name, dir_fd=parent)  # resolve it inside the tree
            finally:
                os.close(parent)
            parts = _joined(above, link)
        raise OSError(errno.ELOOP, "too many levels of symbolic links", "/".join(parts))

    def _directory(self, parts: list[str], create: bool) -> int:
        """An open fd of the directory at `parts`, links resolved inside the tree."""
        done: list[str] = []  # the resolved components walked so far
        pending = list(parts)
        fd = os.dup(self._root)
        links = 0
        try:
            while pending:
                part = pending.pop(0)
                if part in ("", "."):
                    continue
                if part == "..":  # never above the tree's root
                    done = done[:-1]
                    os.close(fd)
                    fd = self._walk(done)
                    continue
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                mode = os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode
                if stat.S_ISLNK(mode):
                    links += 1
                    if links > MAX_LINKS:
                        raise OSError(errno.ELOOP, "too many levels of symbolic links", part)
                    link = os.readlink(part, dir_fd=fd)
                    if link.startswith("/"):
                        done = []
                        os.close(fd)
                        fd = os.dup(self._root)
                    pending = _parts(link) + pending
                    continue
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
                done.append(part)
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _walk(self, parts: list[str]) -> int:
        """The fd of a directory already resolved (no links among `parts`)."""
        fd = os.dup(self._root)
        for part in parts:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        return fd


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def _joined(above: list[str], link: str) -> list[str]:
    """Where a link found in the directory `above` leads, from the tree's root."""
    return _parts(link) if link.startswith("/") else [*above, *_parts(link)]
