"""An audit's fan-out split over processes, for fleets one interpreter cannot keep up with.

One process asks about a thousand agents a second: gRPC's Python layer and the reading of
each answer keep one core busy, so at ten thousand agents the interpreter, not the network,
is the bound. `processes_for` gives one process per full PER_PROCESS targets (two from 4,000),
up to the cores this process may use and MAX_PROCESSES. `fetch_sharded` splits the targets
into equal shares: this process asks the first itself while helper processes (the same
interpreter running this module) ask the others, each on its own event loop and within the
same end on the machine's monotonic clock. A helper hands back only what `each` made of its
answers (pickled over a pipe), never whole reports.

A helper that cannot start, or fails, costs time and never targets: this process asks its
share itself as soon as it knows, beside its own share, within what is left of the deadline.
Every helper is waited for until one bound, the deadline and GRACE_SECONDS, and stopped then.
The job (targets, credentials, each) travels in an anonymous memory file: the token and a
client key are never on a command line, in the environment, or on a disk.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import IO, Any, TypeVar

from gpuprobe.audit.fanout import Asking, fan_out, rare_collections
from gpuprobe.client import Fetched
from gpuprobe.cores import usable_cores
from gpuprobe.host.child_python import python_command

T = TypeVar("T")
log = logging.getLogger("gpuprobe")

# Targets a process takes before another one pays for its start (about 0.3 s of a core).
PER_PROCESS = 2000
MAX_PROCESSES = 8
# How long after the deadline the helpers may take to read their last answers and hand over.
GRACE_SECONDS = 10.0


def helper_command() -> list[str]:
    """The helper's command: this module, in this interpreter, isolated from the working
    directory and the environment (`host.child_python`)."""
    return python_command("gpuprobe.audit.shards")


def processes_for(count: int, cores: int | None = None) -> int:
    """How many processes ask `count` targets: one per full PER_PROCESS of them, at most one
    per usable core and MAX_PROCESSES, at least one."""
    cores = usable_cores() if cores is None else cores
    return max(1, min(cores, MAX_PROCESSES, count // PER_PROCESS))


def fetch_sharded(
    targets: Sequence[str],
    asking: Asking,
    each: Callable[[Fetched], T],
    processes: int,
) -> list[T]:
    """What `each` makes of every target's report, in the order of `targets`, asked by
    `processes` processes (this one among them). `each` and what it returns must pickle (a
    module-level function and plain data)."""
    shares = split(targets, processes)
    helpers: list[Helper] = []
    try:
        helpers += [Helper(share, asking, each) for share in shares[1:]]
        with rare_collections():
            return asyncio.run(_gathered(shares, helpers, asking, each))
    finally:
        for helper in helpers:
            helper.stop()


async def _gathered(
    shares: list[Sequence[str]],
    helpers: list[Helper],
    asking: Asking,
    each: Callable[[Fetched], T],
) -> list[T]:
    """This process's share and each helper's, at once; a helper's share asked here as soon
    as the helper is known to have failed."""
    until = asking.end + GRACE_SECONDS

    async def helped(helper: Helper, share: Sequence[str]) -> list[T]:
        got: list[T] | None = await asyncio.to_thread(helper.results, until)
        if got is None:
            return await fan_out(share, asking, each)
        return got

    parts = await asyncio.gather(
        fan_out(shares[0], asking, each),
        *(helped(h, s) for h, s in zip(helpers, shares[1:], strict=True)),
    )
    return [entry for part in parts for entry in part]


def split(targets: Sequence[str], parts: int) -> list[Sequence[str]]:
    """`targets` in `parts` contiguous shares whose sizes differ by at most one (none empty
    unless there are fewer targets than parts)."""
    parts = max(1, min(parts, len(targets)))
    size, extra = divmod(len(targets), parts)
    shares, start = [], 0
    for k in range(parts):
        end = start + size + (1 if k < extra else 0)
        shares.append(targets[start:end])
        start = end
    return shares


class Helper:
    """A helper process asking one share of the targets (or, when it could not be started,
    one that has failed already)."""

    def __init__(self, share: Sequence[str], asking: Asking, each: Callable[[Fetched], Any]):
        self.count = len(share)
        self.process: subprocess.Popen[bytes] | None = None
        self.errors: IO[bytes] | None = None
        self.failure: str | None = None
        try:
            # a fresh Credentials: the channel credentials it caches do not pickle
            job = (list(share), replace(asking, credentials=replace(asking.credentials)), each)
            with _memory_file("gpuprobe-audit-job") as job_file:
                pickle.dump(job, job_file, protocol=pickle.HIGHEST_PROTOCOL)
                job_file.seek(0)
                self.errors = _memory_file("gpuprobe-audit-helper-stderr")
                self.process = subprocess.Popen(
                    helper_command(),
                    stdin=job_file,
                    stdout=subprocess.PIPE,
                    stderr=self.errors,
                )
        except Exception as exc:  # no memory file, no process, a job that does not pickle
            self.failure = f"not started: {type(exc).__name__}: {exc}"

    def results(self, until: float) -> list[Any] | None:
        """What the helper made of its share, waiting until `until` (monotonic); None when
        it failed, or had not handed over by then (it is stopped then). A warning names
        why."""
        found, why = self._collect(until)
        if why is not None:
            log.warning("audit helper failed (%s); asking its %d targets here", why, self.count)
        return found

    def _collect(self, until: float) -> tuple[list[Any] | None, str | None]:
        """The helper's results, or why there are none."""
        if self.process is None:
            return None, self.failure or "not started"
        wait = max(0.0, until - time.monotonic())
        try:
            out, _ = self.process.communicate(timeout=wait)
        except subprocess.TimeoutExpired:
            self.stop()
            return None, f"no results within {GRACE_SECONDS:g} s after the deadline"
        if self.process.returncode != 0:
            return None, f"exit status {self.process.returncode}: {self._last_error()}"
        try:
            found = pickle.loads(out)
        except Exception as exc:  # a helper that died mid-write
            return None, f"unreadable results: {type(exc).__name__}: {exc}"
        if not isinstance(found, list) or len(found) != self.count:
            return None, "results for another number of targets"
        return found, None

    def _last_error(self) -> str:
        if self.errors is None:
            return "-"
        self.errors.seek(0)
        lines = self.errors.read()[-4096:].decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else "-"

    def stop(self) -> None:
        """Stop the process if it still runs, and let go of its files."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.errors is not None:
            self.errors.close()


def _memory_file(name: str) -> IO[bytes]:
    """An anonymous file in memory (memfd: no name on any file system), open for writing
    and reading."""
    return os.fdopen(os.memfd_create(name, os.MFD_CLOEXEC), "w+b")


def serve_job(job: IO[bytes], out: IO[bytes]) -> int:
    """A helper's work: read the job, ask the share, write what `each` made of it."""
    targets, asking, each = pickle.load(job)
    with rare_collections():
        done = asyncio.run(fan_out(targets, asking, each))
    pickle.dump(done, out, protocol=pickle.HIGHEST_PROTOCOL)
    out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(serve_job(sys.stdin.buffer, sys.stdout.buffer))
