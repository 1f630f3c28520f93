"""docs/architecture.md's "How to add a GPU vendor" holds: a throwaway backend, one class that
reads through `Host` and one `VENDORS` entry, is asked for the node's GPUs wherever the GPU
interface is (the node's backends, the driver check's vendors, a check that counts through
the interface), and every name the steps give exists."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT, SNAPSHOTS
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.driver import run as driver_check
from gpuprobe.config import Config
from gpuprobe.gpu import backends
from gpuprobe.gpu.backend import DriverFacts, GpuHealth, GpuIdentity, GpuUse, Vendor
from gpuprobe.host import Host, snapshot_host
from test_add_a_check import resolve

STEPS = (ROOT / "docs" / "architecture.md").read_text().split("## How to add a GPU vendor", 1)[1]
DEVICES = "/sys/class/throwaway"
H100 = "synthetic-h100-8gpu-healthy"


@dataclass
class ThrowawayBackend:
    """A vendor whose GPUs are the entries of `/sys/class/throwaway` (step 2)."""

    host: Host
    vendor: Vendor = "nvidia"  # a vendor name the Literal knows; the class is what is new

    def present(self) -> bool:
        return bool(self.host.fs.listdir(DEVICES))

    def driver(self) -> DriverFacts:
        return DriverFacts(self.vendor, self.host.fs.try_read_text(f"{DEVICES}/version"))

    def gpus(self) -> list[GpuIdentity]:
        names = sorted(n for n in self.host.fs.listdir(DEVICES) if n.startswith("gpu"))
        return [
            GpuIdentity(self.vendor, i, name, None, "Throwaway") for i, name in enumerate(names)
        ]

    def health(self) -> list[GpuHealth]:
        return [GpuHealth(gpu) for gpu in self.gpus()]

    def uses(self) -> list[GpuUse]:
        return [GpuUse(gpu) for gpu in self.gpus()]


@pytest.fixture
def throwaway_node(tmp_path: Path) -> Host:
    """A node without GPUs (a real capture) whose root gains two throwaway GPUs."""
    root = tmp_path / "node"
    shutil.copytree(SNAPSHOTS / "kvm-epyc-nogpu", root, symlinks=True)
    devices = root / "rootfs" / DEVICES.lstrip("/")
    devices.mkdir(parents=True)
    for name in ("gpu0", "gpu1", "version"):
        (devices / name).write_text("1.0\n")
    return snapshot_host(str(root))


def test_one_vendors_entry_gives_the_node_its_backend(
    throwaway_node: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backends, "VENDORS", (*backends.VENDORS, ThrowawayBackend))
    found = backends.node_backends(throwaway_node)
    assert [type(b) for b in found] == [ThrowawayBackend]
    assert [g.resource for g in found[0].gpus()] == ["gpu:0:gpu0", "gpu:1:gpu1"]
    assert found[0].driver() == DriverFacts("nvidia", "1.0\n")
    # A node of the other vendors still gets exactly theirs, and not the new one.
    on_h100 = backends.node_backends(snapshot_host(str(SNAPSHOTS / H100)))
    assert [type(b).__name__ for b in on_h100] == ["NvidiaBackend"]


def test_the_driver_check_names_the_new_vendor(
    throwaway_node: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backends, "VENDORS", (ThrowawayBackend,))
    data = driver_check(CheckContext(throwaway_node), Config()).data
    assert isinstance(data, dict) and data["vendors"] == ["nvidia"]


def test_the_steps_are_numbered_and_name_what_exists() -> None:
    steps = re.findall(r"^(\d+)\. ", STEPS, re.M)
    assert steps == [str(n) for n in range(1, len(steps) + 1)] and len(steps) >= 4
    named = set(re.findall(r"`(gpuprobe(?:\.\w+)+)`", STEPS))
    assert {"gpuprobe.gpu.backends.VENDORS", "gpuprobe.gpu.backend.GpuBackend"} <= named
    for name in named:
        assert resolve(name) is not None, name
