"""The node's GPUs as the non-GPU checks ask for them (`gpu.node_gpus`) and NVML's event set
drained (`gpu.event_drain`), on replayed snapshots."""

from __future__ import annotations

from gpuprobe.gpu import node_gpus
from gpuprobe.gpu.event_drain import DrainedEvent, EventDrain, drain_events, recovery_action
from gpuprobe.gpu.node_gpus import NvmlGpu
from gpuprobe.host import snapshot_host
from helpers import snapshot


def test_nvmls_gpus_driver_and_the_pci_bus_of_an_nvidia_node() -> None:
    host = snapshot_host(snapshot("synthetic-xid-events-only"))
    assert node_gpus.nvml_gpu_count(host) == 8
    assert node_gpus.nvml_gpus(host)[:2] == [
        NvmlGpu(0, "GPU-5f1c0000-8e2b-4c1d-9a7e-000000000000", "0000:18:00.0"),
        NvmlGpu(1, "GPU-5f1c0001-8e2b-4c1d-9a7e-000000000001", "0000:2a:00.0"),
    ]
    assert node_gpus.nvidia_driver_version(host) == "550.54.15"
    assert len(node_gpus.nvidia_pci_gpus(host)) == 8
    assert node_gpus.amd_gpus(host) == []


def test_an_amd_node_has_amd_gpus_and_no_nvml() -> None:
    host = snapshot_host(snapshot("synthetic-amd-ring-timeout-reset"))
    assert node_gpus.amd_gpu_addresses(host)[:2] == [
        ("0000:0c:00.0", 0x74A1),
        ("0000:22:00.0", 0x74A1),
    ]
    assert [g.pci_address for g in node_gpus.amd_gpus(host)][:2] == ["0000:0c:00.0", "0000:22:00.0"]
    assert (node_gpus.nvml_gpu_count(host), node_gpus.nvml_gpus(host)) == (None, [])
    assert node_gpus.nvidia_driver_version(host) is None
    assert node_gpus.nvidia_pci_devices(host) == []


def test_xid_events_are_drained_with_an_xid_154s_recovery_field() -> None:
    host = snapshot_host(snapshot("synthetic-xid-events-only"))
    assert drain_events(host) == EventDrain(
        (
            DrainedEvent(1, "XidCriticalError", 149, "2026-11-29T20:40:00Z"),
            DrainedEvent(2, "XidCriticalError", 154, "2026-11-29T20:41:00Z", "", "NONE"),
            DrainedEvent(4, "XidCriticalError", 154, "2026-11-29T20:42:00Z", "", "NODE_REBOOT"),
        )
    )
    assert drain_events(host) == EventDrain(())  # drained: a replay hands its events over once
    assert recovery_action(host, 0) == "NONE"


def test_critical_events_keep_a_recovery_events_field_and_drop_other_types() -> None:
    drained = drain_events(snapshot_host(snapshot("synthetic-nvml-critical-events")))
    assert [(e.device, e.type, e.detail) for e in drained.events] == [
        (2, "DoubleBitEccError", ""),
        (4, "FatalPoisonError", ""),
        (5, "DramRetirementFailure", ""),
        (6, "GpuUnavailableError", ""),
        (7, "GpuRecoveryAction", "NODE_REBOOT"),
        (1, "GpuRecoveryAction", ""),
        (0, "GpuRecoveryAction", "NONE"),
        (2, "DoubleBitEccError", ""),
    ]


def test_a_node_without_nvml_drains_nothing_and_says_why() -> None:
    host = snapshot_host(snapshot("kvm-epyc-nogpu"))
    assert drain_events(host) == EventDrain((), init_error="LibraryNotFound")
