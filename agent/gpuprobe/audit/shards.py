"""An audit's fan-out split over processes, for fleets one interpreter cannot keep up with.

One process asks about a thousand agents a second: gRPC's Python layer and the reading of
each answer keep one core busy, so at ten thousand agents the interpreter, not the network,
is the bound. From PER_PROCESS targets on, `fetch_sharded` splits the targets into equal
shares, one per process up to the cores this process may use (at most MAX_PROCESSES): it asks
the first share itself while helper processes (`python -m gpuprobe.audit.shards`: the same
interpreter and package) ask the others, each on its own event loop and within the same end
on the machine's monotonic clock. A helper hands back only what `each` made of its answers
(pickled over a pipe), never whole reports. A helper that fails, or cannot start, costs time
and nothing else: its share is asked here, within what is left of the deadline.

The job travels in an unlinked temporary file (the credentials in it are never on a command
line, in the environment or under a name on disk).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, TypeVar

from gpuprobe.audit.fanout import Asking, fan_out, rare_collections
from gpuprobe.client import Fetched
from gpuprobe.cores import usable_cores

T = TypeVar("T")
log = logging.getLogger("gpuprobe")

# Targets a process takes before another one pays for its start (about 0.3 s of a core).
PER_PROCESS = 2000
MAX_PROCESSES = 8
# How long after the deadline a helper may take to read its last answers and hand them over.
GRACE_SECONDS = 10.0
PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent


def processes_for(count: int, cores: int | None = None) -> int:
    """How many processes ask `count` targets: one per PER_PROCESS of them, at most one per
    usable core and MAX_PROCESSES, at least one."""
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
    helpers = [Helper(share, asking, each) for share in shares[1:]]
    try:
        with rare_collections():
            done = asyncio.run(fan_out(shares[0], asking, each))
            for helper, share in zip(helpers, shares[1:], strict=True):
                got: list[T] | None = helper.results(asking.end)
                if got is None:
                    got = asyncio.run(fan_out(share, asking, each))
                done.extend(got)
        return done
    finally:
        for helper in helpers:
            helper.stop()


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
    """A helper process asking one share of the targets."""

    def __init__(self, share: Sequence[str], asking: Asking, each: Callable[[Fetched], Any]):
        self.count = len(share)
        self.process: subprocess.Popen[bytes] | None = None
        self.errors = tempfile.TemporaryFile()  # noqa: SIM115  (closed by stop())
        # a fresh Credentials: the channel credentials it caches do not pickle
        job = (list(share), replace(asking, credentials=replace(asking.credentials)), each)
        with tempfile.TemporaryFile() as job_file:
            pickle.dump(job, job_file, protocol=pickle.HIGHEST_PROTOCOL)
            job_file.seek(0)
            try:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "gpuprobe.audit.shards"],
                    stdin=job_file,
                    stdout=subprocess.PIPE,
                    stderr=self.errors,
                    env=_environment(),
                )
            except OSError as exc:
                log.warning("audit helper not started (%s); asking its targets here", exc)

    def results(self, end: float) -> list[Any] | None:
        """What the helper made of its share, waiting until `end` (monotonic) and a grace;
        None when it failed or took too long (it is stopped then, and a warning logged)."""
        if self.process is None:
            return None
        found, why = self._collect(max(0.0, end - time.monotonic()) + GRACE_SECONDS)
        if why is not None:
            log.warning("audit helper failed (%s); asking its %d targets here", why, self.count)
        return found

    def _collect(self, wait: float) -> tuple[list[Any] | None, str | None]:
        """The helper's results, or why there are none."""
        assert self.process is not None
        try:
            out, _ = self.process.communicate(timeout=wait)
        except subprocess.TimeoutExpired:
            self.stop()
            return None, f"no answer within {wait:.0f} s"
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
        self.errors.seek(0)
        lines = self.errors.read()[-4096:].decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else "-"

    def stop(self) -> None:
        """Stop the process if it still runs, and let go of its files."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.errors.close()


def _environment() -> dict[str, str]:
    """The helper's environment: this one, with this package first on its import path (a
    parent that found the package by a path of its own finds it the same way)."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{PACKAGE_ROOT}{os.pathsep}{path}" if path else str(PACKAGE_ROOT)
    return env


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
