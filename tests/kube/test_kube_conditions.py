"""Node conditions from a report: status, reason, message, and what is written when."""

from __future__ import annotations

from kube_reports import GPU_LOST, NVLINK_DOWN, T0, THERMAL, TIMEOUT, XID_APP, later, report

from gpuprobe.checks import registry
from gpuprobe.effects.conditions import MAX_MESSAGE, Condition, camel, desired, to_write
from gpuprobe.report import Finding, Severity

# The default node conditions, as the checks' records group them.
DEFAULT_CONDITIONS = registry.conditions()


def by_type(conditions: list[Condition]) -> dict[str, Condition]:
    return {c.type: c for c in conditions}


def test_codes_become_camel_case_reasons() -> None:
    assert camel("GPU_LOST") == "GpuLost"
    assert camel("DRIVER_LIBRARY_MISMATCH") == "DriverLibraryMismatch"
    assert camel("XID") == "Xid"
    assert camel("PCIE_AER_FATAL") == "PcieAerFatal"


def test_a_clean_report_makes_every_ran_group_true_and_leaves_the_others_out() -> None:
    found = by_type(desired(report(), DEFAULT_CONDITIONS))
    # network, rdma, nccl and storage did not run: their conditions are left as they are
    assert sorted(found) == ["GPUHardwareReady", "GPURuntimeReady"]
    hardware = found["GPUHardwareReady"]
    assert (hardware.status, hardware.reason) == ("True", "AllChecksPassed")
    assert hardware.message == "gpuprobe: driver, gpus, mig, xid passed"
    assert (
        found["GPURuntimeReady"].message == "gpuprobe: toolkit, cdi, device_plugin, sharing passed"
    )


def test_a_critical_finding_makes_its_group_false_with_the_worst_first() -> None:
    r = report(("xid", XID_APP), ("gpus", THERMAL), ("gpus", GPU_LOST), ("mig", NVLINK_DOWN))
    hardware = by_type(desired(r, DEFAULT_CONDITIONS))["GPUHardwareReady"]
    assert hardware == Condition(
        "GPUHardwareReady",
        "False",
        "GpuLost",
        f"{GPU_LOST.message} ({GPU_LOST.resource}) and 3 more",
    )
    assert by_type(desired(r, DEFAULT_CONDITIONS))["GPURuntimeReady"].status == "True"


def test_warnings_keep_the_group_true_but_are_named() -> None:
    hardware = by_type(desired(report(("gpus", THERMAL)), DEFAULT_CONDITIONS))["GPUHardwareReady"]
    assert (hardware.status, hardware.reason) == ("True", "ThermalSlowdown")
    assert hardware.message == f"{THERMAL.message} ({THERMAL.resource})"


def test_an_unknown_check_makes_the_group_unknown_unless_something_is_critical() -> None:
    timed_out = report(("xid", TIMEOUT), ("gpus", THERMAL), unknown=("xid",))
    hardware = by_type(desired(timed_out, DEFAULT_CONDITIONS))["GPUHardwareReady"]
    assert (hardware.status, hardware.reason) == ("Unknown", "CheckTimeout")
    assert hardware.message == f"{TIMEOUT.message} (node) and 1 more"
    silent = by_type(desired(report(unknown=("mig",)), DEFAULT_CONDITIONS))["GPUHardwareReady"]
    assert (silent.status, silent.reason, silent.message) == (
        "Unknown",
        "CheckUnknown",
        "mig: mig: 0 findings",
    )
    both = report(("xid", TIMEOUT), ("gpus", GPU_LOST), unknown=("xid",))
    assert by_type(desired(both, DEFAULT_CONDITIONS))["GPUHardwareReady"].status == "False"


def test_messages_are_cut_to_1024_characters_keeping_the_count() -> None:
    long = Finding("GPU_LOST", Severity.CRITICAL, "x" * 3000, resource="gpu:0:GPU-0")
    hardware = by_type(desired(report(("gpus", long), ("gpus", GPU_LOST)), DEFAULT_CONDITIONS))[
        "GPUHardwareReady"
    ]
    assert len(hardware.message) == MAX_MESSAGE
    assert hardware.message.endswith("x… and 1 more")


def test_the_groups_and_their_names_are_configuration() -> None:
    eks = {"AcceleratedHardwareReady": ("driver", "gpus", "mig", "xid")}
    (only,) = desired(report(("gpus", GPU_LOST)), eks)
    assert (only.type, only.status, only.reason) == ("AcceleratedHardwareReady", "False", "GpuLost")


def test_last_transition_time_moves_only_with_the_status() -> None:
    false = desired(report(("gpus", GPU_LOST)), DEFAULT_CONDITIONS)
    (written,) = [
        c for c in to_write(false, [], T0, heartbeat=False) if c["type"] == "GPUHardwareReady"
    ]
    assert written["lastTransitionTime"] == written["lastHeartbeatTime"] == "2026-12-01T21:00:00Z"
    # still False, another reason: the transition time stays
    other = desired(report(("mig", NVLINK_DOWN)), DEFAULT_CONDITIONS)
    current = [written]
    (changed,) = [
        c for c in to_write(other, current, later(60), False) if c["type"] == "GPUHardwareReady"
    ]
    assert (changed["reason"], changed["lastTransitionTime"]) == (
        "NvlinkDown",
        "2026-12-01T21:00:00Z",
    )
    assert changed["lastHeartbeatTime"] == "2026-12-01T21:01:00Z"
    # True again: the transition time moves
    clean = desired(report(), DEFAULT_CONDITIONS)
    (back,) = [
        c for c in to_write(clean, [changed], later(120), False) if c["type"] == "GPUHardwareReady"
    ]
    assert back["lastTransitionTime"] == "2026-12-01T21:02:00Z"


def test_unchanged_conditions_are_written_only_on_the_heartbeat() -> None:
    clean = desired(report(), DEFAULT_CONDITIONS)
    first = to_write(clean, [], T0, heartbeat=True)
    assert to_write(clean, first, later(60), heartbeat=False) == []
    beat = to_write(clean, first, later(240), heartbeat=True)
    assert [c["lastHeartbeatTime"] for c in beat] == ["2026-12-01T21:04:00Z"] * 2
    assert [c["lastTransitionTime"] for c in beat] == ["2026-12-01T21:00:00Z"] * 2
