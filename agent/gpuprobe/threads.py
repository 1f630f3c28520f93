"""Starting threads where the system may refuse one.

Under a process limit (a pod's `pids` limit, `ulimit -u`) `Thread.start()` raises
RuntimeError ("can't start new thread"). A daemon that lets that escape, or that noted work as
started before the start failed, stays broken after the pressure is gone; every thread the
daemon starts goes through `start_thread`, which says whether it started.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("gpuprobe")


def start_thread(
    target: Callable[..., object], name: str, args: tuple[Any, ...] = ()
) -> threading.Thread | None:
    """Start `target(*args)` on a daemon thread; None (and a log line) when the system
    refused the thread."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    try:
        thread.start()
    except RuntimeError as exc:  # pthread_create failed: EAGAIN under a pids or memory limit
        log.warning("thread not started", extra={"thread_name": name, "error": str(exc)})
        return None
    return thread
