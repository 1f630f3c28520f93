"""NVIDIA devices on the PCI bus, read from sysfs through HostFS.

The PCI bus is the ground truth NVML is held against: a GPU that fell off the bus or that
the driver failed to initialise is still (or no longer) here while NVML counts otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.host.fs import HostFS

PCI_DEVICES = "/sys/bus/pci/devices"
NVIDIA_VENDOR = 0x10DE
# PCI base classes (the top byte of the 24-bit class code).
DISPLAY_CONTROLLER = 0x03  # VGA (0x0300) and 3D (0x0302) controllers: the GPUs
BRIDGE = 0x06  # NVSwitches show as 0x0680 "other bridge"


@dataclass(frozen=True)
class PciDevice:
    """One PCI function: its address (`0000:3a:00.0`), vendor, device and class codes."""

    address: str
    vendor: int
    device: int
    class_code: int

    @property
    def is_gpu(self) -> bool:
        """An NVIDIA display or 3D controller."""
        return self.vendor == NVIDIA_VENDOR and self.class_code >> 16 == DISPLAY_CONTROLLER

    @property
    def is_nvswitch(self) -> bool:
        """An NVIDIA bridge: an NVSwitch."""
        return self.vendor == NVIDIA_VENDOR and self.class_code >> 16 == BRIDGE


def _hex(fs: HostFS, path: str) -> int | None:
    text = fs.try_read_text(path)
    try:
        return int(text.strip(), 16) if text else None
    except ValueError:
        return None


def nvidia_devices(fs: HostFS) -> list[PciDevice]:
    """Every NVIDIA PCI function on the bus, in address order."""
    found = []
    for address in fs.listdir(PCI_DEVICES):
        vendor = _hex(fs, f"{PCI_DEVICES}/{address}/vendor")
        if vendor != NVIDIA_VENDOR:
            continue
        device = _hex(fs, f"{PCI_DEVICES}/{address}/device") or 0
        class_code = _hex(fs, f"{PCI_DEVICES}/{address}/class") or 0
        found.append(PciDevice(address.lower(), vendor, device, class_code))
    return found


def nvidia_gpus(fs: HostFS) -> list[PciDevice]:
    """The NVIDIA GPUs on the PCI bus (NVSwitches and audio functions excluded)."""
    return [d for d in nvidia_devices(fs) if d.is_gpu]


def normalize_bus_id(bus_id: str) -> str:
    """A PCI address as sysfs writes it: NVML's `00000000:3A:00.0` → `0000:3a:00.0`."""
    text = bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep or len(domain) <= 4:
        return text
    return f"{int(domain, 16):04x}:{rest}"
