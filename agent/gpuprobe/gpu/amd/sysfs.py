"""AMD GPUs on the PCI bus and what the amdgpu driver says of each, through HostFS.

A GPU is an AMD (`0x1002`) PCI function of the display (`0x03`) or processing-accelerator
(`0x12`, the Instinct MI300 series) class; its audio function is not. GPUs are indexed in
PCI address order, as NVML orders NVIDIA's. The driver's files lie in the PCI device's own
directory (`/sys/class/drm/card<N>/device` links there); its DRM nodes are listed under
`drm/` (`card1`, `renderD128`). A GPU the driver did not take has no `driver` link to
`amdgpu` and none of the driver's files.

A file that is absent leaves its fact out (older kernels and smaller GPUs lack some); a file
that is present but unreadable or not in the driver's format is named in `errors`, so a check
can say what it could not read instead of calling the GPU healthy.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from gpuprobe.gpu.amd import ras, xgmi
from gpuprobe.host.fs import HostFS

PCI_DEVICES = "/sys/bus/pci/devices"
AMD_VENDOR = 0x1002
GPU_CLASSES = (0x03, 0x12)  # display controller, processing accelerator
RAS_BLOCKS = (
    "umc",
    "sdma",
    "gfx",
    "mmhub",
    "athub",
    "pcie_bif",
    "hdp",
    "xgmi_wafl",
    "df",
    "smn",
    "sem",
    "mp0",
    "mp1",
    "fuse",
    "mca",
    "vcn",
    "jpeg",
)
MODULE = "/sys/module/amdgpu"
# Instinct accelerators by PCI device id (the PCI ID repository's names), for GPUs whose
# driver offers no `product_name`.
INSTINCT = {
    0x738C: "AMD Instinct MI100",
    0x738E: "AMD Instinct MI100",
    0x7408: "AMD Instinct MI250X",
    0x740C: "AMD Instinct MI250X/MI250",
    0x740F: "AMD Instinct MI210",
    0x74A0: "AMD Instinct MI300A",
    0x74A1: "AMD Instinct MI300X",
    0x74A5: "AMD Instinct MI325X",
}
_SPEED = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*GT/s")


@dataclass(frozen=True)
class PcieLink:
    """The GPU's PCIe link now and at most (GT/s, lanes); None where sysfs cannot tell."""

    speed_gts: float | None
    width: int | None
    max_speed_gts: float | None
    max_width: int | None

    @property
    def width_degraded(self) -> bool:
        """Fewer lanes than the device's maximum. The speed is not judged: amdgpu lowers the
        link speed at idle by design (dynamic PCIe gen switching)."""
        return (
            self.width is not None
            and self.max_width is not None
            and (0 < self.width < self.max_width)
        )


@dataclass
class AmdGpu:
    """One AMD GPU: its identity, what the amdgpu driver reports of it, and which of the
    driver's files could not be read (`errors`: file name → reason)."""

    index: int
    pci_address: str
    device_id: int
    driver: str | None
    card: str | None = None
    render_node: str | None = None
    unique_id: str | None = None
    product_name: str | None = None
    vram_total_bytes: int | None = None
    vram_used_bytes: int | None = None
    busy_percent: int | None = None
    pcie: PcieLink = PcieLink(None, None, None, None)
    ras_counts: tuple[ras.ErrorCount, ...] = ()
    ras_inaccessible: tuple[str, ...] = ()
    bad_pages: ras.BadPages | None = None
    xgmi: xgmi.Xgmi | None = None
    temperatures_celsius: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def bound(self) -> bool:
        """The amdgpu driver took this GPU."""
        return self.driver == "amdgpu"

    @property
    def name(self) -> str:
        """The product name, else the Instinct name of its device id, else the id."""
        return (
            self.product_name or INSTINCT.get(self.device_id) or (f"AMD GPU {self.device_id:#06x}")
        )

    @property
    def resource(self) -> str:
        """The finding resource: `gpu:<index>:<unique_id>`, the PCI address without one."""
        return f"gpu:{self.index}:{self.unique_id or self.pci_address}"

    @property
    def uncorrectable_errors(self) -> int:
        """Uncorrectable errors summed over the RAS blocks."""
        return sum(c.uncorrectable for c in self.ras_counts)


