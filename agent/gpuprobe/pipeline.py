"""The report pipeline: the checks' results, then the post-passes in order, then the sinks.

A report is assembled in one place, `assemble`: the report of the checks' results passes
through `POST_PASSES`, the steps that need the whole report rather than one check (today:
naming the pods each GPU finding affects), each once and in order. Then every sink is fed the
same report.

One-shot `check` (and `capture`) gets its report from `run_checks` and feeds its sinks, the
printed report and `--publish`'s Kubernetes write (`gpuprobe.cli.check`). The daemon's store
(`gpuprobe.daemon.store.ReportStore`) assembles the merged latest result of each check on every
update and feeds its sinks the new state: the metrics collector and page, the gRPC service,
the health state and the effects loop (listed in `gpuprobe.serve.agent`).

A new post-pass (a remediation plan) is one more entry in `POST_PASSES`; a new sink is one
more entry in the face's list of sinks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Protocol, TypeVar

from gpuprobe.checks import registry
from gpuprobe.checks.attribution import attribute_report
from gpuprobe.checks.runner import CheckRunner
from gpuprobe.config import Config
from gpuprobe.effects.told import tell_report
from gpuprobe.host import Host
from gpuprobe.report import CheckResult, NodeReport, now

Item = TypeVar("Item")


class PostPass(Protocol):
    """A step over the whole report once its checks ran: it returns the report, a new object
    where it changed anything (the report given is left as it is)."""

    def __call__(self, report: NodeReport, /) -> NodeReport: ...


# What a sink is fed: a report (`check`), or the daemon's state that holds one (`serve`).
Sink = Callable[[Item], None]

# In the order they run. Attribution first: a later pass sees the pods a finding affects.
# Attribution first (it names the pods), then what the effects did for each finding.
POST_PASSES: tuple[PostPass, ...] = (attribute_report, tell_report)


def assemble(node: str, time: datetime, results: list[CheckResult]) -> NodeReport:
    """The node's report of `results` (in report order), after every post-pass."""
    report = NodeReport(node=node, time=time, checks=results)
    for post_pass in POST_PASSES:
        report = post_pass(report)
    return report


def run_checks(host: Host, config: Config, names: list[str]) -> NodeReport:
    """Run the named checks once (in turn, staggered) and return the report, in `names` order."""
    started_at = now()
    ran = CheckRunner(host, config, registry.CHECKS).run(names)
    return assemble(host.node_name, started_at, [r.result for r in ran])


def feed(item: Item, sinks: Iterable[Sink[Item]]) -> None:
    """Hand `item` to every sink, in order; a sink that raises stops the ones after it."""
    for sink in sinks:
        sink(item)
