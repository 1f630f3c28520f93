"""Filesystems the tests mount (as root) and always unmount: tmpfs, ramfs, read-only mounts."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from conftest import require_root


@contextlib.contextmanager
def mounted(fstype: str, options: str = "", parent: Path | None = None) -> Iterator[Path]:
    """A fresh `fstype` filesystem mounted on a new directory, unmounted on every way out."""
    require_root()
    point = Path(tempfile.mkdtemp(prefix="gp-mnt-", dir=parent))
    args = ["mount", "-t", fstype] + (["-o", options] if options else []) + [fstype, str(point)]
    subprocess.run(args, check=True, capture_output=True, text=True)
    try:
        yield point
    finally:
        unmount(point)
        shutil.rmtree(point, ignore_errors=True)


def unmount(point: Path) -> None:
    """Unmount `point`; lazily when it is busy, so a test never leaves a mount behind."""
    if subprocess.run(["umount", str(point)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(point)], check=True, capture_output=True)


def fill(directory: Path) -> None:
    """Write into `directory` until its filesystem has no byte left."""
    with open(directory / "filler", "wb", buffering=0) as f:
        for chunk in (b"\0" * 65536, b"\0"):  # then byte by byte into the last block
            with contextlib.suppress(OSError):
                while True:
                    f.write(chunk)
