"""Metric families as plain data: what a check's renderer makes of the check's data.

A check's record (`gpuprobe.checks.record.Check`) may carry a renderer that turns the check's
data into `Family` values; the daemon's collector (`gpuprobe.serve.metrics`) hands them to
Prometheus. The checks so stay free of the Prometheus client, which one-shot `check` never
imports, and a renderer is a plain function that a test can call on any data.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("gpuprobe.serve")


@dataclass
class Family:
    """One metric family: its name (a counter's without `_total`), help, labels and samples."""

    name: str
    help: str
    labels: tuple[str, ...] = ()
    counter: bool = False
    samples: list[tuple[tuple[str, ...], float]] = field(default_factory=list)

    def add(self, labels: Sequence[str], value: float) -> None:
        """Add one sample with these label values (in the family's label order)."""
        self.samples.append((tuple(labels), value))


# A check's data may lack a value or hold an odd one (a report read from elsewhere, a GPU that
# answered little): these give the value a renderer can use, or None for "no sample".


def number(value: Any) -> float | None:
    """A finite number (booleans as 0/1), else None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        try:
            as_float = float(value)
        except OverflowError:  # an integer beyond a double (10^400): no sample can say it
            log.warning(
                "metric value dropped", extra={"reason": "beyond a float", "value": str(value)[:40]}
            )
            return None
        return as_float if math.isfinite(as_float) else None
    return None


def text(value: Any) -> str | None:
    """A non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def mappings(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a list from a check's data (anything else: none)."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


# The labels that name a GPU in every per-GPU family.
GPU_LABELS = ("gpu", "uuid")


def gpu_labels(gpu: Mapping[str, Any], key: str = "index") -> list[str]:
    """The `gpu` and `uuid` label values of a GPU's entry (empty when it lacks them)."""
    index = number(gpu.get(key))
    return [str(int(index)) if index is not None else "", text(gpu.get("uuid")) or ""]
