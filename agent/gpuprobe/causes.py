"""Causes: the findings a person reads as one, grouped exactly for the text reports.

A node-wide fault often raises one finding per GPU (the fabric manager not running on an
NVSwitch node: eight FABRIC_NOT_READY findings whose messages differ only in the GPU they
name). The JSON report, the metrics and the node conditions keep one finding per GPU; the
text reports show one cause naming the GPUs it affects.

The grouping is exact, never a fuzzy match: a finding on a GPU (`gpu:<index>:<uuid>`) has
its own GPU's identity factored out of its message (`GPU 3`, `GPU 3 (0000:5d:00.0)` or
`GPU 3 (GPU-<uuid>)` with that GPU's index; `-i 3`, the index an nvidia-smi command takes;
the GPU's UUID) and two findings are one cause only when their check, code, severity,
action, pods and the rest of their message are all equal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpuprobe.report import Action, Finding, Severity

_GPU_RESOURCE = re.compile(r"gpu:(\d+):(.*)")
# A PCI address as NVML and sysfs write it (domain of 4 or 8 hex digits).
_PCI_ADDRESS = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
# Marks that stand for the GPU's identity in a template; NUL never occurs in a message the
# grouping accepts, so a template cannot be confused with a message's own text.
GPU_MARK = "\0gpu\0"
INDEX_MARK = "\0index\0"
UUID_MARK = "\0uuid\0"


@dataclass(frozen=True)
class Cause:
    """One cause as the text reports show it: one finding, or the findings on several GPUs
    whose messages differ only in the GPU they name (`findings` in report order)."""

    check: str
    findings: tuple[Finding, ...]
    template: str | None  # the message with the GPU factored out; None: not on a GPU

    @property
    def first(self) -> Finding:
        """The first finding: its code, severity, action and pods are every finding's."""
        return self.findings[0]

    @property
    def code(self) -> str:
        """The finding code all the findings share."""
        return self.first.code

    @property
    def severity(self) -> Severity:
        """The severity all the findings share."""
        return self.first.severity

    @property
    def action(self) -> Action:
        """The repair all the findings name."""
        return self.first.action

    @property
    def gpus(self) -> list[int]:
        """The indexes of the GPUs the cause affects (empty when not on GPUs)."""
        indexes = (gpu_index(f.resource) for f in self.findings)
        return [i for i in indexes if i is not None]

    @property
    def where(self) -> str:
        """What the cause is on: the finding's resource, or `GPUs 0-7` for many GPUs."""
        if len(self.findings) == 1:
            return self.first.resource
        return gpu_list(self.gpus)

    @property
    def message(self) -> str:
        """The message: the finding's own for one finding; for many, the shared text with a
        leading `GPU n (address): ` dropped (the cause names its GPUs), a leading `GPU n` as
        `each GPU`, and the GPU's index elsewhere written `<n>`."""
        if len(self.findings) == 1 or self.template is None:
            return self.first.message
        text = self.template.removeprefix(GPU_MARK + ": ")
        if text.startswith(GPU_MARK + " "):
            text = "each GPU" + text.removeprefix(GPU_MARK)
        return (
            text.replace(GPU_MARK, "GPU <n>")
            .replace(INDEX_MARK, "<n>")
            .replace(UUID_MARK, "<uuid>")
        )


def same_on_every_node(cause: Cause) -> tuple[object, ...]:
    """What makes causes on different nodes one (the audit's first things to do): the same
    check, code, severity, action, pods and message (on GPUs: with the GPU factored out;
    else on the same resource)."""
    text = cause.template if cause.template is not None else cause.first.message
    resource = None if cause.template is not None else cause.first.resource
    return (cause.check, cause.code, cause.severity, cause.action, cause.first.pods, resource, text)


def gpu_index(resource: str) -> int | None:
    """The GPU index of a `gpu:<index>:<uuid>` resource (None for any other resource)."""
    match = _GPU_RESOURCE.fullmatch(resource)
    return int(match[1]) if match else None


def template(finding: Finding) -> str | None:
    """The finding's message with its own GPU's identity replaced by marks (None when the
    finding is not on a GPU, or its message holds a NUL the marks could be confused with)."""
    match = _GPU_RESOURCE.fullmatch(finding.resource)
    if match is None or "\0" in finding.message:
        return None
    index, uuid = match[1], match[2]
    # The GPU's label, as the checks write it: its index, then its PCI address or UUID.
    names = _PCI_ADDRESS + ("|" + re.escape(uuid) if uuid else "")
    # Not a longer number or a decimal ("GPU 10", "GPU 1.5"); a sentence's full stop may follow.
    label = rf"\bGPU {index}(?: \((?:{names})\))?(?!\w|\.\d)"
    text = re.sub(label, lambda _: GPU_MARK, finding.message)
    text = re.sub(rf"(?<=-i ){index}\b", lambda _: INDEX_MARK, text)
    return text.replace(uuid, UUID_MARK) if uuid else text


def group(findings: Iterable[tuple[str, Finding]]) -> list[Cause]:
    """The causes of (check, finding) pairs, in the order their first findings come: findings
    on GPUs whose check, code, severity, action, pods and templates are equal are one cause."""
    causes: dict[object, list[Finding]] = {}
    checks: dict[object, tuple[str, str | None]] = {}
    for n, (check, finding) in enumerate(findings):
        shape = template(finding)
        key: object = (
            (check, finding.code, finding.severity, finding.action, finding.pods, shape)
            if shape is not None
            else n  # not on a GPU: a cause of its own
        )
        causes.setdefault(key, []).append(finding)
        checks.setdefault(key, (check, shape))
    return [Cause(checks[k][0], tuple(fs), checks[k][1]) for k, fs in causes.items()]


def worst_first(causes: Iterable[Cause]) -> list[Cause]:
    """The causes ordered by severity, worst first (CRITICAL, WARNING, UNKNOWN), keeping the
    report's order among equals."""
    return sorted(causes, key=lambda c: -c.severity.status.rank)


def gpu_list(indexes: Iterable[int]) -> str:
    """`GPU 3`, `GPUs 2, 6`, `GPUs 0-7`, `GPUs 0-3, 5`: runs of three or more as ranges."""
    ordered = sorted(set(indexes))
    parts: list[str] = []
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        if end - start >= 2:
            parts.append(f"{ordered[start]}-{ordered[end]}")
        else:
            parts += [str(i) for i in ordered[start : end + 1]]
        start = end + 1
    return ("GPU " if len(ordered) == 1 else "GPUs ") + ", ".join(parts)
