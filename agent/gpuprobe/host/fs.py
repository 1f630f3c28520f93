"""HostFS: the host's files, read under an injectable root.

Checks name host paths (`/proc/driver/nvidia/version`); HostFS maps them under its root:
`/` on the live node, `/host` in the DaemonSet, `DIR/rootfs` for a snapshot. When recording
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

MAX_READ_BYTES = 16 * 1024 * 1024


def _nonblocking(path: str, flags: int) -> int:
    """Open without waiting: a FIFO planted in a snapshot's rootfs (or on the host) would
    otherwise hold the reading check until its deadline, and its thread for good."""
    return os.open(path, flags | os.O_NONBLOCK)


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

    def real_path(self, path: str, use: str = STAT) -> Path:
        """Where the host path `path` lies on this machine."""
        if not path.startswith("/"):
            raise ValueError(f"host paths are absolute: {path!r}")
        if self._recorded is not None:
            with self._lock:
                self._recorded.setdefault(os.path.normpath(path), set()).add(use)
        return self.root / path.lstrip("/")

    def read_bytes(self, path: str, max_bytes: int = MAX_READ_BYTES) -> bytes:
        """The first `max_bytes` of a file; raises OSError (FileNotFoundError when absent)."""
        with open(self.real_path(path, READ), "rb", opener=_nonblocking) as f:
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
        with open(self.real_path(path, READ), "rb", opener=_nonblocking) as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - max_bytes))
            return f.read(max_bytes)

    def exists(self, path: str) -> bool:
        """Whether anything is at the host path."""
        return os.path.lexists(self.real_path(path))

    def is_file(self, path: str) -> bool:
        """Whether a regular file (or what a file links to) is at the host path."""
        return self.real_path(path).is_file()

    def is_dir(self, path: str) -> bool:
        """Whether a directory is at the host path."""
        return self.real_path(path).is_dir()

    def is_socket(self, path: str) -> bool:
        """Whether a unix socket is at the host path (in a snapshot: any file there)."""
        return self._is_special(path, stat.S_ISSOCK)

    def is_device(self, path: str) -> bool:
        """Whether a device node is at the host path (in a snapshot: any file there)."""
        return self._is_special(path, lambda m: stat.S_ISCHR(m) or stat.S_ISBLK(m))

    def _is_special(self, path: str, kind: Callable[[int], bool]) -> bool:
        try:
            mode = self.real_path(path).stat().st_mode
        except OSError:
            return False
        return kind(mode) or (self.snapshot and stat.S_ISREG(mode))

    def is_executable(self, path: str) -> bool:
        """Whether an executable file is at the host path (in a snapshot: any file there)."""
        real = self.real_path(path)
        if not real.is_file():
            return False
        return self.snapshot or os.access(real, os.X_OK)

    def listdir(self, path: str) -> list[str]:
        """The sorted names in a directory; empty when it is absent or unreadable."""
        try:
            return sorted(os.listdir(self.real_path(path, LIST)))
        except OSError:
            return []

    def glob(self, pattern: str) -> list[str]:
        """Host paths matching a pattern whose wildcards are in its last component, sorted."""
        directory, name = os.path.split(pattern)
        try:
            entries = sorted(os.listdir(self.root / directory.lstrip("/")))
        except OSError:
            return []
        matches = [os.path.join(directory, e) for e in entries if fnmatch.fnmatchcase(e, name)]
        for match in matches:
            self.real_path(match)  # recorded as seen, not the whole directory's listing
        return matches

    def readlink(self, path: str) -> str | None:
        """The target of a symbolic link, or None when the path is no link."""
        try:
            return os.readlink(self.real_path(path, LINK))
        except OSError:
            return None