@dataclass(frozen=True)
class AmdgpuModule:
    """The amdgpu kernel module: loaded (`initstate` live), its version (a DKMS build's own,
    `/sys/module/amdgpu/version`; an in-tree driver has none and goes by the kernel's), the
    kernel release and the `bad_page_threshold` parameter as written."""

    loaded: bool
    version: str | None
    kernel: str | None
    bad_page_threshold: str | None

    @property
    def driver_version(self) -> str | None:
        """The amdgpu driver's version: a DKMS build's own, else the kernel's (in-tree); the
        one place it is worked out (the backend's `driver()`, the `driver` check's data)."""
        return self.version or self.kernel


def _hex(fs: HostFS, path: str) -> int | None:
    text = fs.try_read_text(path)
    try:
        return int(text.strip(), 16) if text else None
    except ValueError:
        return None


def amd_gpu_addresses(fs: HostFS) -> list[tuple[str, int]]:
    """The AMD GPUs on the PCI bus, in address order: (address, device id)."""
    found = []
    for address in fs.listdir(PCI_DEVICES):
        base = f"{PCI_DEVICES}/{address}"
        if _hex(fs, f"{base}/vendor") != AMD_VENDOR:
            continue
        class_code = _hex(fs, f"{base}/class") or 0
        if class_code >> 16 not in GPU_CLASSES:
            continue
        found.append((address.lower(), _hex(fs, f"{base}/device") or 0))
    return sorted(found)


def read_module(fs: HostFS) -> AmdgpuModule:
    """The amdgpu module's state from `/sys/module/amdgpu` and the kernel's release."""
    initstate = fs.try_read_text(f"{MODULE}/initstate")
    loaded = initstate.strip() == "live" if initstate is not None else fs.is_dir(MODULE)
    version = fs.try_read_text(f"{MODULE}/version")
    kernel = fs.try_read_text("/proc/sys/kernel/osrelease")
    threshold = fs.try_read_text(f"{MODULE}/parameters/bad_page_threshold")
    return AmdgpuModule(
        loaded=loaded,
        version=version.strip() or None if version is not None else None,
        kernel=kernel.strip() or None if kernel is not None else None,
        bad_page_threshold=threshold.strip() if threshold is not None else None,
    )


def read_gpus(fs: HostFS) -> list[AmdGpu]:
    """Every AMD GPU on the bus with the driver's facts of it."""
    return [
        read_gpu(fs, i, address, device)
        for i, (address, device) in enumerate(amd_gpu_addresses(fs))
    ]


class _Files:
    """Reads one device directory's files, noting each present one it could not read."""

    def __init__(self, fs: HostFS, base: str, errors: dict[str, str]) -> None:
        self.fs, self.base, self.errors = fs, base, errors

    def text(self, name: str) -> str | None:
        path = f"{self.base}/{name}"
        text = self.fs.try_read_text(path)
        if text is None and self.fs.exists(path):
            self.errors[name] = "unreadable"
        return text

    def integer(self, name: str) -> int | None:
        text = self.text(name)
        if text is None:
            return None
        try:
            return int(text.strip())
        except ValueError:
            self.errors[name] = f"not a number: {text.strip()[:40]!r}"
            return None


def read_gpu(fs: HostFS, index: int, address: str, device_id: int) -> AmdGpu:
    """One GPU's facts from its PCI device directory."""
    base = f"{PCI_DEVICES}/{address}"
    driver_link = fs.readlink(f"{base}/driver")
    gpu = AmdGpu(index, address, device_id, os.path.basename(driver_link) if driver_link else None)
    files = _Files(fs, base, gpu.errors)
    gpu.pcie = _pcie(files)
    if not gpu.bound:
        return gpu
    for node in fs.listdir(f"{base}/drm"):
        if node.startswith("card") and gpu.card is None:
            gpu.card = node
        elif node.startswith("renderD") and gpu.render_node is None:
            gpu.render_node = node
    unique_id = files.text("unique_id")
    gpu.unique_id = unique_id.strip() or None if unique_id is not None else None
    name = files.text("product_name")
    gpu.product_name = name.strip() or None if name is not None else None
    gpu.vram_total_bytes = files.integer("mem_info_vram_total")
    gpu.vram_used_bytes = files.integer("mem_info_vram_used")
    gpu.busy_percent = files.integer("gpu_busy_percent")
    _read_ras(fs, files, gpu)
    _read_xgmi(files, gpu)
    gpu.temperatures_celsius = _temperatures(fs, base, gpu.errors)
    return gpu


