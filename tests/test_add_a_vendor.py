"""docs/architecture.md's "How to add a GPU vendor" holds: a throwaway backend, one class that
reads through `Host` and one `VENDORS` entry, is asked for the node's GPUs wherever the GPU
interface is: the node's backends, and the `driver`, `gpus` and `workloads` checks' data,
where a vendor without rules of its own is shown from the interface alone (its driver, its
GPUs' identity and health, the GPUs as workloads get them) and judged by nothing, so those
checks cannot vouch for it (UNKNOWN); and every name the steps give exists."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from conftest import ROOT, SNAPSHOTS
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.driver import run as driver_check
from gpuprobe.checks.gpus import run as gpus_check
from gpuprobe.checks.rules import vendors
from gpuprobe.checks.rules.vendor_part import Part
from gpuprobe.checks.rules.vendors import VendorRules
from gpuprobe.checks.workloads import run as workloads_check
from gpuprobe.config import Config
from gpuprobe.gpu import backends
from gpuprobe.gpu.backend import (
    DriverFacts,
    GpuHealth,
    GpuIdentity,
    GpuProcess,
    GpuUse,
    MemoryHealth,
    Vendor,
)
from gpuprobe.gpu.view import GpuView
from gpuprobe.host import Host, snapshot_host
from gpuprobe.report import Action, Finding, Severity, Status
from test_add_a_check import resolve

STEPS = (ROOT / "docs" / "architecture.md").read_text().split("## How to add a GPU vendor", 1)[1]
DEVICES = "/sys/class/throwaway"
H100 = "synthetic-h100-8gpu-healthy"


# The new vendor's name (step 2 adds it to the `Vendor` Literal; the test names it as one).
THROWAWAY = cast(Vendor, "throwaway")


@dataclass
class ThrowawayBackend:
    """A vendor whose GPUs are the entries of `/sys/class/throwaway` (step 2): each GPU file
    holds its temperature, `version` the driver's; a process (pid 4242) runs on gpu1."""

    host: Host
    vendor: Vendor = field(default=THROWAWAY)

    def present(self) -> bool:
        return bool(self.host.fs.listdir(DEVICES))

    def driver(self) -> DriverFacts:
        version = self.host.fs.try_read_text(f"{DEVICES}/version")
        return DriverFacts(self.vendor, version.strip() if version else None)

    def gpus(self) -> list[GpuIdentity]:
        names = sorted(n for n in self.host.fs.listdir(DEVICES) if n.startswith("gpu"))
        return [
            GpuIdentity(self.vendor, i, name, f"0000:0{i}:00.0", "Throwaway T1")
            for i, name in enumerate(names)
        ]

    def health(self) -> list[GpuHealth]:
        return [
            GpuHealth(
                gpu,
                memory=MemoryHealth(uncorrectable_errors=0),
                temperature_celsius=float(self.host.fs.read_text(f"{DEVICES}/{gpu.uuid}")),
            )
            for gpu in self.gpus()
        ]

    def uses(self) -> list[GpuUse]:
        return [
            GpuUse(gpu, processes=[GpuProcess(4242, gpu.index)] if gpu.index == 1 else [])
            for gpu in self.gpus()
        ]


@pytest.fixture
def throwaway_node(tmp_path: Path) -> Host:
    """A node without GPUs (a real capture) whose root gains two throwaway GPUs."""
    root = tmp_path / "node"
    shutil.copytree(SNAPSHOTS / "kvm-epyc-nogpu", root, symlinks=True)
    devices = root / "rootfs" / DEVICES.lstrip("/")
    devices.mkdir(parents=True)
    (devices / "gpu0").write_text("41\n")
    (devices / "gpu1").write_text("57\n")
    (devices / "version").write_text("1.0\n")
    return snapshot_host(str(root))


def test_one_vendors_entry_gives_the_node_its_backend(
    throwaway_node: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backends, "VENDORS", (*backends.VENDORS, ThrowawayBackend))
    found = backends.node_backends(throwaway_node)
    assert [type(b) for b in found] == [ThrowawayBackend]
    assert [g.resource for g in found[0].gpus()] == ["gpu:0:gpu0", "gpu:1:gpu1"]
    assert found[0].driver() == DriverFacts(THROWAWAY, "1.0")
    # A node of the other vendors still gets exactly theirs, and not the new one.
    on_h100 = backends.node_backends(snapshot_host(str(SNAPSHOTS / H100)))
    assert [type(b).__name__ for b in on_h100] == ["NvidiaBackend"]


