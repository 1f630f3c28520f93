"""The daemon's ear for the cloud's notices: a small poller, apart from the rounds.

A spot node gets two minutes' notice (GCE and Azure 30 s); `--interval` is a minute or more.
So the daemon asks the metadata service every `lifecycle.poll_seconds` (AWS asks for 5 s) and,
when what it hears changes, asks for the `lifecycle` check to run now (`on_change`), whose
result flows through the store to the report, `/metrics`, the node's event and taint like any
round's. The poller judges nothing: it only compares what it hears with what it heard.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable

log = logging.getLogger("gpuprobe.serve")


class NoticePoller:
    """Calls `sense()` every `interval` seconds and `on_change()` when its value changes
    (and once at the start, so a notice that came before the first look is not missed)."""

    def __init__(
        self,
        sense: Callable[[], Hashable],
        on_change: Callable[[], object],
        interval: float,
    ) -> None:
        self.sense = sense
        self.on_change = on_change
        self.interval = interval
        self.changes = 0
        self._heard: Hashable = object()  # nothing heard yet: the first look is a change

    def step(self) -> bool:
        """One look; True when it heard a change (and `on_change` ran)."""
        heard = self.sense()
        if heard == self._heard:
            return False
        self._heard = heard
        self.changes += 1
        self.on_change()
        return True

    def run(self, stop: threading.Event) -> None:
        """Look until `stop` is set."""
        while not stop.is_set():
            try:
                self.step()
            except Exception:  # a bug must not end listening for the agent's lifetime
                log.exception("notice poll failed")
            stop.wait(self.interval)
