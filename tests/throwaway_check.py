"""A throwaway check, written the way docs/architecture.md's "How to add a check" says: one
module (this one) and one registry line (`register`), with a settings section, metrics, a node
condition group and summary keys. `tests/test_add_a_check.py` runs it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypedDict

from gpuprobe.checks import registry
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check
from gpuprobe.config import Config
from gpuprobe.families import Family
from gpuprobe.gpu.backends import node_backends
from gpuprobe.report import Action, CheckResult, Finding, Severity

NAME = "throwaway"


class ThrowawayData(TypedDict):
    """The check's data."""

    gpus: int
    source: str  # the vendors whose GPUs were counted: not for the summary view


@dataclass(frozen=True)
class ThrowawayConfig:
    """The check's section of the config file."""

    max_gpus: int | None = None


def run(ctx: CheckContext, config: Config) -> CheckResult:
    """Count the GPUs the node's GPU drivers see; more than `throwaway.max_gpus` is a
    WARNING. The GPUs come through the GPU interface (a reader), never from NVML by name."""
    settings = config.section(NAME, ThrowawayConfig)
    backends = node_backends(ctx.host)
    gpus = sum(len(backend.gpus()) for backend in backends)
    data = ThrowawayData(gpus=gpus, source=",".join(backend.vendor for backend in backends))
    findings = []
    if settings.max_gpus is not None and gpus > settings.max_gpus:
        findings.append(
            Finding(
                "THROWAWAY_GPUS_OVER",
                Severity.WARNING,
                f"{gpus} GPUs, more than {settings.max_gpus}",
                Action.NONE,
            )
        )
    return CheckResult(NAME, f"{gpus} GPUs", findings, dict(data))


def families(data: ThrowawayData) -> Iterator[Family]:
    """`gpuprobe_throwaway_gpus` from the check's data."""
    family = Family("gpuprobe_throwaway_gpus", "GPUs the throwaway check counted")
    family.add([], data["gpus"])
    yield family


CHECK = Check(
    NAME,
    run,
    section=ThrowawayConfig,
    metrics=families,
    condition="GPUHardwareReady",
    summary_keys={"gpus": None},
)


def register() -> None:
    """The registry line (`registry.ORDER` in the source; here added where it is read)."""
    registry.CHECKS[NAME] = CHECK
