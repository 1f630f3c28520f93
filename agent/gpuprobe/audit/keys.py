"""The parts of the checks' data the audit reads, as the checks' records name them.

The audit asks each agent for its summary view and converts only these keys of each check's
data (`wire.report_from_proto`); its helper processes get them from it, so only the process
that starts the audit loads the check records.
"""

from __future__ import annotations

from gpuprobe.checks import registry
from gpuprobe.report_view import DataKeys


def data_keys() -> DataKeys:
    """The parts of the checks' data the audit reads; it converts only these. They are the
    summary view's facts, which each check's record names (an agent sends them when asked for
    the summary), and the workloads facts the usage digest is summed from, for an agent whose
    check sends no digest."""
    summary = registry.summary_keys()
    return {
        **summary,
        "workloads": {
            **summary["workloads"],
            "devices": {
                "gpu": None,
                "mig": {"uuid": None},
                "holders": {"namespace": None},
                "processes": {"pid": None},
            },
            "accounting": {
                "since": None,
                "gpus": {
                    "allocated_seconds": None,
                    "busy_seconds": None,
                    "idle_allocated_seconds": None,  # by namespace
                    "unallocated_seconds": None,
                },
            },
        },
    }