def _speed(text: str | None) -> float | None:
    match = _SPEED.match(text or "")
    return float(match.group(1)) if match else None


def _pcie(files: _Files) -> PcieLink:
    def width(name: str) -> int | None:
        text = files.text(name)
        return int(text.strip()) if text and text.strip().isdigit() else None

    return PcieLink(
        _speed(files.text("current_link_speed")),
        width("current_link_width"),
        _speed(files.text("max_link_speed")),
        width("max_link_width"),
    )


def _read_ras(fs: HostFS, files: _Files, gpu: AmdGpu) -> None:
    counts, inaccessible = [], []
    present = set(fs.listdir(f"{files.base}/ras"))
    for block in RAS_BLOCKS:
        name = f"{block}_err_count"
        if name not in present:
            continue
        text = files.text(f"ras/{name}")
        if text is None:
            continue
        try:
            count = ras.parse_error_count(block, text)
        except ras.RasFormatError as exc:
            gpu.errors[f"ras/{name}"] = str(exc)
            continue
        if count is None:
            inaccessible.append(block)
        else:
            counts.append(count)
    gpu.ras_counts, gpu.ras_inaccessible = tuple(counts), tuple(inaccessible)
    if "gpu_vram_bad_pages" in present:
        text = files.text("ras/gpu_vram_bad_pages")
        if text is not None:
            try:
                gpu.bad_pages = ras.parse_bad_pages(text)
            except ras.RasFormatError as exc:
                gpu.errors["ras/gpu_vram_bad_pages"] = str(exc)


def _read_xgmi(files: _Files, gpu: AmdGpu) -> None:
    hive_text = files.text("xgmi_hive_info/xgmi_hive_id")
    if hive_text is None:
        return
    try:
        hive_id = xgmi.decimal("xgmi_hive_id", hive_text)
        if not hive_id:
            return  # 0: not in a hive
        gpu.xgmi = xgmi.Xgmi(
            hive_id=hive_id,
            device_id=xgmi.decimal("xgmi_device_id", files.text("xgmi_device_id")),
            physical_id=xgmi.decimal("xgmi_physical_id", files.text("xgmi_physical_id")),
            peers=xgmi.peers(files.text("xgmi_num_hops"), files.text("xgmi_num_links")),
            errors=xgmi.decimal("xgmi_error", files.text("xgmi_error")),
        )
    except xgmi.XgmiFormatError as exc:
        gpu.errors["xgmi"] = str(exc)


def _temperatures(fs: HostFS, base: str, errors: dict[str, str]) -> dict[str, float]:
    """The hwmon temperatures by label (`edge`, `junction`, `mem`), in °C."""
    found: dict[str, float] = {}
    for hwmon in fs.listdir(f"{base}/hwmon"):
        directory = f"{base}/hwmon/{hwmon}"
        for name in fs.listdir(directory):
            match = re.fullmatch(r"temp(\d+)_input", name)
            if match is None:
                continue
            label = fs.try_read_text(f"{directory}/temp{match.group(1)}_label")
            key = label.strip() if label else f"temp{match.group(1)}"
            value = fs.try_read_text(f"{directory}/{name}")
            if value is None:
                continue  # the sensor answers ENODATA where the GPU lacks it (edge on MI300X)
            try:
                found[key] = int(value.strip()) / 1000
            except ValueError:
                errors[f"hwmon/{hwmon}/{name}"] = f"not a number: {value.strip()[:40]!r}"
    return found
