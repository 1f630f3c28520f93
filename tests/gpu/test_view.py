"""The node's GPUs as a run of the checks sees them (`gpu.view.GpuView`, through the vendors'
backends) and NVML's event set drained (`gpu.event_drain`), on replayed snapshots; and that
the view is the one door: nothing imports the removed second and third doors."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

from conftest import ROOT
from gpuprobe.gpu.backend import DriverFacts, GpuIdentity, Vendor
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


def test_the_views_health_is_every_shown_vendors_in_order() -> None:
    """The synthetic ECC node's GPU 2 has 3 volatile uncorrectable errors
    (`tests/snapshots/synthesize.py`); an AMD node's health is AMD's backend's."""
    health = GpuView(snapshot_host(snapshot("synthetic-ecc-uncorrectable"))).health()
    assert [h.identity.index for h in health] == list(range(8))
    assert [h.memory.uncorrectable_errors for h in health] == [0, 0, 3, 0, 0, 0, 0, 0]
    amd = GpuView(snapshot_host(snapshot("synthetic-amd-xgmi-link-down")))
    assert amd.health() == amd.amd.health()
    assert [h.identity.vendor for h in amd.health()] == ["amd"] * 8


def test_the_views_uses_and_partitions_are_the_mig_devices_by_gpu() -> None:
    """GPU 0 of the mixed-MIG node is split into four MIG devices; the others are whole."""
    view = GpuView(snapshot_host(snapshot("synthetic-k8s-mig-mixed")))
    uses = view.uses()
    assert [(u.index, u.partitioned, len(u.partitions)) for u in uses] == [(0, True, 4)] + [
        (i, False, 0) for i in range(1, 8)
    ]
    partitions = view.partitions()
    assert [(p.gpu, p.slot, p.uuid) for p in partitions] == [
        (0, i, f"MIG-7b3d000{i}-1c9e-5a0f-8d42-00000000000{i}") for i in range(4)
    ]
    assert (partitions[0].gi, partitions[0].ci, partitions[0].resource) == (2, 0, "mig:0:2:0")
    assert partitions[0].name == "NVIDIA H100 80GB HBM3 MIG 3g.40gb"


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


VENDORS = get_args(Vendor)  # each vendor the GPU interface names
# The modules under checks/ and workloads/ that still import a vendor package outside their
# vendor's rules folder: none since the kernel log's checks (checks/xid/) read the vendors'
# kernel events from the kernel journal. The set may only stay empty.
NOT_YET_IN_A_VENDOR_FOLDER: set[str] = set()


def _vendor_imports(path: Path) -> set[str]:
    """The vendors whose package (`gpuprobe.gpu.<vendor>`) a module imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
            if node.module == "gpuprobe.gpu":
                names += [f"gpuprobe.gpu.{alias.name}" for alias in node.names]
        for vendor in VENDORS:
            package = f"gpuprobe.gpu.{vendor}"
            if any(n == package or n.startswith(package + ".") for n in names):
                found.add(vendor)
    return found


def _outside_their_vendor_folder() -> set[str]:
    """The modules under checks/ and workloads/ that import a vendor package and do not lie
    in that vendor's folder there (`checks/<vendor>/`, `workloads/<vendor>/`)."""
    package = ROOT / "agent" / "gpuprobe"
    found = set()
    for under in ("checks", "workloads"):
        for path in (package / under).rglob("*.py"):
            folder = path.relative_to(package / under).parts[0]
            if _vendor_imports(path) - {folder}:
                found.add(str(path.relative_to(package)))
    return found


def test_only_a_vendors_rules_folder_imports_its_vendor_package() -> None:
    """Vendor-neutral checks and workloads reach GPUs through the view (`ctx.gpus`) and the
    typed interface (`gpu.backend`); only `checks/<vendor>/` (and `workloads/<vendor>/`)
    import `gpuprobe.gpu.<vendor>`, and only their own vendor's."""
    assert _outside_their_vendor_folder() == NOT_YET_IN_A_VENDOR_FOLDER


def test_the_import_rule_sees_a_neutral_module_and_a_vendor_reaching_another(
    tmp_path: Path,
) -> None:
    """The scan finds what it looks for: a neutral check's import, and one vendor's rules
    importing the other vendor's package."""
    neutral = tmp_path / "neutral.py"
    neutral.write_text("from gpuprobe.gpu.amd.sysfs import AmdGpu\n")
    crossing = tmp_path / "crossing.py"
    crossing.write_text("from gpuprobe.gpu import nvidia\n")
    assert (_vendor_imports(neutral), _vendor_imports(crossing)) == ({"amd"}, {"nvidia"})


def _vendor_comparisons(path: Path) -> bool:
    """Whether a module compares anything with a vendor's name (`vendor == "amd"`)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Constant) and s.value in VENDORS for s in sides):
                return True
    return False


def test_no_neutral_check_or_workloads_module_branches_on_a_vendors_name() -> None:
    """A neutral check asks the vendors' registered rules (`checks.rules.vendors`) and the
    typed interface; it never says `if vendor == "amd"` (the names a device plugin gives a
    GPU are its backend's to say: `GpuUse.plugin_ids`, `GpuUse.device_node`)."""
    package = ROOT / "agent" / "gpuprobe"
    found = {
        str(path.relative_to(package))
        for under in ("checks", "workloads")
        for path in (package / under).rglob("*.py")
        if path.relative_to(package / under).parts[0] not in VENDORS and _vendor_comparisons(path)
    }
    assert found == set()


def test_the_vendor_branch_scan_sees_a_comparison(tmp_path: Path) -> None:
    branching = tmp_path / "branching.py"
    branching.write_text("def f(vendor: str) -> bool:\n    return vendor == 'amd'\n")
    named = tmp_path / "named.py"
    named.write_text("VENDOR = 'amd'\n")
    assert (_vendor_comparisons(branching), _vendor_comparisons(named)) == (True, False)


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
