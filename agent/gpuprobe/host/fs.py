"""HostFS: the host's files, read under an injectable root.

Checks name host paths (`/proc/driver/nvidia/version`); HostFS maps them under its root:
`/` on the live node, `/host` in the DaemonSet, `DIR/rootfs` for a snapshot, resolving
every link inside the root as a chroot would (`gpuprobe.host.rootwalk`). When recording
(for `gpuprobe capture`), it notes every path it was asked about, and how: a file that was
read is copied into the snapshot, one whose existence was asked about is kept as an empty
placeholder, a listed directory keeps its entries' names.
"""

from __future__ import annotations

import fnmatch
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from gpuprobe.host.rootwalk import RootTree

MAX_READ_BYTES = 16 * 1024 * 1024


# How a recorded path was used.
READ, STAT, LIST, LINK = "read", "stat", "list", "link"


class HostFS:
    """Read-only access to the host's files under `root`.

    `snapshot=True` says the tree is a snapshot's `rootfs/`, where unix sockets and device
    nodes are recorded as empty regular files.
    """

    def __init__(self, root: str | os.PathLike[str] = "/", *, snapshot: bool = False) -> None:
        self.root = Path(root)
        self.snapshot = snapshot
        # Every path is resolved inside the root, as a chroot would: a link in the host's
        # tree (absolute, or climbing with `..`) never leads to the agent's own files.
        self.tree = RootTree(root)
        self._recorded: dict[str, set[str]] | None = None
        self._lock = threading.Lock()

    def record(self) -> None:
        """Start noting every host path this HostFS is asked about (for capture)."""
        self._recorded = {}

    @property
    def recording(self) -> bool:
        """Whether this HostFS notes the paths it is asked about (capture)."""
        return self._recorded is not None

    def recorded(self) -> dict[str, set[str]]:
        """Each host path asked about since `record()`, with how it was used."""
        with self._lock:
            return {path: set(uses) for path, uses in (self._recorded or {}).items()}

    def _note(self, path: str, use: str) -> None:
        if not path.startswith("/"):
            raise ValueError(f"host paths are absolute: {path!r}")
        if self._recorded is not None:
            with self._lock:
                self._recorded.setdefault(os.path.normpath(path), set()).add(use)

    def real_path(self, path: str, use: str = STAT) -> Path:
        """The host path joined under the root, its links left for the caller to judge (the
        storage check measures a path here and refuses one whose links lead out)."""
        self._note(path, use)
        return self.root / path.lstrip("/")

    def resolved_path(self, path: str) -> Path:
        """Where the host path lies on this machine, its links resolved inside the root (a
        unix socket to connect to); raises OSError when a directory on the way is missing."""
        self._note(path, STAT)
        return self.tree.resolved(path)

    def read_bytes(self, path: str, max_bytes: int = MAX_READ_BYTES) -> bytes:
        """The first `max_bytes` of a file; raises OSError (FileNotFoundError when absent)."""
        self._note(path, READ)
        with os.fdopen(self.tree.open_read(path), "rb") as f:
            return f.read(max_bytes)

    def read_text(self, path: str, max_bytes: int = MAX_READ_BYTES) -> str:
        """A file decoded as UTF-8 (undecodable bytes replaced); raises OSError."""
        return self.read_bytes(path, max_bytes).decode("utf-8", errors="replace")

    def try_read_text(self, path: str) -> str | None:
        """A file's text, or None when it is absent or unreadable."""
        try:
            return self.read_text(path)
        except OSError:
            return None

    def read_tail(self, path: str, max_bytes: int) -> bytes:
        """The last `max_bytes` of a file (kernel logs grow large); raises OSError."""
        self._note(path, READ)
        with os.fdopen(self.tree.open_read(path), "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - max_bytes))
            return f.read(max_bytes)

    def open_binary(self, path: str) -> BinaryIO:
        """The file at the host path open for reading, to read as the caller needs (a log
        read from its end by lines); raises OSError."""
        self._note(path, READ)
        return os.fdopen(self.tree.open_read(path), "rb")

    def exists(self, path: str) -> bool:
        """Whether anything is at the host path."""
        self._note(path, STAT)
        return self.tree.mode(path, follow=False) is not None

    def is_file(self, path: str) -> bool:
        """Whether a regular file (or what a file links to) is at the host path."""
        self._note(path, STAT)
        return stat.S_ISREG(self.tree.mode(path) or 0)

    def is_dir(self, path: str) -> bool:
        """Whether a directory is at the host path."""
        self._note(path, STAT)
        return stat.S_ISDIR(self.tree.mode(path) or 0)

    def is_socket(self, path: str) -> bool:
        """Whether a unix socket is at the host path (in a snapshot: any file there)."""
        return self._is_special(path, stat.S_ISSOCK)

    def is_device(self, path: str) -> bool:
        """Whether a device node is at the host path (in a snapshot: any file there)."""
        return self._is_special(path, lambda m: stat.S_ISCHR(m) or stat.S_ISBLK(m))

    def _is_special(self, path: str, kind: Callable[[int], bool]) -> bool:
        self._note(path, STAT)
        mode = self.tree.mode(path)
        if mode is None:
            return False
        return kind(mode) or (self.snapshot and stat.S_ISREG(mode))

    def is_executable(self, path: str) -> bool:
        """Whether an executable file is at the host path (in a snapshot: any file there)."""
        if not self.is_file(path):
            return False
        return self.snapshot or self.tree.access(path, os.X_OK)

    def listdir(self, path: str) -> list[str]:
        """The sorted names in a directory; empty when it is absent or unreadable."""
        self._note(path, LIST)
        try:
            return self.tree.listdir(path)
        except (OSError, ValueError):
            return []

    def glob(self, pattern: str) -> list[str]:
        """Host paths matching a pattern whose wildcards are in its last component, sorted."""
        directory, name = os.path.split(pattern)
        if not directory.startswith("/"):
            raise ValueError(f"host paths are absolute: {pattern!r}")
        try:
            entries = self.tree.listdir(directory)
        except (OSError, ValueError):
            return []
        matches = [os.path.join(directory, e) for e in entries if fnmatch.fnmatchcase(e, name)]
        for match in matches:
            self._note(match, STAT)  # recorded as seen, not the whole directory's listing
        return matches

    def readlink(self, path: str) -> str | None:
        """The target of a symbolic link, or None when the path is no link."""
        self._note(path, LINK)
        try:
            return self.tree.readlink(path)
        except (OSError, ValueError):
            return None
