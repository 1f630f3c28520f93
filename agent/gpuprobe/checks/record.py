"""What gpuprobe knows about one check, in one place: the check's record.

Each check module ends with one `Check` record; `gpuprobe.checks.registry` lists the records
in report order, and everything else reads them from there: the runner (the check's function
and deadline), the daemon's scheduler (whether it is active), the configuration loader and
its docs (its section), the metrics collector (its renderer), the default node conditions
(its condition group) and the summary view the fleet audit reads (its summary keys). Adding a
check is writing its module and adding its record to the registry (docs/architecture.md,
"How to add a check").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.state import Keeps
from gpuprobe.config import Config
from gpuprobe.families import Family
from gpuprobe.report import CheckResult
from gpuprobe.report_view import DataKeys

CheckFn = Callable[[CheckContext, Config], CheckResult]
# The check's data (`CheckResult.data`): a TypedDict defined beside the check.
D = TypeVar("D")


@dataclass(frozen=True)
class Check(Generic[D]):
    """One check: its name, what runs it, what it reads from the config, and what it shows."""

    # The check's name: in the report, `--only`, `checks.deadlines`, `serve.intervals`.
    name: str
    # The check itself: a function of its context (the node, through readers) and the config.
    run: CheckFn
    # Its section of the configuration file (a frozen dataclass), read under the check's name;
    # None: the check has no settings of its own.
    section: type[Any] | None = None
    # An active check loads the node (disk, network, GPUs): the daemon runs it at the longer
    # `serve.active_interval_seconds`, and `capture` leaves it out.
    active: bool = False
    # The least deadline the check needs under a configuration (a measurement's own length);
    # None: `checks.deadline_seconds` is enough. `checks.deadlines.<name>` overrides it.
    least_deadline: Callable[[Config], float] | None = None
    # The check's metric families from its data (None: it has no metrics of its own).
    metrics: Callable[[D], Iterable[Family]] | None = None
    # The node condition type its findings decide by default (`GPUHardwareReady`, ...;
    # `kubernetes.conditions` regroups them); None: it feeds no condition.
    condition: str | None = None
    # The facts of its data the report's summary view keeps (`report_view.summary`), which the
    # fleet audit reads; None: the summary view keeps none of its data.
    summary_keys: DataKeys | None = None
    # What the check keeps between runs (`checks.state`): the runner keeps it, in memory and,
    # when it must survive a restart, in the state directory; None: it keeps nothing.
    keeps: Keeps[Any] | None = None
    # An active check that loads the GPUs (nccl's all-reduce): the runner runs one such
    # check at a time, so that two never load the GPUs (and judge them) at once.
    loads_gpus: bool = False

    def deadline(self, config: Config) -> float:
        """How long the check may run under `config`, in seconds."""
        least = self.least_deadline(config) if self.least_deadline is not None else 0.0
        return config.checks.deadline(self.name, least)

    def families(self, result: CheckResult) -> list[Family]:
        """The check's metric families from one of its results (none without a renderer)."""
        if self.metrics is None or not isinstance(result.data, Mapping):
            return []
        # The data is the check's own (a TypedDict is a dict at run time); renderers still
        # take missing or odd values as "no sample", since a result may come from elsewhere.
        return list(self.metrics(cast(D, result.data)))
