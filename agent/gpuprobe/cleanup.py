"""Temporary data that must not outlive the process: registered paths, removed on every exit.

Active tests (storage throughput files, bandwidth sinks' scratch) register what they create
and unregister it once they removed it themselves. Whatever is still registered when the
process ends, normally or by SIGTERM or Ctrl-C, is removed by `remove_all`, which the command
line and the daemon call on their way out.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

_lock = threading.Lock()
_paths: set[str] = set()
_callbacks: dict[int, Callable[[], None]] = {}


def register(path: str) -> None:
    """Remove `path` (a file or a directory tree) when the process ends, unless unregistered."""
    with _lock:
        _paths.add(path)


def unregister(path: str) -> None:
    """Forget `path`: its owner removed it."""
    with _lock:
        _paths.discard(path)


def on_exit(callback: Callable[[], None]) -> Callable[[], None]:
    """Run `callback` (stop a child process, close a sink) when the process ends.

    Returns a function that forgets the callback again.
    """
    key = id(callback)
    with _lock:
        _callbacks[key] = callback

    def forget() -> None:
        with _lock:
            _callbacks.pop(key, None)

    return forget


def pending() -> list[str]:
    """The paths still registered."""
    with _lock:
        return sorted(_paths)


def remove_all() -> None:
    """Run the exit callbacks and remove every registered path; never raises."""
    with _lock:
        callbacks = list(_callbacks.values())
        paths = sorted(_paths)
        _callbacks.clear()
        _paths.clear()
    for callback in callbacks:
        with contextlib.suppress(Exception):  # one failing exit path must not stop the others
            callback()
    for path in paths:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)


def exit_on_signals(code: int = 143) -> None:
    """On SIGTERM, clean up and exit with `code`; on SIGINT, clean up and exit 130."""

    def handler(signum: int, frame: FrameType | None) -> None:
        remove_all()
        sys.stdout.flush()
        os._exit(130 if signum == signal.SIGINT else code)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