def test_the_gpu_view_asks_the_new_vendors_backend(
    throwaway_node: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view's per-vendor questions reach the new backend, not another vendor's."""
    monkeypatch.setattr(backends, "VENDORS", (*backends.VENDORS, ThrowawayBackend))
    view = GpuView(throwaway_node)
    assert view.driver(THROWAWAY) == DriverFacts(THROWAWAY, "1.0")
    assert view.gpu_count(THROWAWAY) == 2
    assert [h.temperature_celsius for h in view.health()] == [41.0, 57.0]
    assert [u.resource for u in view.uses()] == ["gpu:0:gpu0", "gpu:1:gpu1"]


def test_the_driver_check_shows_the_new_vendors_driver(
    throwaway_node: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node's only vendor has no rules: its version is the node's driver version and its
    facts are `data.throwaway`; NVIDIA's facts (the contract's first keys) count none."""
    monkeypatch.setattr(backends, "VENDORS", (*backends.VENDORS, ThrowawayBackend))
    result = driver_check(CheckContext(throwaway_node), Config())
    assert result.data == {
        "driver_version": "1.0",
        "cuda_driver_version": None,
        "nvidia_gpus_on_pci_bus": 0,
        "kernel_module_version": None,
        "kernel_module_type": None,
        "nvml_init_error": "LibraryNotFound",
        "vendors": ["throwaway"],
        "throwaway": {"vendor": "throwaway", "driver_version": "1.0"},
    }
    assert (result.summary, result.findings) == ("throwaway driver 1.0; no rules judge it", [])
    assert result.status is Status.UNKNOWN


def test_the_gpus_check_lists_the_new_vendors_gpus(
    throwaway_node: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new vendor's GPUs follow NVIDIA's (none here) in `data.gpus`, with their identity
    and health as the backend tells them, and the summary is theirs alone."""
    monkeypatch.setattr(backends, "VENDORS", (*backends.VENDORS, ThrowawayBackend))
    result = gpus_check(CheckContext(throwaway_node), Config())
    assert result.data == {
        "gpus_on_pci_bus": 0,
        "gpus_seen_by_nvml": None,
        "expected_gpus": None,
        "nvswitches_on_pci_bus": 0,
        "gpus": [
            {
                "index": 0,
                "vendor": "throwaway",
                "uuid": "gpu0",
                "name": "Throwaway T1",
                "pci_bus_id": "0000:00:00.0",
                "lost": False,
                "temperature_celsius": 41.0,
            },
            {
                "index": 1,
                "vendor": "throwaway",
                "uuid": "gpu1",
                "name": "Throwaway T1",
                "pci_bus_id": "0000:01:00.0",
                "lost": False,
                "temperature_celsius": 57.0,
            },
        ],
    }
    assert result.summary == "2 throwaway GPUs: Throwaway T1; no rules judge them"
    assert (result.findings, result.status) == ([], Status.UNKNOWN)


def test_the_workloads_check_shows_the_new_vendors_gpus_and_processes(
    throwaway_node: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPUs as workloads get them come from the backend's `uses()`: each GPU a device of
    the check's data, the process on gpu1 (not running here: no pod owns it) under it."""
    monkeypatch.setattr(backends, "VENDORS", (*backends.VENDORS, ThrowawayBackend))
    result = workloads_check(CheckContext(throwaway_node), Config())
    assert isinstance(result.data, dict)
    assert result.data["devices"] == [
        {"resource": "gpu:0:gpu0", "gpu": 0, "uuid": "gpu0", "holders": [], "processes": []},
        {
            "resource": "gpu:1:gpu1",
            "gpu": 1,
            "uuid": "gpu1",
            "holders": [],
            "processes": [{"pid": 4242}],
        },
    ]


@dataclass(frozen=True)
class ThrowawayDriverReading:
    """The throwaway vendor's driver rules (step 4): a driver older than 2.0 is too old."""

    version: str | None

    def facts(self, data: dict[str, Any]) -> None:
        data["throwaway"] = {"driver_version": self.version}

    def judge(self, config: Config, data: dict[str, Any], first: bool) -> Part:
        if first:
            data["driver_version"] = self.version
        if self.version is not None and self.version < "2.0":
            finding = Finding(
                "DRIVER_TOO_OLD",
                Severity.WARNING,
                f"throwaway driver {self.version} is older than 2.0: upgrade it",
                Action.FIX_CONFIG,
            )
            return Part(f"throwaway driver {self.version}", [finding])
        return Part(f"throwaway driver {self.version}")


class ThrowawayDriver:
    def read(self, ctx: CheckContext) -> ThrowawayDriverReading:
        return ThrowawayDriverReading(ThrowawayBackend(ctx.host).driver().version)


def test_the_new_vendors_registered_rules_judge_its_driver_and_leave_its_gpus_shown(
    throwaway_node: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rules registered for the vendor (step 4) judge its driver in the driver check; the
    gpus check, which it has no rules in, still shows its GPUs from the interface alone."""
    monkeypatch.setattr(backends, "VENDORS", (*backends.VENDORS, ThrowawayBackend))
    registered = VendorRules(THROWAWAY, driver=ThrowawayDriver())
    monkeypatch.setattr(vendors, "RULES", (*vendors.RULES, registered))
    result = driver_check(CheckContext(throwaway_node), Config())
    assert isinstance(result.data, dict)
    assert (result.data["driver_version"], result.data["throwaway"]) == (
        "1.0",
        {"driver_version": "1.0"},
    )
    assert result.summary == "throwaway driver 1.0"
    assert [(f.code, f.severity) for f in result.findings] == [("DRIVER_TOO_OLD", Severity.WARNING)]
    gpus = gpus_check(CheckContext(throwaway_node), Config())
    assert isinstance(gpus.data, dict)
    assert [g["uuid"] for g in gpus.data["gpus"]] == ["gpu0", "gpu1"]
    assert gpus.status is Status.UNKNOWN


def test_the_steps_are_numbered_and_name_what_exists() -> None:
    steps = re.findall(r"^(\d+)\. ", STEPS, re.M)
    assert steps == [str(n) for n in range(1, len(steps) + 1)] and len(steps) >= 4
    named = set(re.findall(r"`(gpuprobe(?:\.\w+)+)`", STEPS))
    assert {"gpuprobe.gpu.backends.VENDORS", "gpuprobe.gpu.backend.GpuBackend"} <= named
    for name in named:
        assert resolve(name) is not None, name
