"""Check `nccl`: does an all-reduce across this node's GPUs reach its bus bandwidth?

An active check: it runs the configured nccl-tests binary (`all_reduce_perf`) on every GPU,
bounded in time, only when no GPU process is running (unless forced), and judges the bus
bandwidth at the largest size against the configured floor. Multi-node NCCL tests are not
run by the agent (see docs/checks.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NotRequired, TypedDict

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check
from gpuprobe.config import Config
from gpuprobe.errors import ConfigError
from gpuprobe.gpu.own_load import own_gpu_test
from gpuprobe.measure.nccl import NcclTestError
from gpuprobe.measure.nccl import run as run_nccl
from gpuprobe.report import Action, CheckResult, Finding, Severity, Status

NAME = "nccl"
# The check's deadline is its test's timeout plus this (starting, killing, reading the
# table), so the test's own timeout, not the check's deadline, ends a slow run.
NCCL_DEADLINE_MARGIN = 15.0


class NcclSize(TypedDict):
    """One message size's out-of-place bus bandwidth (`data.rows[]`)."""

    size_bytes: int
    busbw_bytes_per_second: float


class NcclData(TypedDict):
    """The check's data (docs/checks.md, check `nccl`); only `ran` when the test did not run."""

    ran: bool
    gpus: NotRequired[int]
    largest_size_bytes: NotRequired[int]
    busbw_bytes_per_second: NotRequired[float]
    in_place_busbw_bytes_per_second: NotRequired[float]
    average_busbw_bytes_per_second: NotRequired[float | None]
    wrong_values: NotRequired[int]
    rows: NotRequired[list[NcclSize]]


NOT_RUN = NcclData(ran=False)


def run(ctx: CheckContext, config: Config) -> CheckResult:
    """Run the NCCL test when it is configured and the GPUs are free."""
    host = ctx.host
    settings = config.section(NAME, NcclConfig)
    if not settings.binary:
        return CheckResult(NAME, "not configured (nccl.binary)", data=NOT_RUN)
    gpus = ctx.gpus.nvidia.count() or 0
    if gpus == 0:
        return CheckResult(NAME, "no GPUs: not run", data=NOT_RUN)
    busy = ctx.gpus.nvidia.busy()
    if busy and not settings.force:
        listed = ", ".join(str(i) for i in busy)
        return CheckResult(NAME, f"not run: GPU processes are active on GPU {listed}", data=NOT_RUN)
    # A deadline set lower than the test's timeout (checks.deadlines.nccl) bounds the test too,
    # so the binary never outlives the check.
    deadline = CHECK.deadline(config)
    timeout = min(settings.timeout_seconds, max(deadline - NCCL_DEADLINE_MARGIN, deadline / 2))
    try:
        with own_gpu_test(host):
            result = run_nccl(settings.binary, gpus, settings.args, timeout)
    except NcclTestError as exc:
        missing = "is not there" in str(exc) or "is not executable" in str(exc)
        finding = Finding(
            "NCCL_TEST_FAILED",
            Severity.UNKNOWN if missing else Severity.CRITICAL,
            f"the NCCL test across {gpus} GPUs failed: {exc}",
            Action.FIX_CONFIG if missing else Action.DRAIN_NODE,
        )
        return CheckResult(NAME, "NCCL test failed", [finding], NOT_RUN)
    largest = result.largest
    busbw_gbps = largest.out_of_place_busbw / 1e9
    data: NcclData = {
        "ran": True,
        "gpus": gpus,
        "largest_size_bytes": largest.size_bytes,
        "busbw_bytes_per_second": largest.out_of_place_busbw,
        "in_place_busbw_bytes_per_second": largest.in_place_busbw,
        "average_busbw_bytes_per_second": result.average_busbw,
        "wrong_values": result.wrong_values,
        "rows": [
            {"size_bytes": r.size_bytes, "busbw_bytes_per_second": r.out_of_place_busbw}
            for r in result.rows
        ],
    }
    findings = []
    if result.wrong_values:
        findings.append(
            Finding(
                "NCCL_WRONG_RESULTS",
                Severity.CRITICAL,
                f"the NCCL all-reduce across {gpus} GPUs returned {result.wrong_values} wrong "
                "values: a GPU or NVLink corrupts data",
                Action.HARDWARE_INSPECTION,
            )
        )
    floor = settings.min_busbw_gbps
    if floor and busbw_gbps < floor:
        findings.append(
            Finding(
                "NCCL_BUSBW_LOW",
                Severity.WARNING,
                f"NCCL bus bandwidth at {largest.size_bytes} bytes is {busbw_gbps:.1f} GB/s, "
                f"below the floor of {floor:g} GB/s: check NVLink, NVSwitch and the fabric "
                "manager",
                Action.HARDWARE_INSPECTION,
            )
        )
    summary = f"busbw {busbw_gbps:.1f} GB/s at {largest.size_bytes} bytes across {gpus} GPUs"
    return CheckResult(NAME, summary, findings, data, floor=Status.OK)


@dataclass(frozen=True)
class NcclConfig:
    """The single-node NCCL test (nccl-tests), an active check."""

    # Path of all_reduce_perf (or another nccl-tests binary) in the agent; None: not run.
    binary: str | None = None
    args: tuple[str, ...] = ("-b", "1G", "-e", "8G", "-f", "2")
    # The bus bandwidth at the largest size must reach this, in GB/s (1e9 bytes/s).
    min_busbw_gbps: float | None = None
    # The test's own bound (the check's deadline is this plus 15 s unless checks.deadlines.nccl).
    timeout_seconds: float = 300.0
    # Run even while GPU processes are active.
    force: bool = False

    def __post_init__(self) -> None:
        if self.timeout_seconds <= 0:
            raise ConfigError(f"timeout_seconds: {self.timeout_seconds:g} must be above 0")


CHECK: Check[NcclData] = Check(
    NAME,
    run,
    section=NcclConfig,
    active=True,
    loads_gpus=True,
    condition="GPUNetworkReady",
    least_deadline=lambda config: (
        config.section(NAME, NcclConfig).timeout_seconds + NCCL_DEADLINE_MARGIN
    ),
)
