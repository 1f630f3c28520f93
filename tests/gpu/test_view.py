"""The node's GPUs as a run of the checks sees them (`gpu.view.GpuView`, through the vendors'
backends) and NVML's event set drained (`gpu.event_drain`), on replayed snapshots; and that
the view is the one door: nothing imports the removed second and third doors."""

from __future__ import annotations

import ast

from conftest import ROOT
from gpuprobe.gpu.backend import DriverFacts, GpuIdentity
from gpuprobe.gpu.event_drain import DrainedEvent, EventDrain, drain_events, recovery_action
from gpuprobe.gpu.view import GpuView
from gpuprobe.host import snapshot_host
from helpers import snapshot

REMOVED = ("gpuprobe.node", "gpuprobe.gpu.node_gpus")


def test_nvmls_gpus_driver_and_the_pci_bus_of_an_nvidia_node() -> None:
    view = GpuView(snapshot_host(snapshot("synthetic-xid-events-only")))
    assert view.nvidia.count() == 8
    assert view.nvidia.listed()[:2] == [
        GpuIdentity("nvidia", 0, "GPU-5f1c0000-8e2b-4c1d-9a7e-000000000000", "0000:18:00.0", None),
        GpuIdentity("nvidia", 1, "GPU-5f1c0001-8e2b-4c1d-9a7e-000000000001", "0000:2a:00.0", None),
    ]
    assert view.driver("nvidia") == DriverFacts(
        "nvidia", "550.54.15", library_error=None, library_version="550.54.15"
    )
    assert (view.gpu_count("nvidia"), len(view.nvidia.bus_gpus())) == (8, 8)
    assert (view.gpu_count("amd"), view.amd.sysfs_gpus()) == (0, [])


def test_an_amd_node_has_amd_gpus_and_no_nvml() -> None:
    view = GpuView(snapshot_host(snapshot("synthetic-amd-ring-timeout-reset")))
    assert view.amd.bus()[:2] == [("0000:0c:00.0", 0x74A1), ("0000:22:00.0", 0x74A1)]
    assert [g.pci_address for g in view.amd.sysfs_gpus()][:2] == ["0000:0c:00.0", "0000:22:00.0"]
    assert (view.nvidia.count(), view.nvidia.listed()) == (None, [])
    assert view.driver("nvidia").library_version is None
    assert view.nvidia.bus_devices() == []
    assert [b.vendor for b in view.backends()] == ["amd"]


def test_the_driver_version_falls_back_to_the_kernel_module_when_nvml_cannot_start() -> None:
    """NVML did not start (the library does not match the loaded module, this capture's
    `LibRmVersionMismatch`): the version in use is the module's, NVML's own is unknown."""
    facts = GpuView(snapshot_host(snapshot("synthetic-library-mismatch"))).driver("nvidia")
    assert facts == DriverFacts(
        "nvidia", "550.54.15", library_error="LibRmVersionMismatch", library_version=None
    )


def test_nothing_imports_the_removed_doors_to_the_gpus() -> None:
    """`gpu.view` (through the vendors' backends) is the one way to the node's GPUs: the old
    `node` and `gpu.node_gpus` modules are gone and nothing imports them."""
    importers = []
    for tree in ("agent", "tests", "bench"):
        for path in sorted((ROOT / tree).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                if any(name in REMOVED for name in names):
                    importers.append(str(path.relative_to(ROOT)))
    assert importers == []
    assert not (ROOT / "agent/gpuprobe/node.py").exists()
    assert not (ROOT / "agent/gpuprobe/gpu/node_gpus.py").exists()


# The modules under checks/ and workloads/ that still import a vendor package (gpu.nvidia,
# gpu.amd) directly rather than reading through the GPU view. The list may only shrink: a
# module moved onto the view leaves it (the test fails until it does), and no new module
# joins it; the vendor rules that must stay vendor-specific are to move into one folder per
# vendor.
VENDOR_IMPORTERS = {
    "checks/amd/xid_amdgpu.py",
    "checks/driver.py",
    "checks/gpus.py",
    "checks/mig.py",
    "checks/nvidia/xid_events.py",
    "checks/pods.py",
    "checks/rules/amd_gpus.py",
    "checks/rules/gpu_health.py",
    "checks/rules/imex.py",
    "checks/sharing.py",
    "checks/toolkit.py",
    "workloads/attribution.py",
}


def _vendor_importers() -> set[str]:
    package = ROOT / "agent" / "gpuprobe"
    found = set()
    for under in ("checks", "workloads"):
        for path in (package / under).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                    if node.module == "gpuprobe.gpu":
                        names += [f"gpuprobe.gpu.{alias.name}" for alias in node.names]
                vendor = ("gpuprobe.gpu.nvidia", "gpuprobe.gpu.amd")
                if any(n == v or n.startswith(v + ".") for n in names for v in vendor):
                    found.add(str(path.relative_to(package)))
    return found


def test_no_new_module_under_checks_or_workloads_imports_a_vendor_package() -> None:
    assert _vendor_importers() == VENDOR_IMPORTERS


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
