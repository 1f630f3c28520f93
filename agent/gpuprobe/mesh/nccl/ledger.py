"""Every object a run creates, written down before it is created and deleted on every way out:
a test's end, an error, Ctrl-C and SIGTERM (through `gpuprobe.cleanup`, whose exit callbacks
the command line runs on those signals before it exits).

On a signal, the deletion must not race a create in flight in another thread: the ledger
closes first (no create starts after), waits a little for the creates already sent, then
deletes what it holds, through a client of its own (the run's may be mid-request in the
thread the signal interrupted). What gpuprobe cannot delete (it is killed outright, the API
server is down) ends on its own: every object has a deadline and a time to live, and the
Service and ConfigMap are owned by their Job (gpuprobe.mesh.nccl.workload).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from gpuprobe import cleanup
from gpuprobe.errors import UsageError
from gpuprobe.kube.api import Access, KubeError
from gpuprobe.kube.objects import ObjectApi
from gpuprobe.kube.reader import Kind

# On a signal: how long creates already sent may take to answer, and each deletion.
SETTLE_SECONDS = 5.0
DELETE_TIMEOUT = 10.0


class Closed(UsageError):
    """The run is ending (a signal came): no more objects are created."""


class Ledger:
    """The objects of one run (kind, name), in the order they were created."""

    def __init__(self, access: Access, namespace: str) -> None:
        self.access = access
        self.namespace = namespace
        self._objects: list[tuple[Kind, str]] = []
        self._in_flight = 0
        self._closed = False
        self._changed = threading.Condition()
        self._forget = cleanup.on_exit(self.on_exit)

    @contextlib.contextmanager
    def creating(self, kind: Kind, name: str) -> Iterator[None]:
        """Write the object down, then let it be created; Closed once the run is ending."""
        with self._changed:
            if self._closed:
                raise Closed("stopped before creating " + name)
            self._objects.append((kind, name))
            self._in_flight += 1
        try:
            yield
        finally:
            with self._changed:
                self._in_flight -= 1
                self._changed.notify_all()

    def held(self) -> list[tuple[Kind, str]]:
        """What is written down and not yet deleted."""
        with self._changed:
            return list(self._objects)

    def delete(self, api: ObjectApi, kind: Kind, name: str) -> None:
        """Delete one object (and what it owns) and cross it out; a failure leaves it written
        down for the end of the run."""
        api.delete(kind, name)
        with self._changed:
            if (kind, name) in self._objects:
                self._objects.remove((kind, name))

    def close(self, api: ObjectApi) -> list[str]:
        """Delete everything still written down; what could not be deleted, in words."""
        with self._changed:
            self._closed = True
        failed = []
        for kind, name in reversed(self.held()):
            try:
                self.delete(api, kind, name)
            except KubeError as exc:
                failed.append(f"{kind.kind} {name}: {exc}")
        self._forget()
        return failed

    def on_exit(self) -> None:
        """The process is ending (a signal, or an exit the run did not see through): stop
        creating, let the creates in flight land, delete everything written down."""
        with self._changed:
            self._closed = True
            end = time.monotonic() + SETTLE_SECONDS
            while self._in_flight and (left := end - time.monotonic()) > 0:
                self._changed.wait(left)
        if not self.held():
            return
        api = ObjectApi(self.access, self.namespace, DELETE_TIMEOUT)
        try:
            for kind, name in reversed(self.held()):
                with contextlib.suppress(KubeError):
                    self.delete(api, kind, name)
        finally:
            api.close()
