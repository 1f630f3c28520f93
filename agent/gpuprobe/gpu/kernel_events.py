"""The kinds of kernel-log event the vendors' parsers read, and the mark each kind's lines bear.

Each parser declares its kinds (`EVENTS`: kind → the text every line of that kind holds):
NVIDIA's driver lines (`gpuprobe.gpu.kernel_log`: XIDs, XID-less faults, GPUs' UUIDs: all
`NVRM: `; SXids), amdgpu's (`gpuprobe.gpu.amd.faults`), PCIe AER's (`gpuprobe.gpu.aer`) and the
kernel's boot line. `PARSERS` registers them; the event path subscribes by kind (`markers`,
`kind_of`) instead of keeping its own copy of the texts.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuprobe.gpu import aer, kernel_log
from gpuprobe.gpu.amd import faults

# Every parser of kernel lines, by vendor: each module's EVENTS.
PARSERS = (kernel_log, faults, aer)
EVENTS: dict[str, str] = {kind: mark for parser in PARSERS for kind, mark in parser.EVENTS.items()}


def markers(kinds: Iterable[str]) -> tuple[str, ...]:
    """The texts the lines of `kinds` bear (raises KeyError for a kind no parser reads)."""
    return tuple(dict.fromkeys(EVENTS[kind] for kind in kinds))


def kind_of(line: str, kinds: Iterable[str]) -> str | None:
    """The first of `kinds` a kernel line is of, by its mark; None when of none."""
    for kind in kinds:
        if EVENTS[kind] in line:
            return kind
    return None
