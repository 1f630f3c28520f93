"""Runs checks: each timed, bounded by its deadline, and any failure made an UNKNOWN result.

Every check runs in its own daemon thread. A check that overruns its deadline (a hung NVML
call, a stuck filesystem) is reported UNKNOWN and abandoned; the others finish and the
report completes. An exception inside a check becomes an UNKNOWN result naming the error.

The checks start one after another, each once the one before has finished or has run for
STAGGER_SECONDS: a dozen short checks started at once contend for the interpreter and cost
about three times the CPU of the same checks in turn, while a slow or hung check holds the
next one back for no longer than the stagger.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from gpuprobe.checks.registry import CHECKS, CheckFn
from gpuprobe.config import Config
from gpuprobe.host import Host
from gpuprobe.report import Action, CheckResult, Finding, NodeReport, Severity, Status, now
from gpuprobe.threads import start_thread

STAGGER_SECONDS = 0.5


@dataclass
class _Run:
    name: str
    fn: CheckFn
    started: float = 0.0
    result: CheckResult | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def __call__(self, host: Host, config: Config) -> None:
        try:
            result = self.fn(host, config)
        except Exception as exc:  # one broken check must never break the report
            result = failed(self.name, exc)
        result.duration_seconds = time.monotonic() - self.started
        self.result = result
        self.done.set()


def failed(name: str, exc: BaseException) -> CheckResult:
    """The result of a check that raised `exc`."""
    error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return CheckResult(
        name=name,
        summary=f"check failed: {error}",
        findings=[
            Finding(
                "CHECK_FAILED",
                Severity.UNKNOWN,
                f"the {name} check failed with {error}; its signals are unknown",
            )
        ],
        floor=Status.UNKNOWN,
    )


def timed_out(name: str, deadline: float) -> CheckResult:
    """The result of a check that did not finish within `deadline` seconds."""
    return CheckResult(
        name=name,
        summary=f"did not finish within its {deadline:g} s deadline",
        findings=[
            Finding(
                "CHECK_TIMEOUT",
                Severity.UNKNOWN,
                f"the {name} check did not finish within {deadline:g} s "
                "(a hung NVML call or filesystem); its signals are unknown",
                Action.NONE,
            )
        ],
        duration_seconds=deadline,
        floor=Status.UNKNOWN,
    )


def run_checks(host: Host, config: Config, names: list[str]) -> NodeReport:
    """Run the named checks (in turn, staggered) and return the report, in `names` order."""
    started_at = now()
    runs = [_Run(name, CHECKS[name]) for name in names]
    for run in runs:
        run.started = time.monotonic()
        if start_thread(run, f"check-{run.name}", (host, config)) is None:
            run.result = failed(run.name, RuntimeError("can't start a thread for the check"))
            run.done.set()
        run.done.wait(min(STAGGER_SECONDS, config.deadline(run.name)))
    results = []
    for run in runs:
        deadline = config.deadline(run.name)
        remaining = run.started + deadline - time.monotonic()
        if run.done.wait(max(0.0, remaining)) and run.result is not None:
            results.append(run.result)
        else:
            results.append(timed_out(run.name, deadline))
    return NodeReport(node=host.node_name, time=started_at, checks=results)
