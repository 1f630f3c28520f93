"""What gpuprobe knows about one check, in one place: the check's record.

Each check module ends with one `Check` record; `gpuprobe.checks.registry` lists the records
in report order, and everything else reads them from there: the runner (the check's function
and deadline), the daemon's scheduler (whether it is active), the configuration loader and
its docs (its section), the metrics collector (its renderer), the default node conditions
(its condition group), the summary view the fleet audit reads (its summary keys), the daemon's
event path (what wakes it), the node's effects and attribution (the codes announcing the
node's end), the operator's clearing (`clear-xid`, ClearFindings), `check --explain-policy`
(its policy) and the daemon's log (how it names a code). Adding a
check is writing its module and adding its record to the registry (docs/architecture.md,
"How to add a check").
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.state import Keeps, StateError
from gpuprobe.config import Config
from gpuprobe.errors import UsageError
from gpuprobe.families import Family
from gpuprobe.host import Host
from gpuprobe.report import CheckResult, Finding
from gpuprobe.report_view import DataKeys

CheckFn = Callable[[CheckContext, Config], CheckResult]
Clear = Callable[[CheckContext, Config, int | None], int]


@dataclass(frozen=True)
class Policy:
    """A check's policy an operator may ask to see (`check --explain-policy`: the xid
    check's XID catalog under `xid.policy`): `explain(host, config)` is the effective policy
    on a host as JSON, `render` the same as text."""

    explain: Callable[[Host, Config], dict[str, Any]]
    render: Callable[[dict[str, Any]], str]


class NoSuchGpu(UsageError):
    """A clearing named a GPU index the node does not have (gRPC: INVALID_ARGUMENT)."""


# A clearing could not read or write the state it keeps (gRPC: FAILED_PRECONDITION): the
# runner's state directory is missing or read-only, or a state file in it is unreadable.
ClearStateError = StateError


# The daemon's event sources a record's `wakes` names.
WAKE_NVML_EVENTS = "nvml-events"  # NVML's event stream (XIDs and the other critical events)
WAKE_KERNEL_LOG = "kernel-log"  # new kernel-log lines (/dev/kmsg and the log files followed)


@dataclass(frozen=True)
class Poll:
    """A source of its own the daemon polls for a check between rounds: `sense()` every
    `seconds`; when its value changes, the check runs at once (`reason` says why). `sense`
    may hand what it read to that run through the check's kept state (the lifecycle check
    does), so the source is asked once per change."""

    sense: Callable[[], Hashable]
    seconds: float
    reason: str


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
    # The node's event sources that re-run it at once between rounds (the daemon's event path):
    # `WAKE_NVML_EVENTS`, `WAKE_KERNEL_LOG`; none: only its own `poll`, or its interval.
    wakes: tuple[str, ...] = ()
    # The kinds of kernel-log event (`gpu.kernel_events.EVENTS`: "nvrm", "sxid", "aer",
    # "amdgpu_fault", "boot") whose records wake it, when `wakes` names `WAKE_KERNEL_LOG`;
    # empty: a record of any kind a parser reads.
    kernel_events: tuple[str, ...] = ()
    # A source of its own the daemon polls between rounds (the cloud's notices), under a
    # configuration and in the check's context (its host, its state); None (or None
    # returned): nothing to poll.
    poll: Callable[[CheckContext, Config], Poll | None] | None = None
    # The finding codes by which it announces the node's end, the most urgent first, each with
    # the kind the node's taint `gpuprobe.io/terminating=<kind>` names; such a finding on the
    # node affects every pod on its GPUs (attribution).
    notices: tuple[tuple[str, str], ...] = ()
    # Its data's `devices` name the pods on each GPU and MIG device (`resource`, `gpu`,
    # `mig`, `holders`, `processes`): attribution names the pods of every check's GPU findings
    # from the report's result of the one record that says so.
    attributes_pods: bool = False
    # How an operator clears its sticky findings (`gpuprobe clear-xid`, gRPC ClearFindings):
    # `clear(ctx, config, gpu)` forgets those of GPU index `gpu` (every GPU's when None) and
    # returns how many; None: it keeps none.
    clear: Clear | None = None
    # What the check keeps between runs (`checks.state`): the runner keeps it, in memory and,
    # when it must survive a restart, in the state directory; None: it keeps nothing.
    keeps: Keeps[Any] | None = None
    # An active check that loads the GPUs (nccl's all-reduce): the runner runs one such
    # check at a time, so that two never load the GPUs (and judge them) at once.
    loads_gpus: bool = False
    # Its effective policy, for an operator to read (`check --explain-policy`); None: none.
    policy: Policy | None = None
    # How the daemon's "report changed" log names one of its findings' codes, where one
    # resource may carry several findings of one code (the xid check: `XID 119`); None: the
    # code alone.
    log_code: Callable[[Finding], str] | None = None

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
