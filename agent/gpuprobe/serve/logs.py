"""Structured logs: one JSON object per line on stderr, as log collectors read them."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """A record as {"time", "level", "msg", ...extra fields, "error" for exceptions}."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one JSON line."""
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup(level: int = logging.INFO) -> logging.Logger:
    """Send the `gpuprobe` loggers to stderr as JSON lines."""
    logger = logging.getLogger("gpuprobe")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False
    return logger


class Throttle:
    """At most one log line per key (a caller, a reason) every `every` seconds: a client
    refused 750 times a second must not write 750 lines (7,524 in 10 s were seen), while the
    first refusal of each caller is still told. `allow` says how many were held back since."""

    def __init__(
        self, every: float = 60.0, max_keys: int = 1024, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.every = every
        self.max_keys = max_keys
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, int]] = {}  # key → (logged at, held back since)

    def allow(self, key: str) -> int | None:
        """None to hold this line back; else how many lines of `key` were held back before."""
        t = self._clock()
        with self._lock:
            logged, held = self._last.get(key, (t - self.every, 0))
            if t - logged < self.every:
                self._last[key] = (logged, held + 1)
                return None
            if len(self._last) >= self.max_keys and key not in self._last:
                self._last.clear()  # a flood of callers: forget them all rather than grow
            self._last[key] = (t, 0)
            return held
