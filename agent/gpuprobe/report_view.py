"""The summary view of a report: what a fleet audit reads of each node, and nothing more.

An audit of thousands of agents compares a few facts across nodes (driver and CUDA versions,
the GPU inventory, the MIG layout, the toolkit's and runtimes' settings, the sharing units)
and lists the findings. The agent keeps the summary view of its latest report beside the
whole one, so an audit asks for a few kilobytes per node instead of every GPU's telemetry;
the audit names the same keys when it reads an agent that sends the whole report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from gpuprobe.report import NodeReport

# Which keys of a check's data to keep: key → its own keys (for a mapping, or a list of
# mappings), or None to keep the value whole.
DataKeys = Mapping[str, "DataKeys | None"]

# The facts the summary view keeps, per check (a check not named keeps no data). The fleet
# audit's skew fields, counts and usage read these (gpuprobe.audit.facts, .usage).
SUMMARY_DATA: dict[str, DataKeys] = {
    "driver": {
        "driver_version": None,
        "cuda_driver_version": None,
        "amd": {"amdgpu_version": None, "rocm_version": None},
    },
    "gpus": {
        "gpus_on_pci_bus": None,
        "gpus_seen_by_nvml": None,
        "gpus_seen_by_amdgpu": None,
        "gpus": {"index": None, "vendor": None, "name": None, "lost": None, "idle": None},
    },
    "mig": {
        "gpus": {
            "index": None,
            "lost": None,
            "mig_mode_current": None,
            "gpu_instances": {"compute_instances": {"profile": None}},
        }
    },
    "toolkit": {
        "gpus": None,
        "toolkit_installed": None,
        "toolkit_config": {"mode": None},
        "engines": {
            "flavor": None,
            "default_runtime": None,
            "in_use": None,
            "runs_gpu_containers": None,
        },
    },
    "sharing": {"strategy": None, "resources": {"schedulable_units": None}},
    # The audit's usage totals (gpuprobe.audit.usage): whether the kubelet answered, and the
    # node's usage digest (a dozen numbers, not every device's holders).
    "workloads": {
        "kubelet": {"state": None},
        "usage": {
            "gpus": {"allocated": None, "busy": None, "allocated_idle": None, "unallocated": None},
            "seconds": {"allocated": None, "busy": None, "unallocated": None},
            "idle_allocated_seconds": None,  # by namespace
            "since": None,
        },
    },
    # The audit's workload failures (gpuprobe.audit.facts): pods failing for GPU reasons,
    # images that need a newer driver.
    "pods": {
        "containers": {"namespace": None, "image": None, "cuda_required": None, "verdict": None},
        "failures": {"namespace": None, "pod": None, "cause": None},
    },
}


def pick(data: Mapping[str, Any], keys: DataKeys) -> dict[str, Any]:
    """Of `data`, only `keys` (recursively through mappings and lists of mappings)."""
    return {k: _pick_value(data[k], sub) for k, sub in keys.items() if k in data}


def _pick_value(value: Any, keys: DataKeys | None) -> Any:
    if keys is None:
        return value
    if isinstance(value, Mapping):
        return pick(value, keys)
    if isinstance(value, list):
        return [_pick_value(v, keys) for v in value]
    return value


def summary(report: NodeReport) -> NodeReport:
    """The report's summary view: every check whole but for its data, of which only the
    SUMMARY_DATA facts are kept."""
    checks = []
    for check in report.checks:
        keys = SUMMARY_DATA.get(check.name)
        checks.append(replace(check, data=pick(check.data, keys) if keys is not None else {}))
    return replace(report, checks=checks)
