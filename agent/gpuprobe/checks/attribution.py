"""Names the pods each GPU finding affects, from the attribution of the check whose record
says its data names them (`attributes_pods`: the `workloads` check).

Runs after the checks, on the whole report: every finding on a `gpu:<index>:<uuid>` or
`mig:<gpu>:<gi>:<ci>` resource gets the pods that hold or use that device in its `pods` list,
and its message says so. A GPU's finding affects the pods on its MIG devices too; a MIG
device's finding affects the pods that hold its whole GPU. A notice that the node itself goes
(`node_ends`: the codes the records announce it by) affects every pod on any of its GPUs.
Checks stay unaware of pods: one
step, here, for all of them. Without a `workloads` result (it did not run, or found nobody)
findings are left as they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from gpuprobe.checks import registry
from gpuprobe.report import CheckResult, Finding, NodeReport, PodRef


def node_ends() -> frozenset[str]:
    """The node findings that end every GPU pod on the node: the codes the checks' records
    announce the node's end by (`notices`: the lifecycle check's)."""
    return frozenset(code for _, code, _ in registry.notices())


def attribute_findings(results: list[CheckResult]) -> list[CheckResult]:
    """The results with every other check's GPU findings naming their pods (new objects;
    the results given are left unchanged)."""
    source = registry.pod_attribution()
    workloads = next((r for r in results if r.name == source), None)
    if workloads is None:
        return results
    pods = PodsByDevice(workloads.data.get("devices") or [])
    if not pods:
        return results
    ends = node_ends()
    return [r if r is workloads else _attributed(r, pods, ends) for r in results]


def attribute_report(report: NodeReport) -> NodeReport:
    """The report with its GPU findings naming their pods (the report itself when none
    does): the pipeline's post-pass (`gpuprobe.pipeline`)."""
    checks = attribute_findings(report.checks)
    return report if checks is report.checks else replace(report, checks=checks)


def _attributed(result: CheckResult, pods: PodsByDevice, ends: frozenset[str]) -> CheckResult:
    findings = [_with_pods(f, _affected(f, pods, ends)) for f in result.findings]
    if all(new is old for new, old in zip(findings, result.findings, strict=True)):
        return result
    return replace(result, findings=findings)


def _affected(finding: Finding, pods: PodsByDevice, ends: frozenset[str]) -> tuple[PodRef, ...]:
    if finding.resource == "node" and finding.code in ends:
        return pods.everyone()
    return pods.affected(finding.resource)


def _with_pods(finding: Finding, pods: tuple[PodRef, ...]) -> Finding:
    if not pods or finding.pods:
        return finding
    names = ", ".join(str(p) for p in pods)
    message = f"{finding.message}; affects pod{'' if len(pods) == 1 else 's'} {names}"
    return replace(finding, message=message, pods=pods)


class PodsByDevice:
    """The pods on each GPU (by index) and MIG device, from the workloads check's data."""

    def __init__(self, devices: Iterable[Any]) -> None:
        self.gpu: dict[str, set[PodRef]] = {}  # whole-GPU holders and users, by index
        self.everything_on_gpu: dict[str, set[PodRef]] = {}
        self.mig: dict[str, set[PodRef]] = {}
        for device in devices:
            if not isinstance(device, Mapping):
                continue
            found = set(_pods(device))
            index = str(device.get("gpu"))
            self.everything_on_gpu.setdefault(index, set()).update(found)
            if device.get("mig"):
                self.mig[str(device.get("resource"))] = found
            else:
                self.gpu.setdefault(index, set()).update(found)

    def __bool__(self) -> bool:
        return any(self.everything_on_gpu.values())

    def everyone(self) -> tuple[PodRef, ...]:
        """Every pod on any GPU or MIG device of the node."""
        return tuple(sorted(set().union(*self.everything_on_gpu.values())))

    def affected(self, resource: str) -> tuple[PodRef, ...]:
        """The pods a finding on `resource` affects (none for a non-GPU resource)."""
        parts = resource.split(":")
        if parts[0] == "gpu" and len(parts) >= 2:
            return tuple(sorted(self.everything_on_gpu.get(parts[1], set())))
        if parts[0] == "mig" and len(parts) == 4:
            found = self.mig.get(resource, set()) | self.gpu.get(parts[1], set())
            return tuple(sorted(found))
        return ()


def _pods(device: Mapping[str, Any]) -> Iterable[PodRef]:
    for entry in [*(device.get("holders") or []), *(device.get("processes") or [])]:
        if isinstance(entry, Mapping) and entry.get("namespace") and entry.get("pod"):
            yield PodRef.from_dict(entry)
