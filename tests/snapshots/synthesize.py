"""Writes the hand-made (`synthetic-…`) node snapshots under tests/snapshots/.

Each synthetic snapshot is described here in code, in the contract's snapshot format, and
written by `python tests/snapshots/synthesize.py`; a test holds the committed trees to this
script, so they are never edited by hand. Snapshots recorded on real hardware are not made
here: `gpuprobe capture` writes them.

The base node is an HGX H100 8-GPU board: eight H100 SXM GPUs and four NVSwitches on the PCI
bus, driver 550.54.15 (CUDA 12.4), the open kernel module. Variants change one thing each.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent

H100_PCI = [
    "0000:18:00.0",
    "0000:2a:00.0",
    "0000:3a:00.0",
    "0000:5d:00.0",
    "0000:9a:00.0",
    "0000:ab:00.0",
    "0000:ba:00.0",
    "0000:db:00.0",
]
NVSWITCH_PCI = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
OTHER_PCI = {  # address: (vendor, device, class)
    "0000:00:00.0": ("0x8086", "0x09a2", "0x060000"),  # Intel host bridge
    "0000:17:00.0": ("0x15b3", "0x1021", "0x020700"),  # ConnectX-7 (InfiniBand)
    "0000:c1:00.0": ("0x1a03", "0x2000", "0x030000"),  # ASPEED BMC VGA: a GPU class, not NVIDIA
}
H100_NAME = "NVIDIA H100 80GB HBM3"
H100_MEMORY = {"total": 85520809984, "free": 84977713152, "used": 543096832}


def module_version_text(version: str, open_module: bool = True) -> str:
    """/proc/driver/nvidia/version as the driver writes it."""
    kind = "Open Kernel Module for x86_64" if open_module else "x86_64 Kernel Module"
    return (
        f"NVRM version: NVIDIA UNIX {kind}  {version}  Release Build  "
        "(dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:15:33 UTC 2024\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n"
    )


def gpu_uuid(index: int) -> str:
    """A stable, made-up GPU UUID."""
    return f"GPU-5f1c{index:04x}-8e2b-4c1d-9a7e-{index:012x}"


@dataclass
class Node:
    """A snapshot under construction."""

    name: str
    files: dict[str, str] = field(default_factory=dict)
    calls: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    processes: list[dict[str, Any]] = field(default_factory=list)
    init_error: str | None = None
    with_nvml: bool = True

    def file(self, path: str, content: str = "") -> Node:
        """A host file (an empty one stands for a socket or device node)."""
        self.files[path] = content
        return self

    def pci(self, address: str, vendor: str, device: str, class_code: str) -> Node:
        """A PCI function in sysfs."""
        base = f"/sys/bus/pci/devices/{address}"
        self.file(f"{base}/vendor", vendor + "\n")
        self.file(f"{base}/device", device + "\n")
        self.file(f"{base}/class", class_code + "\n")
        return self

    def call(self, fn: str, args: list[Any], ret: Any = None, error: str | None = None) -> Node:
        """An NVML call and its answer (or error)."""
        entry: dict[str, Any] = {"fn": fn, "args": args}
        if error is not None:
            entry["error"] = error
        else:
            entry["ret"] = ret
        self.calls.append(entry)
        return self

    def drop_calls(self, predicate: Callable[[dict[str, Any]], bool]) -> Node:
        """Remove the NVML calls `predicate` picks."""
        self.calls = [c for c in self.calls if not predicate(c)]
        return self

    def replace_call(self, fn: str, args: list[Any], **answer: Any) -> Node:
        """Replace the answer of an NVML call (ret=... or error=...)."""
        self.drop_calls(lambda c: c["fn"] == fn and c["args"] == args)
        return self.call(fn, args, answer.get("ret"), answer.get("error"))

    def write(self, root: Path) -> None:
        """Write the snapshot tree under `root/name`."""
        target = root / self.name
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        meta = {
            "format": 1,
            "node": self.name,
            "captured_at": "2026-11-29T21:00:00Z",
            "gpuprobe_version": "synthetic",
        }
        _write_json(target / "snapshot.json", meta)
        if self.with_nvml:
            record = {
                "format": 1,
                "init_error": self.init_error,
                "calls": self.calls,
                "events": self.events,
            }
            _write_json(target / "nvml.json", record)
        _write_json(target / "processes.json", self.processes)
        for path, content in sorted(self.files.items()):
            dest = target / "rootfs" / path.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(content, encoding="utf-8")


def _write_json(path: Path, content: Any) -> None:
    path.write_text(json.dumps(content, indent=1) + "\n", encoding="utf-8")


def hgx_h100(name: str, driver: str = "550.54.15", cuda: int = 12040) -> Node:
    """A healthy HGX H100 8-GPU node."""
    node = Node(name)
    for address in H100_PCI:
        node.pci(address, "0x10de", "0x2330", "0x030200")
    for address in NVSWITCH_PCI:
        node.pci(address, "0x10de", "0x22a3", "0x068000")
    for address, (vendor, device, class_code) in OTHER_PCI.items():
        node.pci(address, vendor, device, class_code)
    node.file("/proc/driver/nvidia/version", module_version_text(driver))
    node.file(f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{driver}")
    node.call("nvmlSystemGetDriverVersion", [], driver)
    node.call("nvmlSystemGetCudaDriverVersion_v2", [], cuda)
    node.call("nvmlSystemGetNVMLVersion", [], f"12.{driver}")
    node.call("nvmlDeviceGetCount", [], len(H100_PCI))
    for i, address in enumerate(H100_PCI):
        bus = int(address.split(":")[1], 16)
        node.call("nvmlDeviceGetName", [i], H100_NAME)
        node.call("nvmlDeviceGetUUID", [i], gpu_uuid(i))
        node.call("nvmlDeviceGetSerial", [i], f"165492200{i:04d}")
        node.call(
            "nvmlDeviceGetPciInfo",
            [i],
            {
                "busIdLegacy": address,
                "domain": 0,
                "bus": bus,
                "device": 0,
                "pciDeviceId": 0x233010DE,
                "pciSubSystemId": 0x16C110DE,
                "busId": f"0000{address.upper()}",
            },
        )
        node.call("nvmlDeviceGetMemoryInfo", [i], dict(H100_MEMORY))
        node.call("nvmlDeviceGetPersistenceMode", [i], 1)
        node.call("nvmlDeviceGetComputeMode", [i], 0)
    return node


def without_gpu(node: Node, index: int) -> Node:
    """The node as NVML sees it when GPU `index` is gone: one fewer, the rest renumbered."""
    node.drop_calls(lambda c: c["fn"].startswith("nvmlDevice") and c["args"][:1] != [])
    node.replace_call("nvmlDeviceGetCount", [], ret=len(H100_PCI) - 1)
    seen = [a for i, a in enumerate(H100_PCI) if i != index]
    fresh = hgx_h100("x")
    for new_index, address in enumerate(seen):
        old_index = H100_PCI.index(address)
        for c in fresh.calls:
            if c["fn"].startswith("nvmlDevice") and c["args"] == [old_index]:
                node.calls.append({**c, "args": [new_index]})
    return node


def variants() -> list[Node]:
    """Every synthetic snapshot."""
    nodes = [hgx_h100("synthetic-h100-8gpu-healthy")]

    node = hgx_h100("synthetic-library-mismatch")
    node.init_error = "LibRmVersionMismatch"
    node.calls = []
    node.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.90.07")
    node.files.pop("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15")
    nodes.append(node)

    node = hgx_h100("synthetic-driver-not-loaded")
    node.init_error = "DriverNotLoaded"
    node.calls = []
    node.files.pop("/proc/driver/nvidia/version")
    nodes.append(node)

    node = hgx_h100("synthetic-driver-not-found")
    node.with_nvml = False
    node.files.pop("/proc/driver/nvidia/version")
    node.files.pop("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15")
    nodes.append(node)

    # GPU 3 (0000:5d:00.0) fell off the bus: still enumerated on PCI, gone from NVML, XID 79
    # in the kernel log.
    node = without_gpu(hgx_h100("synthetic-gpu-fallen-off-bus"), 3)
    node.file(
        "/var/log/kern.log",
        "Nov 29 20:58:01 gpu-node-17 kernel: NVRM: GPU at PCI:0000:5d:00: GPU-5f1c0003\n"
        "Nov 29 20:58:01 gpu-node-17 kernel: NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', "
        "name=<unknown>, GPU has fallen off the bus.\n"
        "Nov 29 20:58:01 gpu-node-17 kernel: NVRM: GPU 0000:5d:00.0: GPU has fallen off the "
        "bus.\n",
    )
    nodes.append(node)

    # GPU 5 is lost: its UUID still answers, every other query raises GpuIsLost.
    node = hgx_h100("synthetic-gpu-lost")
    for fn in (
        "nvmlDeviceGetName",
        "nvmlDeviceGetSerial",
        "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetPersistenceMode",
        "nvmlDeviceGetComputeMode",
    ):
        node.replace_call(fn, [5], error="GpuIsLost")
    nodes.append(node)

    # Driver 535.104.05 (CUDA 12.2): too old for images built with CUDA 12.4 or 13.0.
    nodes.append(hgx_h100("synthetic-driver-too-old", driver="535.104.05", cuda=12020))

    # The kernel module was upgraded to 550.90.07 but NVML still answers as 550.54.15.
    node = hgx_h100("synthetic-module-library-differ")
    node.file("/proc/driver/nvidia/version", module_version_text("550.90.07"))
    nodes.append(node)

    # A training job runs on GPU 0 and two on GPU 3; the other GPUs are free. Active tests
    # (storage throughput) wait for them unless forced. A process that is not in a MIG
    # instance has gpuInstanceId and computeInstanceId 0xFFFFFFFF (nvml.h).
    node = hgx_h100("synthetic-gpu-processes")
    jobs = {0: [(4242, 71 * 2**30)], 3: [(5150, 30 * 2**30), (5151, 30 * 2**30)]}
    for i in range(len(H100_PCI)):
        running = [
            {
                "pid": pid,
                "usedGpuMemory": used,
                "gpuInstanceId": 0xFFFFFFFF,
                "computeInstanceId": 0xFFFFFFFF,
            }
            for pid, used in jobs.get(i, [])
        ]
        node.call("nvmlDeviceGetComputeRunningProcesses_v3", [i], running)
    node.processes = [
        {"pid": pid, "name": "python3", "cmdline": ["python3", "train.py"]}
        for running in jobs.values()
        for pid, _ in running
    ]
    nodes.append(node)
    return nodes


def main(root: Path = HERE) -> None:
    """Write every synthetic snapshot under `root`."""
    for node in variants():
        node.write(root)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
