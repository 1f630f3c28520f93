"""Writes the hand-made (`synthetic-…`) node snapshots under tests/snapshots/.

Each synthetic snapshot is described here in code, in the contract's snapshot format, and
written by `python tests/snapshots/synthesize.py`; a test holds the committed trees to this
script, so they are never edited by hand. Snapshots recorded on real hardware are not made
here: `gpuprobe capture` writes them.

The base node is an HGX H100 8-GPU board: eight H100 SXM GPUs and four NVSwitches on the PCI
bus, driver 550.54.15 (CUDA 12.4), the open kernel module, every GPU busy with a training
process, healthy in every figure NVML gives (ECC, remapped rows, PCIe Gen5 x16, 18 NVLinks
up, fabric registered, fabric manager running, MIG off), and a kernel log whose only XID is
from the previous boot. Variants change one thing each.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

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
H100_NVLINKS = 18
MIB = 1024 * 1024
BOOT_ID = "3f0c5a8e-6a1d-4f0b-9a57-2b8c1e7d4f10\n"
BOOT_TIME = 1795939200  # 2026-11-29T08:00:00Z
FABRIC_MANAGER = {
    "pid": 2101,
    "name": "nv-fabricmanager",
    "cmdline": ["/usr/bin/nv-fabricmanager", "-c", "/usr/share/nvidia/nvswitch/fabricmanager.cfg"],
}
RECOVERY_NONE = 0


def stamp(clock: str) -> str:
    """An rsyslog RFC 3339 stamp on the capture day: `20:58:01` → `2026-11-29T20:58:01...`."""
    return f"2026-11-29T{clock}.104217+00:00 gpu-node-17 kernel:"


def xid_line(address: str, xid: int, text: str, clock: str = "20:58:01") -> str:
    """A kernel log line of the NVIDIA driver reporting an XID on the GPU at `address`."""
    return f"{stamp(clock)} NVRM: Xid (PCI:{address[:-2]}): {xid}, {text}\n"


def kernel_log() -> str:
    """kern.log of a healthy node: an XID from the previous boot, then this boot's lines."""
    lines = [
        "2026-11-28T23:10:04.112233+00:00 gpu-node-17 kernel: NVRM: Xid (PCI:0000:3a:00): 48, "
        "pid=2211, name=python3, An uncorrectable double bit error (DBE) has been detected on "
        "GPU in the framebuffer at partition 6, subpartition 0.\n",
        "2026-11-28T23:14:40.000131+00:00 gpu-node-17 kernel: reboot: Restarting system\n",
        f"{stamp('08:00:02')} Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075) "
        "(x86_64-linux-gnu-gcc-13 (Ubuntu 13.2.0-23ubuntu4) 13.2.0) #45-Ubuntu SMP\n",
        f"{stamp('08:00:02')} Command line: BOOT_IMAGE=/vmlinuz-6.8.0-45-generic ro\n",
        f"{stamp('08:00:09')} nvidia: module license 'NVIDIA' taints kernel.\n",
        f"{stamp('08:00:09')} NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  "
        "550.54.15  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Mar  5 22:15:33 UTC 2024\n",
    ]
    lines += [
        f"{stamp('08:00:11')} NVRM: GPU at PCI:{a[:-2]}: {gpu_uuid(i)}\n"
        for i, a in enumerate(H100_PCI)
    ]
    lines += [
        f"{stamp('08:00:12')} mlx5_core 0000:17:00.0: Port module event: module 0, Cable plugged\n",
        f"{stamp('08:00:14')} EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode.\n",
        f"{stamp('09:12:40')} python3[41000]: segfault at 0 ip 00007f3a sp 00007ffd error 4\n",
    ]
    return "".join(lines)


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
    links: list[dict[str, Any]] | None = None
    symlinks: dict[str, str] = field(default_factory=dict)
    device_plugin: str | None = None  # the device plugin's config.yaml, as the agent read it
    podresources: dict[str, Any] | None = None  # the kubelet's answers (podresources.json)
    directories: set[str] = field(default_factory=set)  # empty host directories
    # gpuprobe.yaml beside the snapshot: the settings under which a fault that is a fault
    # only against an expectation (a CUDA version the images need, a link rate) shows.
    config: str | None = None
    lifecycle: list[dict[str, Any]] | None = None  # the metadata service's answers

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

    def symlink(self, path: str, target: str) -> Node:
        """A symbolic link in the host tree (sysfs driver links)."""
        self.symlinks[path] = target
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
        if self.links is not None:
            _write_json(target / "netlink.json", {"format": 1, "links": self.links})
        if self.device_plugin is not None:
            entry = {"config_file": DEVICE_PLUGIN_CONFIG, "content": self.device_plugin}
            _write_json(target / "device-plugin.json", entry)
        if self.podresources is not None:
            _write_json(target / "podresources.json", self.podresources)
        if self.config is not None:
            (target / "gpuprobe.yaml").write_text(self.config, encoding="utf-8")
        if self.lifecycle is not None:
            _write_json(target / "lifecycle.json", {"format": 1, "answers": self.lifecycle})
        for path, content in sorted(self.files.items()):
            dest = target / "rootfs" / path.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(content, encoding="utf-8")
        for path in sorted(self.directories):
            (target / "rootfs" / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
        for path, link_target in sorted(self.symlinks.items()):
            dest = target / "rootfs" / path.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.symlink_to(link_target)


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
        health_calls(node, i)
    node.file("/proc/sys/kernel/random/boot_id", BOOT_ID)
    node.file("/proc/stat", f"cpu  49860 1 10153 215654 882 0 236 2148 0 0\nbtime {BOOT_TIME}\n")
    node.file("/var/log/kern.log", kernel_log())
    node.processes = [FABRIC_MANAGER] + [training_process(i) for i in range(len(H100_PCI))]
    return node


def training_process(index: int) -> dict[str, Any]:
    """The training process on GPU `index`."""
    return {
        "pid": 41000 + index,
        "name": "python3",
        "cmdline": ["python3", "train.py", f"--local-rank={index}"],
    }


def health_calls(node: Node, i: int) -> None:
    """NVML's health answers for a healthy, busy H100 SXM `i`."""
    node.call("nvmlDeviceGetTemperature", [i, 0], 41 + i)
    node.call("nvmlDeviceGetTemperatureThreshold", [i, 1], 87)
    node.call("nvmlDeviceGetTemperatureThreshold", [i, 0], 92)
    node.call("nvmlDeviceGetPowerUsage", [i], 612000 + 1000 * i)
    node.call("nvmlDeviceGetEnforcedPowerLimit", [i], 700000)
    node.call("nvmlDeviceGetUtilizationRates", [i], {"gpu": 97, "memory": 41})
    node.call("nvmlDeviceGetEccMode", [i], [1, 1])
    for error_type, counter, count in ((1, 0, 0), (1, 1, 0), (0, 0, 0), (0, 1, 3)):
        node.call("nvmlDeviceGetTotalEccErrors", [i, error_type, counter], count)
    node.call("nvmlDeviceGetRemappedRows", [i], [0, 0, 0, 0])
    node.call("nvmlDeviceGetRetiredPagesPendingStatus", [i], error="NotSupported")
    node.call("nvmlDeviceGetCurrPcieLinkWidth", [i], 16)
    node.call("nvmlDeviceGetMaxPcieLinkWidth", [i], 16)
    node.call("nvmlDeviceGetCurrPcieLinkGeneration", [i], 5)
    node.call("nvmlDeviceGetMaxPcieLinkGeneration", [i], 5)
    for link in range(H100_NVLINKS):
        node.call("nvmlDeviceGetNvLinkState", [i, link], 1)
    node.call("nvmlDeviceGetNvLinkState", [i, H100_NVLINKS], error="InvalidArgument")
    node.call("nvmlDeviceGetGpuFabricInfoV", [i], fabric_info(3))
    # GPU 0 runs into its power cap: a fact, not a fault.
    node.call("nvmlDeviceGetCurrentClocksEventReasons", [i], 0x4 if i == 0 else 0)
    node.call(
        "nvmlDeviceGetComputeRunningProcesses",
        [i],
        [
            {
                "pid": 41000 + i,
                "usedGpuMemory": 536870912,
                "gpuInstanceId": 0xFFFFFFFF,
                "computeInstanceId": 0xFFFFFFFF,
            }
        ],
    )
    node.call("nvmlDeviceGetFieldValues", [i, [230]], [field_value(230, RECOVERY_NONE)])
    node.call("nvmlDeviceGetMigMode", [i], [0, 0])


def fabric_info(
    state: int, status: int = 0, cluster: list[int] | None = None, clique: int = 0
) -> dict[str, Any]:
    """nvmlDeviceGetGpuFabricInfoV's struct (nvmlGpuFabricInfo_v2_t) with a fabric state. A
    single-node NVLink system (an HGX board behind its own NVSwitches) names no cluster: a
    zero cluster UUID and clique 0, as `nvidia-smi -q` prints them there; a multi-node NVLink
    domain member (GB200 NVL72) names its domain's."""
    return {
        "version": 0x02000024,
        "clusterUuid": cluster or [0] * 16,
        "status": status,
        "cliqueId": clique,
        "state": state,
        "healthMask": 0,
    }


def field_value(field_id: int, value: int) -> dict[str, Any]:
    """One nvmlFieldValue_t as pynvml returns it: an unsigned int in the value union."""
    union = {"dVal": 0.0, "uiVal": value, "ulVal": value, "ullVal": value}
    union |= {"sllVal": value, "siVal": value, "usVal": value}
    return {
        "fieldId": field_id,
        "scopeId": 0,
        "timestamp": 1795987081000000,
        "latencyUsec": 0,
        "valueType": 1,
        "nvmlReturn": 0,
        "value": union,
    }


def idle(node: Node, index: int, generation: int = 5) -> Node:
    """GPU `index` with no process, no load, its clocks idling (and the PCIe link maybe down
    to a lower generation, as idle GPUs save power)."""
    node.replace_call("nvmlDeviceGetComputeRunningProcesses", [index], ret=[])
    node.replace_call("nvmlDeviceGetUtilizationRates", [index], ret={"gpu": 0, "memory": 0})
    node.replace_call("nvmlDeviceGetCurrentClocksEventReasons", [index], ret=0x1)
    node.replace_call("nvmlDeviceGetPowerUsage", [index], ret=71000)
    node.replace_call("nvmlDeviceGetCurrPcieLinkGeneration", [index], ret=generation)
    node.processes = [p for p in node.processes if p["pid"] != 41000 + index]
    return node


@dataclass(frozen=True)
class MigDevice:
    """One MIG device: its GPU instance and compute instance, profile and shape on an H100."""

    gi: int
    ci: int
    profile: str  # the compute instance's profile: "1g.10gb", or "1c.3g.40gb" inside a 3g
    gi_slices: int
    ci_slices: int
    memory_mb: int
    sms: int
    gi_start: int
    ci_start: int = 0


# H100 80GB profiles: (GPU instance profile id, slices, memory MiB, SMs).
H100_PROFILES = {
    "1g.10gb": (19, 1, 9984, 16),
    "2g.20gb": (14, 2, 20096, 32),
    "3g.40gb": (9, 3, 40320, 60),
    "4g.40gb": (5, 4, 40320, 64),
    "7g.80gb": (0, 7, 81152, 132),
}


def mig(profile: str, gi: int, start: int, ci: int = 0, ci_slices: int | None = None) -> MigDevice:
    """A MIG device of an H100 profile (a compute instance of `ci_slices` inside it)."""
    _, slices, memory, sms = H100_PROFILES[profile]
    ci_slices = ci_slices or slices
    name = profile if ci_slices == slices else f"{ci_slices}c.{profile}"
    return MigDevice(gi, ci, name, slices, ci_slices, memory, sms * ci_slices // slices, start)


def mig_uuid(gpu: int, slot: int) -> str:
    """A stable, made-up MIG device UUID."""
    return f"MIG-7b3d{gpu:02x}{slot:02x}-1c9e-5a0f-8d42-{gpu:06x}{slot:06x}"


def mig_layout(node: Node, gpu: int, devices: list[MigDevice]) -> Node:
    """MIG on for GPU `gpu` with these MIG devices in slots 0, 1, ... (the rest empty), and
    NVML refusing per-GPU utilization and remapped rows, as it does with MIG on."""
    node.replace_call("nvmlDeviceGetMigMode", [gpu], ret=[1, 1])
    node.replace_call("nvmlDeviceGetUtilizationRates", [gpu], error="NotSupported")
    node.replace_call("nvmlDeviceGetRemappedRows", [gpu], error="NotSupported")
    node.call("nvmlDeviceGetMaxMigDeviceCount", [gpu], 7)
    for slot in range(7):
        if slot >= len(devices):
            node.call("nvmlDeviceGetMigDeviceHandleByIndex", [gpu, slot], error="NotFound")
            continue
        d, ref = devices[slot], f"{gpu}:{slot}"
        profile_id = H100_PROFILES[d.profile.split("c.")[-1]][0]
        node.call("nvmlDeviceGetMigDeviceHandleByIndex", [gpu, slot], ref)
        node.call("nvmlDeviceGetGpuInstanceId", [ref], d.gi)
        node.call("nvmlDeviceGetComputeInstanceId", [ref], d.ci)
        node.call("nvmlDeviceGetUUID", [ref], mig_uuid(gpu, slot))
        node.call("nvmlDeviceGetName", [ref], f"{H100_NAME} MIG {d.profile}")
        total = d.memory_mb * MIB
        node.call("nvmlDeviceGetMemoryInfo", [ref], {"total": total, "free": total, "used": 0})
        node.call(
            "nvmlDeviceGetAttributes_v2",
            [ref],
            {
                "multiprocessorCount": d.sms,
                "sharedCopyEngineCount": d.gi_slices,
                "sharedDecoderCount": d.gi_slices,
                "sharedEncoderCount": 0,
                "sharedJpegCount": 1 if d.gi_slices == 7 else 0,
                "sharedOfaCount": 1 if d.gi_slices == 7 else 0,
                "gpuInstanceSliceCount": d.gi_slices,
                "computeInstanceSliceCount": d.ci_slices,
                "memorySizeMB": d.memory_mb,
            },
        )
        size = 8 if d.gi_slices == 7 else d.gi_slices  # a 7-slice instance spans all 8
        gi_info = {"device": None, "id": d.gi, "profileId": profile_id}
        gi_info["placement"] = {"start": d.gi_start, "size": size}
        node.replace_call("nvmlGpuInstanceGetInfo", [f"gi:{gpu}:{d.gi}"], ret=gi_info)
        ci_info = {"device": None, "gpuInstance": None, "id": d.ci, "profileId": d.ci_slices - 1}
        ci_info["placement"] = {"start": d.ci_start, "size": d.ci_slices}
        node.call("nvmlComputeInstanceGetInfo_v2", [f"ci:{gpu}:{d.gi}:{d.ci}"], ci_info)
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
            if c["fn"].startswith("nvmlDevice") and c["args"][:1] == [old_index]:
                node.calls.append({**c, "args": [new_index, *c["args"][1:]]})
    return node


NDR_RAILS = [f"mlx5_{i}" for i in range(8)]


def nic(
    node: Node,
    name: str,
    *,
    driver: str | None,
    mtu: int,
    speed: int | None = None,
    operstate: str = "UP",
    admin_up: bool = True,
    link_type: str = "ether",
    address: str | None = None,
) -> Node:
    """A network interface: in netlink.json, and (for a physical one) in sysfs."""
    node.links = node.links if node.links is not None else []
    index = len(node.links) + 1
    addresses = []
    if address:
        ip, prefix = address.split("/")
        addresses.append({"family": "inet", "address": ip, "prefixlen": int(prefix)})
    node.links.append(
        {
            "index": index,
            "name": name,
            "operstate": operstate,
            "admin_up": admin_up,
            "mtu": mtu,
            "mac": f"02:00:00:00:00:{index:02x}",
            "kind": None if driver else "veth",
            "link_type": link_type,
            "addresses": addresses,
        }
    )
    if driver:
        base = f"/sys/class/net/{name}"
        node.symlink(f"{base}/device/driver", f"../../../../bus/pci/drivers/{driver}")
        node.file(f"{base}/speed", f"{speed if speed is not None else -1}\n")
    return node


def rdma_port(
    node: Node,
    device: str,
    netdev: str,
    *,
    state: str = "4: ACTIVE",
    phys_state: str = "5: LinkUp",
    rate: str = "400 Gb/sec (4X NDR)",
    link_layer: str = "InfiniBand",
    counters: dict[str, int] | None = None,
) -> Node:
    """An RDMA device with one port, as /sys/class/infiniband shows it."""
    base = f"/sys/class/infiniband/{device}"
    node.file(f"{base}/hca_type", "MT4129\n")
    node.file(f"{base}/fw_ver", "28.39.1002\n")
    node.file(f"{base}/node_guid", "a088:c203:0047:1a2c\n")
    node.file(f"{base}/device/net/{netdev}/ifindex", "1\n")
    port = f"{base}/ports/1"
    node.file(f"{port}/state", state + "\n")
    node.file(f"{port}/phys_state", phys_state + "\n")
    node.file(f"{port}/rate", rate + "\n")
    node.file(f"{port}/link_layer", link_layer + "\n")
    node.file(f"{port}/gids/0", "fe80:0000:0000:0000:a288:c203:0047:1a2c\n")
    node.file(f"{port}/gids/1", "0000:0000:0000:0000:0000:0000:0000:0000\n")
    if link_layer == "Ethernet":
        node.file(f"{port}/gid_attrs/types/0", "RoCE v2\n")
        node.file(f"{port}/gid_attrs/ndevs/0", netdev + "\n")
    for counter, value in (counters or {"link_downed": 0, "symbol_error": 0}).items():
        node.file(f"{port}/counters/{counter}", f"{value}\n")
    node.file(f"/dev/infiniband/uverbs{device.rsplit('_', 1)[1]}")
    return node


def with_ndr_fabric(
    node: Node, *, rate: dict[str, str] | None = None, down: tuple[str, ...] = ()
) -> Node:
    """A management NIC and eight NDR InfiniBand rails (mlx5_0..7, IPoIB ibp*)."""
    nic(
        node,
        "lo",
        driver=None,
        mtu=65536,
        operstate="UNKNOWN",
        link_type="loopback",
        address="127.0.0.1/8",
    )
    node.links[0]["kind"] = None  # type: ignore[index]
    nic(node, "eno1", driver="ixgbe", mtu=1500, speed=10000, address="10.20.0.17/16")
    for i, device in enumerate(NDR_RAILS):
        netdev = f"ibp{i}s0"
        is_down = device in down
        nic(
            node,
            netdev,
            driver="mlx5_core",
            mtu=4092,
            speed=400000,
            link_type="infiniband",
            operstate="DOWN" if is_down else "UP",
            address=f"192.168.{i}.17/24",
        )
        rdma_port(
            node,
            device,
            netdev,
            state="1: DOWN" if is_down else "4: ACTIVE",
            phys_state="3: Disabled" if is_down else "5: LinkUp",
            rate=(rate or {}).get(device, "400 Gb/sec (4X NDR)"),
        )
    return node


def with_roce_fabric(node: Node, mtus: tuple[int, ...] = (9000, 9000, 9000, 9000)) -> Node:
    """A management NIC and four 400G RoCE rails (mlx5_0..3 on eth1..4)."""
    nic(node, "eno1", driver="ixgbe", mtu=1500, speed=10000, address="10.20.0.18/16")
    for i, mtu in enumerate(mtus):
        netdev = f"eth{i + 1}"
        nic(node, netdev, driver="mlx5_core", mtu=mtu, speed=400000, address=f"192.168.{i}.18/24")
        rdma_port(node, f"mlx5_{i}", netdev, rate="400 Gb/sec (4X NDR)", link_layer="Ethernet")
    return node


def fabric_variants() -> list[Node]:
    """Network and RDMA variants."""
    nodes = [with_ndr_fabric(hgx_h100("synthetic-ndr-fabric-healthy"))]
    nodes.append(with_ndr_fabric(hgx_h100("synthetic-rdma-port-down"), down=("mlx5_3",)))
    # mlx5_5 trained at HDR on an NDR fabric: degraded only against the rate the fabric is
    # built for, which gpuprobe.yaml beside it says (rdma.expected_rate_gbps).
    node = with_ndr_fabric(
        hgx_h100("synthetic-rdma-rate-degraded"), rate={"mlx5_5": "200 Gb/sec (4X HDR)"}
    )
    node.config = (
        "# Replay with: gpuprobe check --snapshot DIR --config DIR/gpuprobe.yaml\n"
        "# The fabric is NDR: every port is expected at 400 Gb/s.\n"
        "rdma:\n  expected_rate_gbps: 400\n"
    )
    nodes.append(node)
    nodes.append(
        with_roce_fabric(hgx_h100("synthetic-roce-mtu-mismatch"), (9000, 9000, 1500, 9000))
    )
    node = with_roce_fabric(hgx_h100("synthetic-nic-no-carrier"))
    nic(node, "eno2", driver="ixgbe", mtu=1500, speed=None, operstate="DOWN")
    nodes.append(node)
    node = with_ndr_fabric(hgx_h100("synthetic-rdma-no-uverbs"))
    node.files = {p: c for p, c in node.files.items() if not p.startswith("/dev/infiniband/")}
    nodes.append(node)
    return nodes


def variants() -> list[Node]:
    """Every synthetic snapshot."""
    nodes = [hgx_h100("synthetic-h100-8gpu-healthy")]

    # The same node between jobs: no process on any GPU (active tests may run).
    node = hgx_h100("synthetic-h100-8gpu-idle")
    for i in range(len(H100_PCI)):
        idle(node, i)
    nodes.append(node)

    node = hgx_h100("synthetic-library-mismatch")
    node.init_error = "LibRmVersionMismatch"
    node.calls = []
    node.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.90.07")
    node.files.pop("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15")
    nodes.append(node)

    # Only the NVML record: no host files (the PCI bus is not in view), and nvmlInit found
    # the kernel module and library disagreeing, or /dev/nvidiactl closed to the agent.
    for name, error in (
        ("synthetic-library-mismatch-nvml-only", "LibRmVersionMismatch"),
        ("synthetic-nvml-no-permission-nvml-only", "NoPermission"),
    ):
        nodes.append(Node(name, init_error=error))

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

    # NVML counts GPU 2 but cannot open it: nvmlDeviceGetHandleByIndex raises GpuIsLost, so
    # NVML tells neither its UUID nor its PCI address.
    node = hgx_h100("synthetic-gpu-handle-lost")
    node.call("nvmlDeviceGetHandleByIndex", [2], error="GpuIsLost")
    nodes.append(node)

    # Driver 535.104.05 (CUDA 12.2): too old for images built with CUDA 12.4 or 13.0, which
    # gpuprobe.yaml beside it says the node's images need (driver.required_cuda).
    node = hgx_h100("synthetic-driver-too-old", driver="535.104.05", cuda=12020)
    node.config = (
        "# Replay with: gpuprobe check --snapshot DIR --config DIR/gpuprobe.yaml\n"
        "# The CUDA versions this node's images are built with.\n"
        "driver:\n  required_cuda: ['12.4', '13.0']\n"
    )
    nodes.append(node)

    # The kernel module was upgraded to 550.90.07 but NVML still answers as 550.54.15.
    node = hgx_h100("synthetic-module-library-differ")
    node.file("/proc/driver/nvidia/version", module_version_text("550.90.07"))
    nodes.append(node)

    # NVML hangs on GPU 2's memory query (an hour): the gpus check overruns its deadline
    # while the driver check answers; the daemon's tests serve through the hang.
    node = hgx_h100("synthetic-nvml-hang")
    node.replace_call("nvmlDeviceGetMemoryInfo", [2], ret=dict(H100_MEMORY))
    node.calls[-1]["delay"] = 3600
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
    node.processes = [FABRIC_MANAGER] + [
        {"pid": pid, "name": "python3", "cmdline": ["python3", "train.py"]}
        for running in jobs.values()
        for pid, _ in running
    ]
    nodes.append(node)
    return (
        nodes
        + health_variants()
        + mig_variants()
        + xid_variants()
        + fault_variants()
        + container_variants()
        + fabric_variants()
        + workload_variants()
        + pod_failure_variants()
        + amd_variants()
        + lifecycle_variants()
    )


def health_variants() -> list[Node]:
    """One GPU health fault each (check `gpus`)."""
    nodes = []

    # GPU 2: three uncorrectable ECC errors since the driver loaded.
    node = hgx_h100("synthetic-ecc-uncorrectable")
    node.replace_call("nvmlDeviceGetTotalEccErrors", [2, 1, 0], ret=3)
    node.replace_call("nvmlDeviceGetTotalEccErrors", [2, 1, 1], ret=3)
    nodes.append(node)

    # GPU 3: two rows remapped for uncorrectable errors, a reset pending (the contract's case).
    node = hgx_h100("synthetic-remap-pending")
    node.replace_call("nvmlDeviceGetRemappedRows", [3], ret=[0, 2, 1, 0])
    nodes.append(node)

    # GPU 6: remapping failed (no spare row left).
    node = hgx_h100("synthetic-remap-failure")
    node.replace_call("nvmlDeviceGetRemappedRows", [6], ret=[0, 5, 0, 1])
    nodes.append(node)

    # GPU 1 retires pages, as pre-Ampere GPUs do, and a retirement is pending.
    node = hgx_h100("synthetic-retired-pages-pending")
    node.replace_call("nvmlDeviceGetRemappedRows", [1], error="NotSupported")
    node.replace_call("nvmlDeviceGetRetiredPagesPendingStatus", [1], ret=1)
    nodes.append(node)

    # GPU 4 trained its link at x8 of x16; GPU 5 is idle and its link saves power at Gen1.
    node = idle(hgx_h100("synthetic-pcie-degraded"), 5, generation=1)
    node.replace_call("nvmlDeviceGetCurrPcieLinkWidth", [4], ret=8)
    nodes.append(node)

    # GPU 1: NVLink 7 is down, its 17 other links up.
    node = hgx_h100("synthetic-nvlink-down")
    node.replace_call("nvmlDeviceGetNvLinkState", [1, 7], ret=0)
    nodes.append(node)

    # No fabric manager runs: no GPU registered with the NVSwitch fabric.
    node = hgx_h100("synthetic-fabric-not-started")
    for i in range(len(H100_PCI)):
        node.replace_call("nvmlDeviceGetGpuFabricInfoV", [i], ret=fabric_info(1))
    node.processes = [p for p in node.processes if p["name"] != "nv-fabricmanager"]
    nodes.append(node)

    # The fabric manager stopped after every GPU registered: running work keeps going, but
    # new NVLink partitions and GPU resets fail.
    node = hgx_h100("synthetic-fabric-manager-stopped")
    node.processes = [p for p in node.processes if p["name"] != "nv-fabricmanager"]
    nodes.append(node)

    # An A100-style NVSwitch node (no fabric info API: NotSupported) without the fabric
    # manager: CUDA fails to start (error 802, system not yet initialized).
    node = hgx_h100("synthetic-fabric-manager-missing-no-fabric-api")
    for i in range(len(H100_PCI)):
        node.replace_call("nvmlDeviceGetGpuFabricInfoV", [i], error="NotSupported")
    node.processes = [p for p in node.processes if p["name"] != "nv-fabricmanager"]
    nodes.append(node)

    # The fabric manager runs and GPU 0 is still registering.
    node = hgx_h100("synthetic-fabric-in-progress")
    node.replace_call("nvmlDeviceGetGpuFabricInfoV", [0], ret=fabric_info(2))
    nodes.append(node)

    # GPU 7 is at 89 °C, past its 87 °C slowdown threshold: hardware thermal slowdown.
    node = hgx_h100("synthetic-thermal-slowdown")
    node.replace_call("nvmlDeviceGetTemperature", [7, 0], ret=89)
    node.replace_call("nvmlDeviceGetCurrentClocksEventReasons", [7], ret=0x40)
    nodes.append(node)

    # GPU 0: hardware slowdown with no cause bit (told by the older function name).
    node = hgx_h100("synthetic-hw-slowdown")
    node.drop_calls(lambda c: c["fn"] == "nvmlDeviceGetCurrentClocksEventReasons")
    for i in range(len(H100_PCI)):
        node.call("nvmlDeviceGetCurrentClocksThrottleReasons", [i], 0x8 if i == 0 else 0)
    nodes.append(node)

    # GPU 2: the external power brake (and so hardware slowdown) is asserted.
    node = hgx_h100("synthetic-power-brake")
    node.replace_call("nvmlDeviceGetCurrentClocksEventReasons", [2], ret=0x88)
    nodes.append(node)

    # GPU 5: the driver asks for a node reboot (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 2).
    node = hgx_h100("synthetic-recovery-node-reboot")
    node.replace_call("nvmlDeviceGetFieldValues", [5, [230]], ret=[field_value(230, 2)])
    nodes.append(node)

    # GPUs 6 and 7 sit idle: a fact in one-shot check, GPU_IDLE in the daemon past the window.
    # A job lands on GPU 7 after the first look (later samples answer in order).
    node = idle(idle(hgx_h100("synthetic-gpus-idle"), 6), 7)
    job = training_process(7)
    node.call(
        "nvmlDeviceGetComputeRunningProcesses", [7], [{"pid": job["pid"], "usedGpuMemory": 1 << 30}]
    )
    node.call("nvmlDeviceGetUtilizationRates", [7], {"gpu": 88, "memory": 30})
    node.processes.append(job)
    nodes.append(node)
    return nodes


def mig_variants() -> list[Node]:
    """MIG layouts (check `mig`)."""
    nodes = []

    # Every GPU split into seven 1g.10gb devices: fits the device plugin's `single` strategy.
    node = hgx_h100("synthetic-mig-single")
    for gpu in range(len(H100_PCI)):
        mig_layout(node, gpu, [mig("1g.10gb", gi=7 + s, start=s) for s in range(7)])
    nodes.append(node)

    # GPUs 0-3 split in different ways (a 3g.40gb split into three compute instances on
    # GPU 3), GPUs 4-7 whole: fits `mixed` only.
    node = hgx_h100("synthetic-mig-mixed")
    mig_layout(
        node,
        0,
        [
            mig("3g.40gb", gi=2, start=4),
            mig("2g.20gb", gi=3, start=0),
            mig("1g.10gb", gi=9, start=2),
            mig("1g.10gb", gi=10, start=3),
        ],
    )
    mig_layout(node, 1, [mig("7g.80gb", gi=0, start=0)])
    mig_layout(node, 2, [mig("4g.40gb", gi=1, start=0), mig("3g.40gb", gi=2, start=4)])
    mig_layout(node, 3, [mig("3g.40gb", gi=1, start=0, ci=c, ci_slices=1) for c in range(3)])
    for c in range(3):  # each compute instance takes one of the GPU instance's three slices
        node.replace_call(
            "nvmlComputeInstanceGetInfo_v2",
            [f"ci:3:1:{c}"],
            ret={
                "device": None,
                "gpuInstance": None,
                "id": c,
                "profileId": 0,
                "placement": {"start": c, "size": 1},
            },
        )
    nodes.append(node)

    # MIG on every GPU, but GPU 7 is split into two 3g.40gb instead of seven 1g.10gb.
    node = hgx_h100("synthetic-mig-two-profiles")
    for gpu in range(len(H100_PCI) - 1):
        mig_layout(node, gpu, [mig("1g.10gb", gi=7 + s, start=s) for s in range(7)])
    mig_layout(node, 7, [mig("3g.40gb", gi=1, start=0), mig("3g.40gb", gi=2, start=4)])
    nodes.append(node)

    # GPU 2: MIG enabled, pending until the GPU is reset.
    node = hgx_h100("synthetic-mig-pending")
    node.replace_call("nvmlDeviceGetMigMode", [2], ret=[0, 1])
    nodes.append(node)

    # GPU 5: MIG on, but nobody created a GPU instance.
    node = mig_layout(hgx_h100("synthetic-mig-no-instances"), 5, [])
    nodes.append(node)
    return nodes


def xid_variants() -> list[Node]:
    """XIDs in the kernel log and from NVML events (check `xid`)."""
    nodes = []
    base_log = kernel_log()

    # Application XIDs on GPUs 0 and 4 among unrelated kernel lines.
    node = hgx_h100("synthetic-xid-app")
    a0, a4 = H100_PCI[0], H100_PCI[4]
    node.file(
        "/var/log/kern.log",
        base_log
        + xid_line(
            a0,
            13,
            "pid=41000, name=python3, Graphics SM Warp Exception on (GPC 1, "
            "TPC 2, SM 0): Out Of Range Address",
            "10:01:07",
        )
        + f"{stamp('10:01:07')} NVRM: Xid (PCI:{a0[:-2]}): 13, pid=41000, name=python3, "
        "Graphics Exception: ESR 0x524730=0x2000d 0x524734=0x0\n"
        + f'{stamp("10:01:08")} audit: type=1400 apparmor="STATUS" operation="profile"\n'
        + xid_line(
            a0,
            31,
            "pid=41000, name=python3, Ch 00000008, intr 00000000. MMU Fault: "
            "ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1e_00000000. Fault is of "
            "type FAULT_PDE ACCESS_TYPE_VIRT_READ",
            "10:01:09",
        )
        + f"{stamp('10:02:00')} systemd-journald[512]: Data hash table of /var/log/journal "
        "has a fill level at 75.0\n"
        + xid_line(a4, 43, "pid=41004, name=python3, Ch 00000010", "11:30:00")
        + xid_line(a4, 45, "pid=41004, name=python3, Ch 00000010", "11:30:01"),
    )
    nodes.append(node)

    # Hardware XIDs: a double-bit ECC error (48) and its row remapping (63) on GPU 2, a GSP
    # timeout (119) and the recovery it asks for (154) on GPU 6; syslog holds the same
    # kernel lines as kern.log.
    node = hgx_h100("synthetic-xid-critical")
    a2, a6 = H100_PCI[2], H100_PCI[6]
    log = (
        base_log
        + xid_line(
            a2,
            48,
            "pid=41002, name=python3, An uncorrectable double bit error (DBE) "
            "has been detected on GPU in the framebuffer at partition 6, subpartition "
            "0.",
            "14:22:51",
        )
        + xid_line(
            a2,
            63,
            "pid=41002, name=python3, Row Remapper: New row (0x0000000000b3e1c0) "
            "was marked for remapping, reset gpu to activate.",
            "14:22:51",
        )
        + f"{stamp('14:22:52')} nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected "
        "invalid context, skipping further processing\n"
        + xid_line(
            a6,
            119,
            "pid=41006, name=python3, Timeout after 6s of waiting for RPC "
            "response from GPU6 GSP! Expected function 76 (GSP_RM_CONTROL).",
            "18:40:13",
        )
        + xid_line(
            a6,
            119,
            "pid=41006, name=python3, Timeout after 6s of waiting for RPC "
            "response from GPU6 GSP! Expected function 10 (FREE).",
            "18:40:19",
        )
        + xid_line(
            a6,
            154,
            "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
            "18:40:20",
        )
    )
    node.file("/var/log/kern.log", log)
    node.file(
        "/var/log/syslog",
        f"{stamp('14:22:50')} systemd[1]: Started session-41.scope.\n"
        + "".join(line + "\n" for line in log.splitlines() if " NVRM: Xid " in line),
    )
    nodes.append(node)

    # NVML's event set saw an uncontained memory error (95) on GPU 3 (also in kern.log) and two
    # application faults (13) on GPU 0; a single-bit ECC event is no XID.
    node = hgx_h100("synthetic-xid-event")
    node.events = [
        {"device": 0, "type": "XidCriticalError", "data": 13, "time": "2026-11-29T19:02:11Z"},
        {"device": 1, "type": "SingleBitEccError", "data": 0, "time": "2026-11-29T19:30:00Z"},
        {"device": 0, "type": "XidCriticalError", "data": 13, "time": "2026-11-29T19:02:12Z"},
        {"device": 3, "type": "XidCriticalError", "data": 95, "time": "2026-11-29T20:58:01Z"},
    ]
    node.file(
        "/var/log/kern.log",
        base_log
        + xid_line(
            H100_PCI[3],
            95,
            "pid=41003, name=python3, Uncontained: FBHUB. RST: Yes, D-RST: No",
            "20:58:01",
        ),
    )
    nodes.append(node)

    # NVML's critical events other than XIDs: two double-bit ECC events on GPU 2, a fatal poison
    # on GPU 4, a DRAM retirement failure on GPU 5, GPU 6 unavailable, recovery actions on GPU 7
    # (its recovery action field asks for a node reboot) and GPU 1 (the field not supported);
    # single-bit ECC, non-fatal poison and clock events raise nothing, nor does a recovery
    # action event on GPU 0, whose field says none is needed any more.
    node = hgx_h100("synthetic-nvml-critical-events")
    node.replace_call("nvmlDeviceGetFieldValues", [7, [230]], ret=[field_value(230, 2)])
    unsupported = field_value(230, 0) | {"nvmlReturn": 3}
    node.replace_call("nvmlDeviceGetFieldValues", [1, [230]], ret=[unsupported])
    node.events = [
        {"device": 2, "type": "DoubleBitEccError", "data": 0, "time": "2026-11-29T18:00:00Z"},
        {"device": 0, "type": "SingleBitEccError", "data": 0, "time": "2026-11-29T18:00:01Z"},
        {"device": 4, "type": "FatalPoisonError", "data": 0, "time": "2026-11-29T18:10:00Z"},
        {"device": 3, "type": "NonFatalPoisonError", "data": 0, "time": "2026-11-29T18:10:01Z"},
        {"device": 5, "type": "DramRetirementFailure", "data": 0, "time": "2026-11-29T18:20:00Z"},
        {"device": 6, "type": "GpuUnavailableError", "data": 0, "time": "2026-11-29T18:30:00Z"},
        {"device": 7, "type": "GpuRecoveryAction", "data": 0, "time": "2026-11-29T18:40:00Z"},
        {"device": 1, "type": "GpuRecoveryAction", "data": 0, "time": "2026-11-29T18:41:00Z"},
        {"device": 0, "type": "Clock", "data": 0, "time": "2026-11-29T18:42:00Z"},
        {"device": 0, "type": "GpuRecoveryAction", "data": 0, "time": "2026-11-29T18:43:00Z"},
        {"device": 2, "type": "DoubleBitEccError", "data": 0, "time": "2026-11-29T18:50:00Z"},
    ]
    nodes.append(node)
    return nodes


# --- Faults beyond the plain XID: NVLink5, XID-less, SXid, PCIe AER, IMEX, recoveries ------
# Kernel-log lines in the shapes NVIDIA's catalog and Fabric Manager guide give and public bug
# reports show (GB200/B200 NVLink5 lines from leptonai/gpud and TensorRT-LLM issue 4816, the
# fallen-off-the-bus and RmInitAdapter messages from NVIDIA's driver, SXids from the Fabric
# Manager guide and Red Hat solution 6619941); sysfs AER files in the kernel's format.

B200_NAME = "NVIDIA B200"
GB200_NAME = "NVIDIA GB200"
GB200_GPUS = 4  # a GB200 NVL72 compute tray: two superchips, four GPUs
NVL72_CLUSTER = [0x7C, 0x3A, 0x91, 0x5E, 0x2D, 0x40, 0x4B, 0x18, 0x9F, 0x06, 0x33, 0xA1, 0x52, 0xC8,
                 0x7E, 0x14]  # fmt: skip
NVL72_CLIQUE = 32766
IMEX_CONFIG = "/etc/nvidia-imex/config.cfg"
IMEX_NODES = "/etc/nvidia-imex/nodes_config.cfg"


def log_line(clock: str, text: str) -> str:
    """A kernel line of the capture day in rsyslog's RFC 3339 format."""
    return f"{stamp(clock)} {text}\n"


def b200(name: str) -> Node:
    """An HGX B200 8-GPU node (driver 570.124.06, CUDA 12.8): the H100 board's layout."""
    node = hgx_h100(name, driver="570.124.06", cuda=12080)
    for i in range(len(H100_PCI)):
        node.replace_call("nvmlDeviceGetName", [i], ret=B200_NAME)
    return node


def gb200(name: str, imex: bool) -> Node:
    """A GB200 NVL72 compute tray: four GPUs in the rack's multi-node NVLink domain (no
    NVSwitch on its own PCI bus), with or without its IMEX daemon and channel."""
    node = hgx_h100(name, driver="570.124.06", cuda=12080)
    gone = H100_PCI[GB200_GPUS:]
    node.files = {
        p: c
        for p, c in node.files.items()
        if not any(f"/sys/bus/pci/devices/{a}/" in p for a in gone + NVSWITCH_PCI)
    }
    node.drop_calls(
        lambda c: (
            c["fn"].startswith("nvmlDevice") and bool(c["args"]) and c["args"][0] >= GB200_GPUS
        )
    )
    node.replace_call("nvmlDeviceGetCount", [], ret=GB200_GPUS)
    for i in range(GB200_GPUS):
        node.replace_call("nvmlDeviceGetName", [i], ret=GB200_NAME)
        node.replace_call(
            "nvmlDeviceGetGpuFabricInfoV", [i], ret=fabric_info(3, 0, NVL72_CLUSTER, NVL72_CLIQUE)
        )
    node.processes = [training_process(i) for i in range(GB200_GPUS)]
    node.file(
        IMEX_CONFIG,
        "# NVIDIA IMEX config (package default, node file set)\n"
        "DAEMONIZE=1\nLOG_LEVEL=4\nSERVER_PORT=50000\n"
        f"IMEX_NODE_CONFIG_FILE={IMEX_NODES}\nIMEX_CMD_PORT=50005\nIMEX_CMD_ENABLED=1\n",
    )
    node.file(IMEX_NODES, "".join(f"10.114.8.{11 + i}\n" for i in range(18)))
    if imex:
        node.processes.append(
            {
                "pid": 3301,
                "name": "nvidia-imex",
                "cmdline": ["/usr/bin/nvidia-imex", "-c", IMEX_CONFIG],
            }
        )
        node.file("/dev/nvidia-caps-imex-channels/channel0")
    return node


def sysfs_device(node: Node, path: str, vendor: str, device: str, class_code: str) -> Node:
    """A PCI function where the kernel keeps it (`/sys/devices/pci0000:36/.../0000:3a:00.0`),
    linked from /sys/bus/pci/devices/<address> as the kernel does."""
    address = path.rsplit("/", 1)[1]
    for key in ("vendor", "device", "class"):
        node.files.pop(f"/sys/bus/pci/devices/{address}/{key}", None)
    node.file(f"{path}/vendor", vendor + "\n")
    node.file(f"{path}/device", device + "\n")
    node.file(f"{path}/class", class_code + "\n")
    return node.symlink(f"/sys/bus/pci/devices/{address}", f"../../..{path[len('/sys') :]}")


def aer_files(
    node: Node,
    path: str,
    correctable: dict[str, int],
    nonfatal: dict[str, int],
    fatal: dict[str, int],
) -> Node:
    """A device's AER counter files in the kernel's format (every name, zero unless given)."""
    cor = [
        "RxErr",
        "BadTLP",
        "BadDLLP",
        "Rollover",
        "Timeout",
        "NonFatalErr",
        "CorrIntErr",
        "HeaderOF",
    ]
    unc = ["Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF",
           "MalfTLP", "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP",
           "AtomicOpBlocked", "TLPBlockedErr", "PoisonTLPBlocked"]  # fmt: skip
    for name, names, counts, total in (
        ("aer_dev_correctable", cor, correctable, "TOTAL_ERR_COR"),
        ("aer_dev_nonfatal", unc, nonfatal, "TOTAL_ERR_NONFATAL"),
        ("aer_dev_fatal", unc, fatal, "TOTAL_ERR_FATAL"),
    ):
        lines = [f"{n} {counts.get(n, 0)}" for n in names] + [f"{total} {sum(counts.values())}"]
        node.file(f"{path}/{name}", "\n".join(lines) + "\n")
    return node


# GPU 2's PCIe path on the synthetic board: root port, a PCIe switch's two ports, the GPU.
GPU2_PATH = "/sys/devices/pci0000:36/0000:36:02.0/0000:37:00.0/0000:38:02.0/0000:3a:00.0"
NVSWITCH1_PATH = "/sys/devices/pci0000:00/0000:00:03.0/0000:06:00.0"


def fault_variants() -> list[Node]:
    """NVLink5 XIDs, faults without an XID number, SXids, PCIe AER, IMEX and recoveries."""
    nodes = []
    base_log = kernel_log()
    a = H100_PCI

    # HGX B200: NVLink5 XIDs with their unit, Fatal/Nonfatal word and error status. GPU 1's
    # link went down (reset the GPU), GPU 2 logged a bit error rate event and GPU 4 a remap
    # event without registers (both to ignore), GPU 6 a non-fatal then a fatal SAW error.
    node = b200("synthetic-b200-nvlink5-xids")
    node.file(
        "/var/log/kern.log",
        base_log
        + xid_line(a[1], 149, "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 "
                   "0x00000000 0x00000000 0x00000000 0x00000000)", "17:02:11")
        + xid_line(a[2], 149, "NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x00086226 0x00000001 "
                   "0x00000000 0x00000000 0x00000000 0x00000000)", "17:10:40")
        + xid_line(a[4], 145, "RLW_REMAP Nonfatal XC0 i0 Link 02", "17:15:03")
        + xid_line(a[6], 144, "SAW_MVB Nonfatal XC0 i0 Link 00 (0x00000001 0x00000004 "
                   "0x00000000 0x00000000)", "18:00:00")
        + xid_line(a[6], 144, "SAW_MVB Fatal XC0 i0 Link 00 (0x00000001 0x00000002 0x00000000 "
                   "0x00000000)", "18:00:01"),
    )  # fmt: skip
    nodes.append(node)

    # GPU 3 (0000:5d:00.0) fell off the bus and the driver said so without an XID number.
    node = without_gpu(hgx_h100("synthetic-gpu-fallen-off-bus-no-xid"), 3)
    node.file(
        "/var/log/kern.log",
        base_log
        + log_line("20:58:01", "NVRM: The NVIDIA GPU 0000:5d:00.0")
        + log_line("20:58:01", "NVRM: (PCI ID: 10de:2330) installed in this system has")
        + log_line("20:58:01", "NVRM: fallen off the bus and is not responding to commands.")
        + log_line(
            "20:58:02", "nvidia 0000:5d:00.0: probe with driver nvidia failed with error -1"
        ),
    )
    nodes.append(node)

    # GPU 5 (0000:ab:00.0) failed to initialize: on the PCI bus, not in NVML.
    node = without_gpu(hgx_h100("synthetic-rm-init-adapter-failed"), 5)
    node.file(
        "/var/log/kern.log",
        base_log
        + log_line("08:00:13", "NVRM: GPU 0000:ab:00.0: RmInitAdapter failed! (0x62:0x65:2522)")
        + log_line("08:00:13", "NVRM: GPU 0000:ab:00.0: rm_init_adapter failed, device minor "
                   "number 5"),
    )  # fmt: skip
    nodes.append(node)

    # NVSwitch 0 (0000:05:00.0) logged a fatal SXid 20034 on port 30 with its detail lines;
    # NVSwitch 2 a non-fatal 12028.
    node = hgx_h100("synthetic-nvswitch-sxid")
    s0, s2 = NVSWITCH_PCI[0], NVSWITCH_PCI[2]
    node.file(
        "/var/log/kern.log",
        base_log
        + log_line("19:44:05", f"nvidia-nvswitch2: SXid (PCI:{s2}): 12028, Non-fatal, Link 32 "
                   "egress non-posted PRIV error (First)")
        + log_line("19:44:05", f"nvidia-nvswitch2: SXid (PCI:{s2}): 12028, Severity 0 Engine "
                   "instance 32 Sub-engine instance 00")
        + log_line("20:31:17", f"nvidia-nvswitch0: SXid (PCI:{s0}): 20034, Fatal, Link 30 LTSSM "
                   "Fault Up")
        + log_line("20:31:17", f"nvidia-nvswitch0: SXid (PCI:{s0}): 20034, Severity 1 Engine "
                   "instance 30 Sub-engine instance 00")
        + log_line("20:31:17", f"nvidia-nvswitch0: SXid (PCI:{s0}): 20034, Data {{0x50610002, "
                   "0x10100030, 0x00000000, 0x10100030, 0x00000000, 0x00000000, 0x00000000, "
                   "0x00000000}"),
    )  # fmt: skip
    nodes.append(node)

    # PCIe AER: GPU 2 sits below a root port and a PCIe switch; it counts correctable errors,
    # the switch's downstream port a non-fatal completion timeout; NVSwitch 1 a fatal one.
    node = hgx_h100("synthetic-pcie-aer")
    nvidia_gpu = ("0x10de", "0x2330", "0x030200")
    bridge = ("0x1000", "0xc030", "0x060400")  # Broadcom PEX89000 switch port
    root_port = ("0x8086", "0x352a", "0x060400")
    parts = GPU2_PATH.split("/")
    for depth, ids in ((4, root_port), (5, bridge), (6, bridge), (7, nvidia_gpu)):
        sysfs_device(node, "/".join(parts[: depth + 1]), *ids)
    aer_files(node, "/".join(parts[:5]), {}, {}, {})
    aer_files(node, "/".join(parts[:6]), {}, {}, {})
    aer_files(node, "/".join(parts[:7]), {}, {"CmpltTO": 1}, {})
    aer_files(node, GPU2_PATH, {"RxErr": 12, "BadTLP": 3}, {}, {})
    sysfs_device(node, NVSWITCH1_PATH, "0x10de", "0x22a3", "0x068000")
    aer_files(node, NVSWITCH1_PATH, {}, {}, {"SDES": 1})
    nodes.append(node)

    # GB200 NVL72 compute trays: the IMEX daemon and its channel there, or neither.
    nodes.append(gb200("synthetic-gb200-imex-running", imex=True))
    nodes.append(gb200("synthetic-gb200-imex-missing", imex=False))

    # GPU 2's double-bit ECC error asked for a reset (Xid 154); later the driver logged the
    # recovery action back to None: the GPU was reset.
    node = hgx_h100("synthetic-xid-reset-logged")
    node.file(
        "/var/log/kern.log",
        base_log
        + xid_line(a[2], 48, "pid=41002, name=python3, An uncorrectable double bit error (DBE) "
                   "has been detected on GPU in the framebuffer at partition 6, subpartition 0.",
                   "14:22:51")
        + xid_line(a[2], 154, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset "
                   "Required)", "14:22:52")
        + xid_line(a[2], 154, "GPU recovery action changed from 0x1 (GPU Reset Required) to "
                   "0x0 (None)", "15:10:07"),
    )  # fmt: skip
    nodes.append(node)

    # GPU 7's uncontained memory error (Xid 95): its recovery action field asks for a GPU reset
    # in the first read and reads NONE from the second on (a reset between the daemon's
    # rounds); the -stuck variant keeps asking; in -drain-p2p the field asks for DRAIN_P2P and
    # then reads NONE (peer-to-peer work drained: no reset).
    for name, reads in (
        ("synthetic-recovery-field-reset", [1, 0]),
        ("synthetic-recovery-field-stuck", [1]),
        ("synthetic-recovery-field-drain-p2p", [3, 0]),
    ):
        node = hgx_h100(name)
        node.drop_calls(lambda c: c["fn"] == "nvmlDeviceGetFieldValues" and c["args"][0] == 7)
        for value in reads:
            node.call("nvmlDeviceGetFieldValues", [7, [230]], [field_value(230, value)])
        node.file(
            "/var/log/kern.log",
            base_log + xid_line(a[7], 95, "pid=41007, name=python3, Uncontained: FBHUB. RST: Yes, "
                                "D-RST: No", "16:20:00"),
        )  # fmt: skip
        nodes.append(node)

    # A node whose kernel log is in journald only (no log file to read): NVML's event set
    # alone saw a Nonfatal NVLink5 Xid 149 on GPU 1, an Xid 154 on GPU 2 whose recovery action
    # field reads NONE (the benign "to 0x0 (None)") and one on GPU 4 whose field asks for a
    # node reboot.
    node = hgx_h100("synthetic-xid-events-only")
    node.files.pop("/var/log/kern.log", None)
    node.events = [
        {"device": 1, "type": "XidCriticalError", "data": 149, "time": "2026-11-29T20:40:00Z"},
        {"device": 2, "type": "XidCriticalError", "data": 154, "time": "2026-11-29T20:41:00Z"},
        {"device": 4, "type": "XidCriticalError", "data": 154, "time": "2026-11-29T20:42:00Z"},
    ]
    node.drop_calls(lambda c: c["fn"] == "nvmlDeviceGetFieldValues" and c["args"][0] == 4)
    node.call("nvmlDeviceGetFieldValues", [4, [230]], [field_value(230, 2)])
    nodes.append(node)

    # A journald-only node (no log file) whose kernel ring (its records as /dev/kmsg gives
    # them) holds GPU 3 (0000:5d:00.0) falling off the bus: the driver's XID 79 record with the
    # PCI dictionary the kernel attaches to dev_printk records, and its XID-less line for the
    # same fault; a record a process wrote (the user facility) forges an XID line that must not
    # count.
    node = without_gpu(hgx_h100("synthetic-kmsg-journald-only"), 3)
    node.files.pop("/var/log/kern.log", None)
    node.file(
        "/dev/kmsg",
        "5,0,0,-;Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103) "
        "(x86_64-linux-gnu-gcc-13 (Ubuntu 13.2.0-23ubuntu4) 13.2.0, GNU ld (GNU Binutils for "
        "Ubuntu) 2.42) #49-Ubuntu SMP PREEMPT_DYNAMIC Mon Nov  4 02:06:24 UTC 2024 "
        "(Ubuntu 6.8.0-49.49-generic 6.8.12)\n"
        "6,1,0,-;Command line: BOOT_IMAGE=/vmlinuz-6.8.0-49-generic root=/dev/nvme0n1p2 ro\n"
        "6,2,21512731,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  "
        "Tue Mar  5 22:23:56 UTC 2024\n"
        "6,3,27733504,-;NVRM: GPU at PCI:0000:5d:00: GPU-5f1c0003-8e2b-4c1d-9a7e-000000000003\n"
        "4,4,46681220311,-;NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.\n"
        " SUBSYSTEM=pci\n"
        " DEVICE=+pci:0000:5d:00.0\n"
        "3,5,46681220408,-;NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus.\n"
        "14,6,46681900000,-;NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', "
        "name=<unknown>, GPU has fallen off the bus.\n",
    )
    nodes.append(node)

    # GPU 3 fell off the bus (Xid 79): NVML cannot read it at first, and answers again with the
    # same UUID later (-back; a reset or rescan brought it back); -gone stays lost.
    for name, back in (
        ("synthetic-gpu-lost-and-back", True),
        ("synthetic-gpu-lost-and-gone", False),
    ):
        node = hgx_h100(name)
        pci_info = next(
            c for c in node.calls if c["fn"] == "nvmlDeviceGetPciInfo" and c["args"] == [3]
        )
        node.drop_calls(lambda c: c["fn"] == "nvmlDeviceGetPciInfo" and c["args"] == [3])
        node.call("nvmlDeviceGetPciInfo", [3], error="GpuIsLost")
        if back:
            node.call("nvmlDeviceGetPciInfo", [3], pci_info["ret"])
        node.file(
            "/var/log/kern.log",
            base_log + xid_line(a[3], 79, "pid='<unknown>', name=<unknown>, GPU has fallen off "
                                "the bus.", "20:58:01"),
        )  # fmt: skip
        nodes.append(node)
    return nodes


# --- Container toolkit, engines, CDI, device plugin and GPU sharing ---------------------------
# Configuration files in the shapes their tools write are kept in tests/fixtures/toolkit/
# (nvidia-ctk runtime configure for containerd v2/v3, Docker and CRI-O; nvidia-ctk config
# default; k3s's generated config); the CDI spec is written here in the shape of
# `nvidia-ctk cdi generate` (nvidia-container-toolkit cmd/nvidia-ctk/cdi/generate), so its
# driver version and GPU count can vary.

FIXTURES = HERE.parent / "fixtures" / "toolkit"
PLUGIN_FIXTURES = HERE.parent / "fixtures" / "device_plugin"
# Where the DaemonSet mounts the device plugin's ConfigMap for the agent (docs/configuration.md).
DEVICE_PLUGIN_CONFIG = "/etc/nvidia-device-plugin/config.yaml"
LIB = "/usr/lib/x86_64-linux-gnu"
TOOLKIT_BINARIES = (
    "nvidia-container-runtime",
    "nvidia-container-runtime-hook",
    "nvidia-ctk",
    "nvidia-cdi-hook",
    "nvidia-container-cli",
)
DRIVER_LIBRARIES = (
    "libEGL_nvidia.so",
    "libGLESv2_nvidia.so",
    "libGLX_nvidia.so",
    "libcuda.so",
    "libcudadebugger.so",
    "libnvcuvid.so",
    "libnvidia-allocator.so",
    "libnvidia-cfg.so",
    "libnvidia-eglcore.so",
    "libnvidia-encode.so",
    "libnvidia-glcore.so",
    "libnvidia-glsi.so",
    "libnvidia-gpucomp.so",
    "libnvidia-ml.so",
    "libnvidia-nvvm.so",
    "libnvidia-opencl.so",
    "libnvidia-ptxjitcompiler.so",
    "libnvidia-tls.so",
    "libnvoptix.so",
)
DRIVER_BINARIES = (
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-smi",
)
SPEC_DEVICE_NODES = (
    "/dev/nvidia-modeset",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidiactl",
)
PLUGIN_CDI_SPEC = "/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json"
MOUNT_OPTIONS = "          options:\n" + "".join(
    f"            - {o}\n" for o in ("ro", "nosuid", "nodev", "rbind", "rprivate")
)


def fixture(name: str) -> str:
    """A configuration file from tests/fixtures/toolkit/."""
    return (FIXTURES / name).read_text(encoding="utf-8")


def driver_host_files(driver: str) -> list[str]:
    """The driver's files a generated CDI spec mounts, at their host paths."""
    files = [f"{LIB}/{lib}.{driver}" for lib in DRIVER_LIBRARIES]
    files.append(f"{LIB}/vdpau/libvdpau_nvidia.so.{driver}")
    # Not versioned with the driver: must not count as a driver version.
    files.append(f"{LIB}/libnvidia-egl-wayland.so.1.1.13")
    files += [f"/usr/bin/{b}" for b in DRIVER_BINARIES]
    files += [f"/lib/firmware/nvidia/{driver}/{fw}" for fw in ("gsp_ga10x.bin", "gsp_tu10x.bin")]
    files.append("/run/nvidia-persistenced/socket")
    return files


def cdi_hook(args: list[str]) -> str:
    """One createContainer hook of nvidia-cdi-hook, as nvidia-ctk writes it."""
    lines = "".join(f"            - {a}\n" for a in ["nvidia-cdi-hook", *args])
    return (
        "        - hookName: createContainer\n"
        "          path: /usr/bin/nvidia-cdi-hook\n"
        "          args:\n"
        f"{lines}"
        "          env:\n"
        "            - NVIDIA_CTK_DEBUG=false\n"
    )


def nvidia_cdi_spec(
    driver: str, gpus: int, name: Callable[[int], str] = str, kind: str = "nvidia.com/gpu"
) -> str:
    """A CDI spec as `nvidia-ctk cdi generate` writes it for `gpus` GPUs and `driver`, each GPU
    named by `name` (its `--device-name-strategy`: index "0", type-index "gpu0", uuid)."""
    nodes = "".join(f"            - path: /dev/nvidia{i}\n" for i in range(gpus))
    devices = "".join(
        f'    - name: "{name(i)}"\n'
        "      containerEdits:\n"
        "        deviceNodes:\n"
        f"            - path: /dev/nvidia{i}\n"
        for i in range(gpus)
    )
    devices += f"    - name: all\n      containerEdits:\n        deviceNodes:\n{nodes}"
    common_nodes = "".join(f"        - path: {n}\n" for n in SPEC_DEVICE_NODES)
    hooks = cdi_hook(["create-symlinks", "--link", f"libcuda.so.1::{LIB}/libcuda.so"])
    hooks += cdi_hook(["enable-cuda-compat", f"--host-driver-version={driver}"])
    hooks += cdi_hook(["update-ldcache", "--folder", LIB, "--folder", f"{LIB}/vdpau"])
    hooks += cdi_hook(["disable-device-node-modification"])
    mounts = "".join(
        f"        - hostPath: {path}\n          containerPath: {path}\n{MOUNT_OPTIONS}"
        for path in driver_host_files(driver)
    )
    return (
        "---\n"
        "cdiVersion: 0.5.0\n"
        f"kind: {kind}\n"
        "devices:\n"
        f"{devices}"
        "containerEdits:\n"
        "    env:\n"
        f"        - NVIDIA_CTK_LIBCUDA_DIR={LIB}\n"
        "        - NVIDIA_VISIBLE_DEVICES=void\n"
        "    deviceNodes:\n"
        f"{common_nodes}"
        "    hooks:\n"
        f"{hooks}"
        "    mounts:\n"
        f"{mounts}"
    )


def type_index_name(index: int) -> str:
    """A GPU's CDI device name under nvidia-ctk's `--device-name-strategy=type-index`."""
    return f"gpu{index}"


def device_plugin_cdi_spec(driver: str, gpus: int) -> str:
    """The spec the device plugin writes itself with a CDI deviceListStrategy: kind
    k8s.device-plugin.nvidia.com/gpu, devices named by UUID (its default deviceIDStrategy),
    saved as JSON (k8s-device-plugin internal/cdi)."""
    spec = yaml.safe_load(
        nvidia_cdi_spec(driver, gpus, gpu_uuid, kind="k8s.device-plugin.nvidia.com/gpu")
    )
    return json.dumps(spec, indent=2) + "\n"


def driver_files(node: Node, driver: str) -> Node:
    """The driver's libraries, binaries, firmware and device nodes on the host."""
    for path in driver_host_files(driver):
        node.file(path)
    for i in range(len(H100_PCI)):
        node.file(f"/dev/nvidia{i}")
    for path in SPEC_DEVICE_NODES:
        node.file(path)
    return node


def toolkit(node: Node, directory: str = "/usr/bin", config: str | None = None) -> Node:
    """The NVIDIA Container Toolkit's binaries and its default config.toml."""
    for name in TOOLKIT_BINARIES:
        node.file(f"{directory}/{name}")
    node.file(
        "/etc/nvidia-container-runtime/config.toml",
        config or fixture("nvidia-container-runtime-config.toml"),
    )
    return node


def containerd_v2_drop_in(node: Node) -> Node:
    """containerd 1.7 configured by nvidia-ctk: imports in config.toml, the runtime in a drop-in."""
    node.file("/etc/containerd/config.toml", fixture("containerd-v2-config.toml"))
    node.file("/etc/containerd/conf.d/99-nvidia.toml", fixture("containerd-v2-99-nvidia.toml"))
    return containerd_running(node)


def containerd_running(node: Node, config: str | None = None, pid: int = 1021) -> Node:
    """containerd's socket and process (with `-c config` when given)."""
    socket = "/run/k3s/containerd/containerd.sock" if config else "/run/containerd/containerd.sock"
    node.file(socket)
    cmdline = ["/usr/bin/containerd"] + (["-c", config] if config else [])
    node.processes.append({"pid": pid, "name": "containerd", "cmdline": cmdline})
    return node


def kubelet(node: Node, plugin_sockets: tuple[str, ...] = ("nvidia-gpu.sock",)) -> Node:
    """The kubelet's device-plugins directory with its socket and the plugin's."""
    node.file("/var/lib/kubelet/device-plugins/kubelet.sock")
    for name in plugin_sockets:
        node.file(f"/var/lib/kubelet/device-plugins/{name}")
    return node


def cdi_spec(node: Node, driver: str = "550.54.15", gpus: int = 8) -> Node:
    """The generated spec at /var/run/cdi/nvidia.yaml."""
    return node.file("/var/run/cdi/nvidia.yaml", nvidia_cdi_spec(driver, gpus))


def gpu_k8s_node(name: str, driver: str = "550.54.15") -> Node:
    """A healthy Kubernetes GPU node: toolkit, containerd v2 with the nvidia drop-in (default
    runtime, CDI on), the generated CDI spec and the device plugin registered."""
    node = hgx_h100(name, driver=driver)
    driver_files(node, driver)
    toolkit(node)
    containerd_v2_drop_in(node)
    cdi_spec(node, driver)
    return kubelet(node)


def set_compute_mode(node: Node, mode: int, gpus: range = range(len(H100_PCI))) -> Node:
    """Set the listed GPUs' compute mode: 0 Default, 1 ExclusiveThread, 2 Prohibited,
    3 ExclusiveProcess."""
    for i in gpus:
        node.replace_call("nvmlDeviceGetComputeMode", [i], ret=mode)
    return node


def device_plugin_config(node: Node, name: str) -> Node:
    """The device plugin's config.yaml (tests/fixtures/device_plugin/), as capture keeps it."""
    node.device_plugin = (PLUGIN_FIXTURES / name).read_text(encoding="utf-8")
    return node


def mps_daemon(node: Node) -> Node:
    """The MPS control daemon as the device plugin's MPS pod runs it."""
    node.processes.append(
        {
            "pid": 4242,
            "name": "nvidia-cuda-mps-control",
            "cmdline": ["nvidia-cuda-mps-control", "-d"],
        }
    )
    return node


def container_variants() -> list[Node]:
    """Toolkit, engine, CDI, device plugin and sharing snapshots."""
    nodes = [gpu_k8s_node("synthetic-h100-k8s-containerd-healthy")]

    # containerd 2.x (config version 3): the drop-in adds the runtime without making it the
    # default, so pods need runtimeClassName: nvidia; CDI is on in the root file.
    node = hgx_h100("synthetic-containerd-v3-runtimeclass")
    driver_files(node, "550.54.15")
    toolkit(node)
    node.file("/etc/containerd/config.toml", fixture("containerd-v3-config.toml"))
    node.file("/etc/containerd/conf.d/99-nvidia.toml", fixture("containerd-v3-99-nvidia.toml"))
    containerd_running(node)
    cdi_spec(node)
    nodes.append(kubelet(node))

    # The driver was upgraded to 550.90.07 (and the node rebooted); the spec still names 550.54.15.
    node = gpu_k8s_node("synthetic-cdi-stale-after-driver-upgrade", driver="550.90.07")
    node.files.pop("/var/run/cdi/nvidia.yaml")
    cdi_spec(node, driver="550.54.15")
    nodes.append(node)

    # Generated while GPU 5 had fallen off the bus: the spec defines 7 GPUs, NVML sees 8.
    node = gpu_k8s_node("synthetic-cdi-spec-missing-gpu")
    cdi_spec(node, gpus=7)
    nodes.append(node)

    # The spec generated with `nvidia-ctk cdi generate --device-name-strategy=type-index`:
    # devices gpu0 … gpu7.
    node = gpu_k8s_node("synthetic-cdi-type-index-names")
    node.file("/var/run/cdi/nvidia.yaml", nvidia_cdi_spec("550.54.15", 8, type_index_name))
    nodes.append(node)

    # The device plugin passes CDI names (deviceListStrategy cdi-cri) and has written its own
    # spec; nvidia-ctk's spec was never generated on this node.
    node = device_plugin_config(gpu_k8s_node("synthetic-cdi-device-plugin-spec"), "cdi-cri.yaml")
    node.files.pop("/var/run/cdi/nvidia.yaml")
    node.file(PLUGIN_CDI_SPEC, device_plugin_cdi_spec("550.54.15", 8))
    nodes.append(node)

    # Two generated specs merged by hand into one: device "0" is defined twice. The toolkit
    # runs in cdi mode, so every GPU container needs the spec.
    node = gpu_k8s_node("synthetic-cdi-spec-invalid")
    cdi_mode = fixture("nvidia-container-runtime-config.toml").replace(
        'mode = "auto"', 'mode = "cdi"'
    )
    node.file("/etc/nvidia-container-runtime/config.toml", cdi_mode)
    spec = nvidia_cdi_spec("550.54.15", 8)
    duplicate = (
        '    - name: "0"\n      containerEdits:\n        deviceNodes:\n'
        "            - path: /dev/nvidia0\n"
    )
    node.file("/var/run/cdi/nvidia.yaml", spec.replace("devices:\n", "devices:\n" + duplicate, 1))
    nodes.append(node)

    # A kubeadm node: the toolkit is installed but `nvidia-ctk runtime configure` never ran.
    node = gpu_k8s_node("synthetic-containerd-no-nvidia-runtime")
    node.files.pop("/etc/containerd/conf.d/99-nvidia.toml")
    node.file("/etc/containerd/config.toml", fixture("containerd-v2-kubeadm-config.toml"))
    nodes.append(node)

    # The drop-in is there, but config.toml (rewritten by kubeadm tooling) no longer imports it.
    node = gpu_k8s_node("synthetic-containerd-drop-in-not-imported")
    node.file("/etc/containerd/config.toml", fixture("containerd-v2-kubeadm-config.toml"))
    nodes.append(node)

    # The GPU Operator was uninstalled and the toolkit package installed instead: containerd's
    # nvidia runtimes still point into /usr/local/nvidia/toolkit, which is gone.
    node = gpu_k8s_node("synthetic-runtime-binary-missing")
    node.files.pop("/etc/containerd/conf.d/99-nvidia.toml")
    node.file("/etc/containerd/config.toml", fixture("containerd-v2-gpu-operator-config.toml"))
    nodes.append(node)

    # k3s started before the toolkit was installed: its generated config has no nvidia runtime.
    node = hgx_h100("synthetic-k3s-no-nvidia-runtime")
    driver_files(node, "550.54.15")
    toolkit(node)
    k3s_config = "/var/lib/rancher/k3s/agent/etc/containerd/config.toml"
    node.file(k3s_config, fixture("k3s-config.toml"))
    containerd_running(node, config=k3s_config, pid=2077)
    nodes.append(kubelet(node))

    # A plain Docker host (no Kubernetes): nvidia runtime in daemon.json; Docker's containerd
    # has its CRI plugin disabled and is not judged.
    node = hgx_h100("synthetic-docker-nvidia-runtime")
    driver_files(node, "550.54.15")
    toolkit(node)
    node.file("/etc/docker/daemon.json", fixture("docker-daemon.json"))
    node.file("/etc/containerd/config.toml", fixture("docker-containerd-config.toml"))
    node.file("/run/docker.sock")
    node.processes.append(
        {"pid": 1300, "name": "dockerd", "cmdline": ["/usr/bin/dockerd", "-H", "fd://"]}
    )
    nodes.append(containerd_running(node))

    # CRI-O on Kubernetes with nvidia-ctk's drop-in making nvidia the default runtime.
    node = hgx_h100("synthetic-crio-nvidia-drop-in")
    driver_files(node, "550.54.15")
    toolkit(node)
    node.file("/etc/crio/crio.conf", fixture("crio.conf"))
    node.file("/etc/crio/crio.conf.d/99-nvidia.conf", fixture("crio-99-nvidia.conf"))
    node.file("/var/run/crio/crio.sock")
    node.processes.append({"pid": 1400, "name": "crio", "cmdline": ["/usr/bin/crio"]})
    cdi_spec(node)
    nodes.append(kubelet(node))

    # A Kubernetes GPU node whose device plugin never registered: only the kubelet's socket.
    node = gpu_k8s_node("synthetic-k8s-no-device-plugin")
    node.files.pop("/var/lib/kubelet/device-plugins/nvidia-gpu.sock")
    nodes.append(node)

    # MPS: the plugin's MPS daemon runs and has set EXCLUSIVE_PROCESS on every GPU.
    node = mps_daemon(set_compute_mode(gpu_k8s_node("synthetic-mps-daemon-running"), 3))
    nodes.append(device_plugin_config(node, "mps.yaml"))

    # MPS configured but its control daemon is not running (GPUs left in Default).
    nodes.append(device_plugin_config(gpu_k8s_node("synthetic-mps-daemon-missing"), "mps.yaml"))

    # MPS on a node where GPUs 0 and 1 have MIG enabled.
    node = mps_daemon(set_compute_mode(gpu_k8s_node("synthetic-mps-on-mig"), 3))
    device_plugin_config(node, "mps.yaml")
    for i in range(len(H100_PCI)):
        node.replace_call("nvmlDeviceGetMigMode", [i], ret=[1, 1] if i < 2 else [0, 0])
    nodes.append(node)

    # Time-slicing while GPU 2 was left in EXCLUSIVE_PROCESS and GPU 6 in Prohibited.
    node = gpu_k8s_node("synthetic-time-slicing-exclusive-gpu")
    device_plugin_config(node, "time-slicing.yaml")
    set_compute_mode(node, 3, range(2, 3))
    set_compute_mode(node, 2, range(6, 7))
    nodes.append(node)
    return nodes


# --- workloads: the kubelet's PodResources answers, GPU processes' cgroups, pods' log dirs ---

PODRESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
NO_INSTANCE = 0xFFFFFFFF
# The pods every node runs that hold no device (List names every pod on the node).
SYSTEM_PODS = [
    ("kube-system", "kube-proxy-x7k2p", "kube-proxy"),
    ("gpu-operator", "nvidia-device-plugin-daemonset-4xq9z", "nvidia-device-plugin"),
]


def pod_uid(n: int) -> str:
    """A stable, made-up pod UID."""
    return f"7c1e{n:04x}-2d4b-4a8e-9f3c-{n:012x}"


def container_id(pod: str, container: str) -> str:
    """A stable, made-up 64-hex container ID."""
    return hashlib.sha256(f"{pod}/{container}".encode()).hexdigest()


def cgroup_file(shape: str, uid: str, cid: str, qos: str = "burstable") -> str:
    """/proc/<pid>/cgroup of a container's process, in the shape each setup writes."""
    under = f"kubepods-{qos}" if qos else "kubepods"
    systemd = f"/kubepods.slice/{under}.slice/{under}-pod{uid.replace('-', '_')}.slice"
    cgroupfs = f"/kubepods/{qos}/pod{uid}" if qos else f"/kubepods/pod{uid}"
    if shape == "v2-systemd-containerd":
        return f"0::{systemd}/cri-containerd-{cid}.scope\n"
    if shape == "v2-systemd-crio":
        return f"0::{systemd}/crio-{cid}.scope\n"
    if shape == "v1-cgroupfs-containerd":  # Ubuntu 20.04 style: every hierarchy, then 0::/
        controllers = [
            "pids",
            "hugetlb",
            "net_cls,net_prio",
            "cpuset",
            "memory",
            "perf_event",
            "freezer",
            "devices",
            "cpu,cpuacct",
            "blkio",
        ]
        lines = [f"{12 - i}:{c}:{cgroupfs}/{cid}" for i, c in enumerate(controllers)]
        return "\n".join([*lines, "2:rdma:/", f"1:name=systemd:{cgroupfs}/{cid}", "0::/"]) + "\n"
    raise ValueError(shape)


@dataclass
class Pod:
    """A pod on the node: its devices (resource, IDs), DRA claims (JSON mapping), and the
    pids of its GPU processes."""

    namespace: str
    name: str
    n: int
    container: str = "main"
    devices: list[tuple[str, list[str]]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    pids: tuple[int, ...] = ()

    @property
    def uid(self) -> str:
        return pod_uid(self.n)

    @property
    def cid(self) -> str:
        return container_id(f"{self.namespace}/{self.name}", self.container)


def canonical(content: dict[str, Any]) -> dict[str, Any]:
    """podresources.json content exactly as MessageToDict writes the kubelet's answers."""
    from google.protobuf import json_format

    from gpuprobe.kubelet.podresources.v1 import api_pb2

    listed = json_format.ParseDict(content["list"], api_pb2.ListPodResourcesResponse())
    out = {"list": json_format.MessageToDict(listed)}
    if "allocatable" in content:
        allocatable = api_pb2.AllocatableResourcesResponse()
        out["allocatable"] = json_format.MessageToDict(
            json_format.ParseDict(content["allocatable"], allocatable)
        )
    return out


def on_kubelet(
    node: Node,
    pods: list[Pod],
    allocatable: list[tuple[str, list[str]]],
    shape: str = "v2-systemd-containerd",
) -> Node:
    """The kubelet's socket and answers for these pods, their log directories with each
    container's first log, and each GPU process's cgroup."""
    node.file(PODRESOURCES_SOCKET)
    entries = []
    for namespace, name, container in SYSTEM_PODS:
        entries.append({"name": name, "namespace": namespace, "containers": [{"name": container}]})
    for pod in pods:
        container: dict[str, Any] = {"name": pod.container}
        if pod.devices:
            container["devices"] = [
                {"resourceName": r, "deviceIds": ids, "topology": {"nodes": [{"ID": "0"}]}}
                for r, ids in pod.devices
            ]
        if pod.claims:
            container["dynamicResources"] = pod.claims
        entries.append({"name": pod.name, "namespace": pod.namespace, "containers": [container]})
        # The kubelet's log directory of the pod, with its container's (empty) first log: git
        # keeps no empty directory, and the kubelet makes the log as the container starts.
        log = f"/var/log/pods/{pod.namespace}_{pod.name}_{pod.uid}/{pod.container}/0.log"
        node.files.setdefault(log, "")
        node.file(f"/var/log/containers/{pod.name}_{pod.namespace}_{pod.container}-{pod.cid}.log")
        for pid in pod.pids:
            node.file(f"/proc/{pid}/cgroup", cgroup_file(shape, pod.uid, pod.cid))
    devices = [{"resourceName": r, "deviceIds": ids} for r, ids in allocatable]
    node.podresources = canonical(
        {"list": {"podResources": entries}, "allocatable": {"devices": devices}}
    )
    return node


def gpu_processes(node: Node, gpu: int, procs: list[tuple[int, int, int]]) -> Node:
    """GPU `gpu` runs these processes (pid, gpu instance, compute instance; NO_INSTANCE
    outside MIG), each a python3 in processes.json."""
    entries = [
        {"pid": pid, "usedGpuMemory": 536870912, "gpuInstanceId": gi, "computeInstanceId": ci}
        for pid, gi, ci in procs
    ]
    node.replace_call("nvmlDeviceGetComputeRunningProcesses", [gpu], ret=entries)
    known = {p["pid"] for p in node.processes}
    for pid, _, _ in procs:
        if pid not in known:
            node.processes.append(
                {"pid": pid, "name": "python3", "cmdline": ["python3", "serve.py"]}
            )
    return node


def utilization_sample(stamp_us: int, percent: int) -> dict[str, Any]:
    """One nvmlDeviceGetSamples sample as pynvml returns it: the value union read as every
    member (the unsigned int the driver wrote; the union's other bytes zero)."""
    raw = struct.pack("<Q", percent)
    union = {
        "dVal": struct.unpack("<d", raw)[0],
        "uiVal": percent,
        "ulVal": percent,
        "ullVal": percent,
        "sllVal": percent,
        "siVal": percent,
        "usVal": percent,
    }
    return {"timeStamp": stamp_us, "sampleValue": union}


def sample_series(node: Node, gpu: int, rounds: list[list[tuple[int, int]]]) -> Node:
    """nvmlDeviceGetSamples(gpu, GPU utilization, 0) answering each round's buffer in turn
    ((seconds after the base time, percent) pairs; value type 1, unsigned int)."""
    base = 1795939200 * 1_000_000  # µs, 2026-11-29T08:00:00Z
    for samples in rounds:
        buffer = [utilization_sample(base + int(t * 1_000_000), v) for t, v in samples]
        node.call("nvmlDeviceGetSamples", [gpu, 1, 0], [1, buffer])
    return node


def whole_gpu_pods() -> list[Pod]:
    """A 4-GPU training pod, two inference pods, an idle notebook, one GPU free."""
    uuids = [gpu_uuid(i) for i in range(8)]
    return [
        Pod(
            "ml-team",
            "llama-pretrain-0",
            1,
            "trainer",
            [("nvidia.com/gpu", uuids[0:4])],
            pids=(41000, 41001, 41002, 41003),
        ),
        Pod(
            "inference",
            "vllm-7d9f8-kq2xp",
            2,
            "vllm",
            [("nvidia.com/gpu", [uuids[4]])],
            pids=(41004,),
        ),
        Pod(
            "inference",
            "vllm-7d9f8-mw5tz",
            3,
            "vllm",
            [("nvidia.com/gpu", [uuids[5]])],
            pids=(41005,),
        ),
        Pod("research", "notebook-alice", 4, "jupyter", [("nvidia.com/gpu", [uuids[6]])]),
    ]


def workload_variants() -> list[Node]:
    """Pods on GPUs (check `workloads`, and every GPU finding naming its pods)."""
    nodes = []
    uuids = [gpu_uuid(i) for i in range(8)]

    # Whole GPUs by UUID (the device plugin's default DEVICE_ID_STRATEGY): GPUs 6 (held by a
    # notebook) and 7 (free) have no process.
    node = idle(idle(gpu_k8s_node("synthetic-k8s-gpus-by-uuid"), 6), 7)
    nodes.append(on_kubelet(node, whole_gpu_pods(), [("nvidia.com/gpu", uuids)]))

    # The same pods with DEVICE_ID_STRATEGY=index, on cgroup v1 with the cgroupfs driver.
    node = idle(idle(gpu_k8s_node("synthetic-k8s-gpus-by-index"), 6), 7)
    pods = whole_gpu_pods()
    for pod in pods:
        pod.devices = [(r, [str(uuids.index(i)) for i in ids]) for r, ids in pod.devices]
    indices = [str(i) for i in range(8)]
    nodes.append(on_kubelet(node, pods, [("nvidia.com/gpu", indices)], "v1-cgroupfs-containerd"))

    # GPU 5 is the inference pod's, but a privileged debug pod (no GPU asked for; it sees every
    # GPU) runs a process on it too.
    node = idle(idle(gpu_k8s_node("synthetic-k8s-gpu-used-without-allocation"), 6), 7)
    pods = [*whole_gpu_pods(), Pod("research", "debug-shell-bob", 5, "shell", pids=(52001,))]
    gpu_processes(node, 5, [(41005, NO_INSTANCE, NO_INSTANCE), (52001, NO_INSTANCE, NO_INSTANCE)])
    nodes.append(on_kubelet(node, pods, [("nvidia.com/gpu", uuids)]))

    # The training pod's GPU 2 reports uncorrectable ECC errors: the finding names the pod.
    node = idle(idle(gpu_k8s_node("synthetic-k8s-ecc-on-training-gpu"), 6), 7)
    node.replace_call("nvmlDeviceGetTotalEccErrors", [2, 1, 0], ret=3)
    node.replace_call("nvmlDeviceGetTotalEccErrors", [2, 1, 1], ret=3)
    nodes.append(on_kubelet(node, whole_gpu_pods(), [("nvidia.com/gpu", uuids)]))

    # Time-slicing with renameByDefault: GPU 0 shared as nvidia.com/gpu.shared replicas by
    # three CRI-O pods (one of them idle), the rest free.
    node = gpu_k8s_node("synthetic-k8s-time-slicing")
    device_plugin_config(node, "time-slicing-renamed.yaml")
    for i in range(1, 8):
        idle(node, i)
    pods = [
        Pod(
            "dev",
            f"notebook-{who}",
            10 + n,
            "jupyter",
            [("nvidia.com/gpu.shared", [f"{uuids[0]}::{replica}"])],
            pids=pids,
        )
        for n, (who, replica, pids) in enumerate(
            [("ana", 0, (43001,)), ("ben", 3, (43002,)), ("cho", 7, ())]
        )
    ]
    gpu_processes(node, 0, [(43001, NO_INSTANCE, NO_INSTANCE), (43002, NO_INSTANCE, NO_INSTANCE)])
    replicas = [f"{u}::{r}" for u in uuids for r in range(10)]
    nodes.append(on_kubelet(node, pods, [("nvidia.com/gpu.shared", replicas)], "v2-systemd-crio"))

    # MIG, mixed strategy: GPU 0 split (3g.40gb, 2g.20gb, two 1g.10gb), three of its MIG
    # devices held by pods (the 2g.20gb one idle); GPUs 1-7 whole and free.
    node = gpu_k8s_node("synthetic-k8s-mig-mixed")
    mig_layout(
        node,
        0,
        [
            mig("3g.40gb", gi=2, start=4),
            mig("2g.20gb", gi=3, start=0),
            mig("1g.10gb", gi=9, start=2),
            mig("1g.10gb", gi=10, start=3),
        ],
    )
    for i in range(1, 8):
        idle(node, i)
    pods = [
        Pod(
            "ml-team",
            "finetune-3g",
            20,
            "trainer",
            [("nvidia.com/mig-3g.40gb", [mig_uuid(0, 0)])],
            pids=(44001,),
        ),
        Pod("ml-team", "eval-2g", 21, "eval", [("nvidia.com/mig-2g.20gb", [mig_uuid(0, 1)])]),
        Pod(
            "inference",
            "embed-1g",
            22,
            "server",
            [("nvidia.com/mig-1g.10gb", [mig_uuid(0, 2)])],
            pids=(44003,),
        ),
    ]
    gpu_processes(node, 0, [(44001, 2, 0), (44003, 9, 0)])
    allocatable = [
        ("nvidia.com/mig-3g.40gb", [mig_uuid(0, 0)]),
        ("nvidia.com/mig-2g.20gb", [mig_uuid(0, 1)]),
        ("nvidia.com/mig-1g.10gb", [mig_uuid(0, 2), mig_uuid(0, 3)]),
        ("nvidia.com/gpu", uuids[1:]),
    ]
    nodes.append(on_kubelet(node, pods, allocatable))

    # The same MIG layout, but the inference pod's process runs in the 2g.20gb device (GPU
    # instance 3), which the kubelet gave the eval pod, and a debug pod's in the free 1g.10gb.
    node = gpu_k8s_node("synthetic-k8s-mig-used-without-allocation")
    mig_layout(
        node,
        0,
        [
            mig("3g.40gb", gi=2, start=4),
            mig("2g.20gb", gi=3, start=0),
            mig("1g.10gb", gi=9, start=2),
            mig("1g.10gb", gi=10, start=3),
        ],
    )
    for i in range(1, 8):
        idle(node, i)
    strays = [*pods, Pod("research", "debug-shell-bob", 23, "shell", pids=(52001,))]
    gpu_processes(node, 0, [(44001, 2, 0), (44003, 3, 0), (52001, 10, 0)])
    nodes.append(on_kubelet(node, strays, allocatable))

    # MIG, single strategy: every GPU split into seven 1g.10gb, each MIG device handed out as
    # nvidia.com/gpu by its MIG UUID to its own pod (56 pods), each running one process.
    node = gpu_k8s_node("synthetic-k8s-mig-single")
    pods = []
    for gpu in range(8):
        mig_layout(node, gpu, [mig("1g.10gb", gi=7 + s, start=s) for s in range(7)])
        procs = []
        for slot in range(7):
            n = 100 + gpu * 7 + slot
            pid = 45000 + gpu * 10 + slot
            pods.append(
                Pod(
                    "inference",
                    f"embed-{gpu}-{slot}",
                    n,
                    "server",
                    [("nvidia.com/gpu", [mig_uuid(gpu, slot)])],
                    pids=(pid,),
                )
            )
            procs.append((pid, 7 + slot, 0))
        gpu_processes(node, gpu, procs)
    node.processes = [p for p in node.processes if not 41000 <= p["pid"] < 41008]
    migs = [mig_uuid(g, s) for g in range(8) for s in range(7)]
    nodes.append(on_kubelet(node, pods, [("nvidia.com/gpu", migs)]))

    # DRA (NVIDIA's DRA driver): two claims, their devices named in the driver's transient
    # claim CDI spec, which gives each container its GPU's /dev/nvidia<minor>.
    node = gpu_k8s_node("synthetic-k8s-dra-claims")
    for i in range(8):
        node.call("nvmlDeviceGetMinorNumber", [i], i)
    for i in range(2, 8):
        idle(node, i)
    claim_uid = "dab5ab50-d59a-42a6-af16-cfd4628c0f7a"
    pods = []
    for n, (gpu, claim) in enumerate([(0, "single-gpu"), (1, "single-gpu-2")]):
        cdi_name = f"k8s.gpu.nvidia.com/claim={claim_uid[:-1]}{n}-gpu-{gpu}"
        resource = {
            "cdiDevices": [{"name": cdi_name}],
            "driverName": "gpu.nvidia.com",
            "poolName": "synthetic-k8s-dra-claims",
            "deviceName": f"gpu-{gpu}",
        }
        claims = [{"claimName": claim, "claimNamespace": "gpu-test", "claimResources": [resource]}]
        pods.append(
            Pod("gpu-test", f"pod{n + 1}", 30 + n, "ctr", claims=claims, pids=(41000 + gpu,))
        )
        spec = {
            "cdiVersion": "0.5.0",
            "kind": "k8s.gpu.nvidia.com/claim",
            "devices": [
                {
                    "name": f"{claim_uid[:-1]}{n}-gpu-{gpu}",
                    "containerEdits": {
                        "deviceNodes": [{"path": f"/dev/nvidia{gpu}", "major": 195, "minor": gpu}]
                    },
                }
            ],
            "containerEdits": {
                "env": ["NVIDIA_VISIBLE_DEVICES=void"],
                "deviceNodes": [{"path": "/dev/nvidia-uvm"}, {"path": "/dev/nvidiactl"}],
            },
        }
        node.file(
            f"/var/run/cdi/k8s.gpu.nvidia.com-claim_{claim_uid[:-1]}{n}.yaml",
            yaml.safe_dump(spec, sort_keys=False),
        )
    nodes.append(on_kubelet(node, pods, []))

    # Utilization samples over three rounds a minute apart: the notebook's GPU 6 is busy a
    # quarter of the second minute (15 of 60 one-second samples at 80 %), then the buffer
    # holds nothing new; the inference GPU 4 is busy throughout; GPU 7 is free.
    node = idle(idle(gpu_k8s_node("synthetic-k8s-utilization-samples"), 6), 7)
    first = [(t, 0) for t in range(-5, 1)]
    second = first + [(t, 80 if t > 45 else 0) for t in range(1, 61)]
    sample_series(node, 6, [first, second])
    sample_series(node, 4, [[(t, 97) for t in range(-5, 1)], [(t, 97) for t in range(-5, 61)]])
    nodes.append(on_kubelet(node, whole_gpu_pods(), [("nvidia.com/gpu", uuids)]))

    # DRA with MIG: GPU 0 split (3g.40gb as GPU instance 2, 1g.10gb as 9), a claim on the
    # 3g.40gb device. The claim spec gives the container the parent's /dev/nvidia0 and the
    # MIG device's GPU- and compute-instance capabilities, whose minors the driver lists in
    # /proc/driver/nvidia-caps/mig-minors.
    node = gpu_k8s_node("synthetic-k8s-dra-mig")
    for i in range(8):
        node.call("nvmlDeviceGetMinorNumber", [i], i)
    mig_layout(node, 0, [mig("3g.40gb", gi=2, start=4), mig("1g.10gb", gi=9, start=2)])
    for i in range(1, 8):
        idle(node, i)
    gpu_processes(node, 0, [(46001, 2, 0)])
    minors, lines = {}, ["config 1", "monitor 2"]
    for gpu in range(8):  # the driver's numbering: every GPU, GPU instance, compute instance
        for gi in range(15):
            minors[(gpu, gi, None)] = 3 + len(lines) - 2
            lines.append(f"gpu{gpu}/gi{gi}/access {minors[(gpu, gi, None)]}")
            for ci in range(8):
                minors[(gpu, gi, ci)] = 3 + len(lines) - 2
                lines.append(f"gpu{gpu}/gi{gi}/ci{ci}/access {minors[(gpu, gi, ci)]}")
    node.file("/proc/driver/nvidia-caps/mig-minors", "\n".join(lines) + "\n")
    claim_uid = "c8593c85-440d-4156-b199-aea592ff83df"
    device = "gpu-0-mig-3g40gb-9-4"
    cdi_name = f"k8s.gpu.nvidia.com/claim={claim_uid}-{device}"
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "k8s.gpu.nvidia.com/claim",
        "devices": [
            {
                "name": f"{claim_uid}-{device}",
                "containerEdits": {
                    "deviceNodes": [
                        {"path": "/dev/nvidia0", "major": 195, "minor": 0},
                        {"path": f"/dev/nvidia-caps/nvidia-cap{minors[(0, 2, None)]}"},
                        {"path": f"/dev/nvidia-caps/nvidia-cap{minors[(0, 2, 0)]}"},
                    ]
                },
            }
        ],
        "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]},
    }
    node.file(
        f"/var/run/cdi/k8s.gpu.nvidia.com-claim_{claim_uid}.yaml",
        yaml.safe_dump(spec, sort_keys=False),
    )
    resource = {
        "cdiDevices": [{"name": cdi_name}],
        "driverName": "gpu.nvidia.com",
        "poolName": "synthetic-k8s-dra-mig",
        "deviceName": device,
    }
    claims = [{"claimName": "mig-3g", "claimNamespace": "gpu-test", "claimResources": [resource]}]
    pods = [Pod("gpu-test", "mig-pod", 40, "ctr", claims=claims, pids=(46001,))]
    nodes.append(on_kubelet(node, pods, []))

    # The kubelet refused the PodResources call (it was restarting).
    node = gpu_k8s_node("synthetic-k8s-podresources-refused")
    node.file(PODRESOURCES_SOCKET)
    node.podresources = {"error": "UNAVAILABLE"}
    nodes.append(node)
    return nodes


# --- pods: running containers' OCI specs and the kubelet's CRI logs (check `pods`) ---

CONTAINERD_TASKS = "/run/containerd/io.containerd.runtime.v2.task/k8s.io"
CRIO_CONTAINERS = "/run/containers/storage/overlay-containers"
# NVIDIA_REQUIRE_CUDA of nvidia/cuda:12.8.0-*-ubuntu24.04, as its Dockerfile sets it.
CUDA_12_8_REQUIRE = "cuda>=12.8 " + " ".join(
    f"brand={brand},driver>={branch},driver<{branch + 1}"
    for branch in (470, 535, 550, 560, 565)
    for brand in (
        "unknown", "grid", "tesla", "nvidia", "quadro", "quadrortx", "nvidiartx", "vapps",
        "vpc", "vcs", "vws", "cloudgaming",
    )
)  # fmt: skip
CUDA_12_8_ENV = {
    "PATH": "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:"
    "/usr/sbin:/usr/bin:/sbin:/bin",
    "NVARCH": "x86_64",
    "NVIDIA_REQUIRE_CUDA": CUDA_12_8_REQUIRE,
    "NV_CUDA_CUDART_VERSION": "12.8.57-1",
    "NV_CUDA_COMPAT_PACKAGE": "cuda-compat-12-8",
    "CUDA_VERSION": "12.8.0",
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    "NV_CUDA_LIB_VERSION": "12.8.0-1",
    "NV_NVTX_VERSION": "12.8.55-1",
    "NV_LIBNPP_VERSION": "12.3.3.65-1",
    "NV_LIBCUBLAS_VERSION": "12.8.3.14-1",
    "NCCL_VERSION": "2.25.1-1",
}
# NVIDIA_REQUIRE_CUDA of nvidia/cuda:12.4.1-*-ubuntu22.04, as its Dockerfile sets it: the
# images up to 12.4 list GeForce and Titan branches too (forward compatibility does not run
# there: such an image is admitted and fails at start, error 804).
CUDA_12_4_REQUIRE = "cuda>=12.4 " + " ".join(
    f"brand={brand},driver>={branch},driver<{branch + 1}"
    for branch in (470, 525, 535)
    for brand in (
        "tesla", "unknown", "nvidia", "nvidiartx", "geforce", "geforcertx", "quadro",
        "quadrortx", "titan", "titanrtx",
    )
)  # fmt: skip
CUDA_12_4_ENV = {
    "PATH": "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:"
    "/usr/sbin:/usr/bin:/sbin:/bin",
    "NVARCH": "x86_64",
    "NVIDIA_REQUIRE_CUDA": CUDA_12_4_REQUIRE,
    "NV_CUDA_CUDART_VERSION": "12.4.127-1",
    "NV_CUDA_COMPAT_PACKAGE": "cuda-compat-12-4",
    "CUDA_VERSION": "12.4.1",
    "LD_LIBRARY_PATH": "/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
}
# The 12.2.2 image of the legacy kind (CUDA_VERSION without NVIDIA_REQUIRE_CUDA), as images
# built FROM an old ubuntu with the toolkit copied in carry it.
LEGACY_12_2_ENV = {
    "PATH": "/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "CUDA_VERSION": "12.2.2",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
}
KUBE_ENV = {
    "KUBERNETES_SERVICE_HOST": "10.96.0.1",
    "KUBERNETES_SERVICE_PORT": "443",
    "KUBERNETES_PORT": "tcp://10.96.0.1:443",
}
# When the logs' lines were written: minutes before the snapshot (21:00:00).
LOG_DAY = "2026-11-29"
H100_BRAND = 14  # NVML_BRAND_NVIDIA: data-center GPUs of the Hopper generation


@dataclass
class GpuContainer:
    """A pod's one container: its image and env, what the kubelet gave it, its log files
    (name → CRI lines), and which runtime runs it."""

    pod: Pod
    image: str
    env: dict[str, str]
    gpus: list[int]
    logs: dict[str, list[str]] = field(default_factory=dict)
    runtime: str = "containerd"
    running: bool = True


def cri(clock: str, text: str, stream: str = "stderr", tag: str = "F") -> str:
    """One CRI log line at `clock` (hh:mm:ss.fraction) on the log day."""
    return f"{LOG_DAY}T{clock}Z {stream} {tag} {text}"


def with_gpu_brand(node: Node, brand: int, name: str, capability: tuple[int, int]) -> Node:
    """Every GPU answers nvmlDeviceGetBrand, its name and nvmlDeviceGetCudaComputeCapability."""
    for i in range(len(H100_PCI)):
        node.call("nvmlDeviceGetBrand", [i], brand)
        node.call("nvmlDeviceGetCudaComputeCapability", [i], list(capability))
        node.call("nvmlDeviceGetMinorNumber", [i], i)
        if name != H100_NAME:
            node.replace_call("nvmlDeviceGetName", [i], ret=name)
    return node


def oci_spec(c: GpuContainer) -> dict[str, Any]:
    """The container's OCI runtime spec as its runtime writes config.json."""
    pod = c.pod
    env = {**c.env, **KUBE_ENV, "HOSTNAME": pod.name}
    if c.gpus:  # the device plugin's envvar strategy overrides the image's "all"
        env["NVIDIA_VISIBLE_DEVICES"] = ",".join(gpu_uuid(i) for i in c.gpus)
    devices = [
        {"path": f"/dev/nvidia{i}", "type": "c", "major": 195, "minor": i, "fileMode": 438,
         "uid": 0, "gid": 0}
        for i in c.gpus
    ]  # fmt: skip
    allowed = [{"allow": False, "access": "rwm"}] + [
        {"allow": True, "type": "c", "major": 195, "minor": i, "access": "rw"} for i in c.gpus
    ]
    uid = pod.uid.replace("-", "_")
    if c.runtime == "containerd":
        annotations = {
            "io.kubernetes.cri.container-name": pod.container,
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.image-name": c.image,
            "io.kubernetes.cri.sandbox-id": container_id(pod.name, "pause"),
            "io.kubernetes.cri.sandbox-name": pod.name,
            "io.kubernetes.cri.sandbox-namespace": pod.namespace,
            "io.kubernetes.cri.sandbox-uid": pod.uid,
        }
        root = "rootfs"
        cgroups = f"kubepods-burstable-pod{uid}.slice:cri-containerd:{pod.cid}"
    else:
        annotations = {
            "io.container.manager": "cri-o",
            "io.kubernetes.container.name": pod.container,
            "io.kubernetes.cri-o.ContainerID": pod.cid,
            "io.kubernetes.cri-o.ContainerType": "container",
            "io.kubernetes.cri-o.ImageName": c.image,
            "io.kubernetes.cri-o.LogPath": (
                f"/var/log/pods/{pod.namespace}_{pod.name}_{pod.uid}/{pod.container}/0.log"
            ),
            "io.kubernetes.cri-o.SandboxID": container_id(pod.name, "pause"),
            "io.kubernetes.pod.name": pod.name,
            "io.kubernetes.pod.namespace": pod.namespace,
            "io.kubernetes.pod.uid": pod.uid,
        }
        root = f"/var/lib/containers/storage/overlay/{pod.cid}/merged"
        cgroups = f"kubepods-burstable-pod{uid}.slice:crio:{pod.cid}"
    return {
        "ociVersion": "1.1.0",
        "process": {
            "user": {"uid": 0, "gid": 0, "additionalGids": [0]},
            "args": ["python3", "/workspace/train.py"],
            "env": [f"{k}={v}" for k, v in env.items()],
            "cwd": "/workspace",
            "oomScoreAdj": 936,
        },
        "root": {"path": root},
        "hostname": pod.name,
        "mounts": [
            {
                "destination": "/proc",
                "type": "proc",
                "source": "proc",
                "options": ["nosuid", "noexec", "nodev"],
            },
        ],
        "annotations": annotations,
        "linux": {
            "resources": {"devices": allowed},
            "cgroupsPath": cgroups,
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "devices": devices,
        },
    }


def sandbox_spec(pod: Pod) -> dict[str, Any]:
    """containerd's pause container of the pod (skipped by the check)."""
    return {
        "ociVersion": "1.1.0",
        "process": {"args": ["/pause"], "env": ["PATH=/usr/local/sbin:/usr/bin:/bin"]},
        "root": {"path": "rootfs", "readonly": True},
        "annotations": {
            "io.kubernetes.cri.container-type": "sandbox",
            "io.kubernetes.cri.sandbox-id": container_id(pod.name, "pause"),
            "io.kubernetes.cri.sandbox-log-directory": (
                f"/var/log/pods/{pod.namespace}_{pod.name}_{pod.uid}"
            ),
            "io.kubernetes.cri.sandbox-name": pod.name,
            "io.kubernetes.cri.sandbox-namespace": pod.namespace,
            "io.kubernetes.cri.sandbox-uid": pod.uid,
        },
    }


def with_containers(node: Node, containers: list[GpuContainer]) -> Node:
    """The kubelet's answers, each running container's spec (and its pod's pause container),
    and each container's log files."""
    for c in containers:
        c.pod.devices = [("nvidia.com/gpu", [gpu_uuid(i) for i in c.gpus])] if c.gpus else []
    on_kubelet(node, [c.pod for c in containers], [
        ("nvidia.com/gpu", [gpu_uuid(i) for i in range(len(H100_PCI))])
    ])  # fmt: skip
    for c in containers:
        pod = c.pod
        if c.running and c.runtime == "containerd":
            node.file(f"{CONTAINERD_TASKS}/{pod.cid}/config.json", json.dumps(oci_spec(c)))
            pause = container_id(pod.name, "pause")
            node.file(f"{CONTAINERD_TASKS}/{pause}/config.json", json.dumps(sandbox_spec(pod)))
        elif c.running:
            node.file(f"{CRIO_CONTAINERS}/{pod.cid}/userdata/config.json", json.dumps(oci_spec(c)))
        base = f"/var/log/pods/{pod.namespace}_{pod.name}_{pod.uid}/{pod.container}"
        for name, lines in c.logs.items():
            node.file(f"{base}/{name}", "".join(line + "\n" for line in lines))
    return node


def pytorch_too_old(clock: str) -> list[str]:
    """PyTorch's start on a driver older than its CUDA (torch/cuda/__init__.py _lazy_init)."""
    lines = [
        "Traceback (most recent call last):",
        '  File "/workspace/train.py", line 41, in <module>',
        '    model = model.to("cuda")',
        '  File "/usr/local/lib/python3.12/dist-packages/torch/nn/modules/module.py", line '
        "1343, in to",
        "    return self._apply(convert)",
        '  File "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py", line 319, '
        "in _lazy_init",
        "    torch._C._cuda_init()",
        "RuntimeError: The NVIDIA driver on your system is too old (found version 12040). "
        "Please update your GPU driver by downloading and installing a new version from the "
        "URL: http://www.nvidia.com/Download/index.aspx Alternatively, go to: "
        "https://pytorch.org to install a PyTorch version that has been compiled with your "
        "version of the CUDA driver.",
    ]
    return [cri(f"{clock}.{412000 + i:09d}", line) for i, line in enumerate(lines)]


def pytorch_error_804(clock: str) -> list[str]:
    """PyTorch's start on a GeForce GPU with the image's cuda-compat libraries loaded (error
    804, as lllyasviel/Fooocus#2169 and AIR-DISCOVER/ICRA2024-Sim2Real-AXS#5 show it)."""
    lines = [
        "/usr/local/lib/python3.10/dist-packages/torch/cuda/__init__.py:128: UserWarning: CUDA "
        "initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
        "functions before calling NumCudaDevices() that might have already set an error? Error "
        "804: forward compatibility was attempted on non supported HW (Triggered internally at "
        "../c10/cuda/CUDAFunctions.cpp:108.)",
        "  return torch._C._cuda_getDeviceCount() > 0",
        "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
        "functions before calling NumCudaDevices() that might have already set an error? Error "
        "804: forward compatibility was attempted on non supported HW",
    ]
    return [cri(f"{clock}.{300000 + i:09d}", line) for i, line in enumerate(lines)]


def device_query_insufficient(clock: str) -> list[str]:
    """CUDA's deviceQuery sample against a driver older than its runtime."""
    lines = [
        "./deviceQuery Starting...",
        "",
        " CUDA Device Query (Runtime API) version (CUDART static linking)",
        "",
        "cudaGetDeviceCount returned 35",
        "-> CUDA driver version is insufficient for CUDA runtime version",
        "Result = FAIL",
    ]
    return [cri(f"{clock}.{100000 + i:09d}", line, "stdout") for i, line in enumerate(lines)]


def device_query_pass(clock: str) -> list[str]:
    """deviceQuery on a healthy GPU (the near-miss: driver and runtime named, no failure)."""
    lines = [
        "./deviceQuery Starting...",
        " CUDA Device Query (Runtime API) version (CUDART static linking)",
        "Detected 1 CUDA Capable device(s)",
        'Device 0: "NVIDIA H100 80GB HBM3"',
        "  CUDA Driver Version / Runtime Version          12.4 / 12.4",
        "  CUDA Capability Major/Minor version number:    9.0",
        "deviceQuery, CUDA Driver = CUDART, CUDA Driver Version = 12.4, CUDA Runtime Version "
        "= 12.4, NumDevs = 1",
        "Result = PASS",
    ]
    return [cri(f"{clock}.{200000 + i:09d}", line, "stdout") for i, line in enumerate(lines)]


def tensorflow_no_device(clock: str) -> list[str]:
    """TensorFlow's start where CUDA finds no device (as tensorflow/tensorflow#44869 shows)."""
    lines = [
        f"{LOG_DAY} {clock}.362374: I tensorflow/stream_executor/platform/default/"
        "dso_loader.cc:48] Successfully opened dynamic library libcudart.so.10.1",
        f"{LOG_DAY} {clock}.459527: I tensorflow/stream_executor/platform/default/"
        "dso_loader.cc:48] Successfully opened dynamic library libcuda.so.1",
        f"{LOG_DAY} {clock}.467224: E tensorflow/stream_executor/cuda/cuda_driver.cc:314] "
        "failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected",
        f"{LOG_DAY} {clock}.467270: I tensorflow/stream_executor/cuda/cuda_diagnostics.cc:156] "
        "kernel driver does not appear to be running on this host (tf-serving-0): "
        "/proc/driver/nvidia/version does not exist",
    ]
    return [cri(f"{clock}.{300000 + i:09d}", line) for i, line in enumerate(lines)]


def nvidia_smi_lost(clock: str) -> list[str]:
    """A GPU exporter sidecar's nvidia-smi after the container lost its GPU."""
    return [cri(f"{clock}.000120000", "Failed to initialize NVML: Unknown Error", "stdout")]


def docker_requirement_error(clock: str) -> list[str]:
    """A CI job's `docker run --gpus all` (Docker in the pod) refused by the NVIDIA hook, as
    MauriceNino/dashdot#1226 shows it."""
    return [
        cri(f"{clock}.5123", "$ docker run --rm --gpus all nvcr.io/nvidia/cuda:12.8.0-base-"
            "ubuntu24.04 nvidia-smi", "stdout"),
        cri(f"{clock}.9811", "docker: Error response from daemon: failed to create task for "
            "container: failed to create shim task: OCI runtime create failed: runc create "
            "failed: unable to start container process: error during container init: error "
            "running prestart hook #0: exit status 1, stdout: , stderr: "
            "Auto-detected mode as 'legacy'"),
        cri(f"{clock}.9812", "nvidia-container-cli: requirement error: unsatisfied condition: "
            "cuda>=12.8, please update your driver to a newer version, or use an earlier cuda "
            "container: unknown."),
        cri(f"{clock}.9902", "ERROR: Job failed: exit code 125", "stdout"),
    ]  # fmt: skip


def docker_cdi_unresolvable(clock: str) -> list[str]:
    """A CI job's `docker run` asking the NVIDIA runtime for a CDI device no spec defines, as
    NVIDIA/nvidia-container-toolkit#434 shows it."""
    return [
        cri(f"{clock}.2001", "$ docker run --rm --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES="
            "nvidia.com/gpu=all ubuntu nvidia-smi -L", "stdout"),
        cri(f"{clock}.7002", "docker: Error response from daemon: failed to create task for "
            "container: failed to create shim task: OCI runtime create failed: could not apply "
            "required modification to OCI specification: error modifying OCI spec: failed to "
            "inject CDI devices: unresolvable CDI devices nvidia.com/gpu=all: unknown."),
    ]  # fmt: skip


def ecc_crash(clock: str) -> list[str]:
    """A PyTorch training step that failed when its GPU raised a double-bit ECC error."""
    return [
        cri(f"{clock}.100", "[rank0]: Traceback (most recent call last):"),
        cri(f"{clock}.101", '[rank0]:   File "/workspace/train.py", line 88, in <module>'),
        cri(f"{clock}.102", "[rank0]:     loss.backward()"),
        cri(f"{clock}.103", "[rank0]: RuntimeError: CUDA error: uncorrectable ECC error "
            "encountered"),
        cri(f"{clock}.104", "[rank0]: CUDA kernel errors might be asynchronously reported at "
            "some other API call, so the stacktrace below might be incorrect."),
    ]  # fmt: skip


def pytorch_error_802(clock: str) -> list[str]:
    """PyTorch and NCCL on an NVSwitch node whose fabric manager is not running (error 802,
    as microsoft/lisa#2823 and hiyouga/LlamaFactory#8968 show them)."""
    return [
        cri(f"{clock}.100", "/usr/local/lib/python3.12/dist-packages/torch/cuda/__init__.py:129: "
            "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did "
            "you run some cuda functions before calling NumCudaDevices() that might have "
            "already set an error? Error 802: system not yet initialized (Triggered internally "
            "at /pytorch/c10/cuda/CUDAFunctions.cpp:109.)"),
        cri(f"{clock}.101", "  return torch._C._cuda_getDeviceCount() > 0"),
        cri(f"{clock}.900", "[rank0]: Cuda failure 802 'system not yet initialized'"),
    ]  # fmt: skip


def progress(start_minute: int, count: int, container: str = "trainer") -> list[str]:
    """Healthy training-step lines."""
    return [
        cri(f"20:{start_minute + i // 60:02d}:{i % 60:02d}.000000000", f"step {i} loss 2.31",
            "stdout")
        for i in range(count)
    ]  # fmt: skip


def pod_failure_variants() -> list[Node]:
    """Images that need a newer driver, and pods whose logs show GPU failures."""
    nodes = []

    # An image built for CUDA 12.8 on driver 550 (CUDA 12.4) on GeForce GPUs: no forward
    # compatibility there, the requirement fails; the pod crashed once with PyTorch's error.
    node = with_gpu_brand(
        gpu_k8s_node("synthetic-pods-cuda12.8-geforce-550"), 5, "NVIDIA GeForce RTX 4090", (8, 9)
    )
    trainer = GpuContainer(
        Pod("ml-team", "llama-finetune-0", 40, "trainer"),
        "nvcr.io/nvidia/pytorch:25.01-py3",
        CUDA_12_8_ENV,
        [0],
        {"0.log": pytorch_too_old("20:55:02"), "1.log": pytorch_too_old("20:57:40")[:3]},
    )
    nodes.append(with_containers(node, [trainer]))

    # An image built FROM nvidia/cuda:12.4.1 on driver 535 (CUDA 12.2) on GeForce GPUs: its
    # clause brand=geforce,driver>=535,driver<536 holds, so the runtime admits it, but its
    # cuda-compat-12-4 cannot run on GeForce (error 804 at start).
    node = with_gpu_brand(
        gpu_k8s_node("synthetic-pods-cuda12.4-geforce-535", driver="535.183.01"),
        5,
        "NVIDIA GeForce RTX 3090",
        (8, 6),
    )
    node.replace_call("nvmlSystemGetCudaDriverVersion_v2", [], ret=12020)
    webui = GpuContainer(
        Pod("art", "sd-webui-0", 41, "webui"),
        "registry.example.com/art/sd-webui:1.9-cu124",
        CUDA_12_4_ENV,
        [0],
        {"0.log": pytorch_error_804("20:53:20")},
    )
    nodes.append(with_containers(node, [webui]))

    # The same image on H100s (brand NVIDIA): its brand clause for the 550 branch holds, the
    # image's cuda-compat-12-8 runs (forward compatibility).
    node = with_gpu_brand(
        gpu_k8s_node("synthetic-pods-cuda12.8-h100-forward-compat"), H100_BRAND, H100_NAME, (9, 0)
    )
    trainer = GpuContainer(
        Pod("ml-team", "llama-finetune-0", 40, "trainer"),
        "nvcr.io/nvidia/pytorch:25.01-py3",
        CUDA_12_8_ENV,
        [0, 1],
        {"0.log": progress(50, 90)},
    )
    nodes.append(with_containers(node, [trainer]))

    # CRI-O, requirements with brand/driver clauses: one names only the 535 branch (fails on
    # 550), one names 550 (holds), a legacy CUDA_VERSION-only image, and an image that
    # disables the runtime's check (minor-version compatibility decides).
    node = with_gpu_brand(
        gpu_k8s_node("synthetic-pods-crio-require-clauses"), H100_BRAND, H100_NAME, (9, 0)
    )
    node.files.pop("/run/containerd/containerd.sock")
    node.processes = [p for p in node.processes if p["name"] != "containerd"]
    node.file("/var/run/crio/crio.sock")
    node.processes.append({"pid": 1400, "name": "crio", "cmdline": ["/usr/bin/crio"]})
    only_535 = {**CUDA_12_8_ENV, "CUDA_VERSION": "12.6.3",
                "NVIDIA_REQUIRE_CUDA": "cuda>=12.6 brand=nvidia,driver>=535,driver<536 "
                "brand=tesla,driver>=535,driver<536"}  # fmt: skip
    with_550 = {**CUDA_12_8_ENV, "CUDA_VERSION": "12.6.3",
                "NVIDIA_REQUIRE_CUDA": "cuda>=12.6 brand=nvidia,driver>=535,driver<536 "
                "brand=nvidia,driver>=550,driver<551"}  # fmt: skip
    disabled = {**CUDA_12_8_ENV, "NVIDIA_DISABLE_REQUIRE": "true"}
    containers = [
        GpuContainer(Pod("vision", "detector-0", 50, "infer"), "registry.example.com/vision/"
                     "detector:2.3-cu126", only_535, [0], runtime="cri-o"),
        GpuContainer(Pod("vision", "detector-1", 51, "infer"), "registry.example.com/vision/"
                     "detector:2.4-cu126", with_550, [1], runtime="cri-o"),
        GpuContainer(Pod("research", "legacy-bench-0", 52, "bench"), "registry.example.com/"
                     "research/bench:cu122", LEGACY_12_2_ENV, [2], runtime="cri-o"),
        GpuContainer(Pod("research", "jax-nightly-0", 53, "jax"), "ghcr.io/example/jax:"
                     "nightly-cu128", disabled, [3], runtime="cri-o"),
    ]  # fmt: skip
    nodes.append(with_containers(node, containers))

    # Pod logs with each signature as the stacks print it, a near-miss, partial lines.
    node = with_gpu_brand(
        gpu_k8s_node("synthetic-pods-log-signatures"), H100_BRAND, H100_NAME, (9, 0)
    )
    node.file("/var/log/kern.log", kernel_log() + xid_line(
        H100_PCI[3], 48, "pid=41003, name=python3, An uncorrectable double bit error (DBE) "
        "has been detected on GPU in the framebuffer at partition 6, subpartition 0.", "20:41:07"
    ))  # fmt: skip
    # A JSON log line longer than containerd's 16 KiB line buffer: split into a partial (P)
    # piece and a full (F) one, the signature across the split.
    head = '{"level":"error","logger":"vllm.worker","msg":"worker failed","context":"'
    head += (
        "x" * (16384 - len(head) - 80) + '","error":"RuntimeError: CUDA driver version is insuffi'
    )
    partial = [
        cri("20:46:10.000000001", head, tag="P"),
        cri("20:46:10.000000001", 'cient for CUDA runtime version"}'),
    ]
    containers = [
        GpuContainer(Pod("inference", "vllm-0", 60, "vllm"), "vllm/vllm-openai:v0.7.2",
                     CUDA_12_8_ENV, [0], {"0.log": partial}),
        GpuContainer(Pod("ml-team", "sample-check-0", 61, "samples"), "nvcr.io/nvidia/k8s/"
                     "cuda-sample:devicequery", CUDA_12_8_ENV, [1],
                     {"0.log": device_query_insufficient("20:44:00")}),
        GpuContainer(Pod("ml-team", "tf-serving-0", 62, "serving"), "tensorflow/serving:2.3.0-"
                     "gpu", LEGACY_12_2_ENV, [2], {"0.log": tensorflow_no_device("20:43:12")}),
        GpuContainer(Pod("ml-team", "llama-pretrain-3", 63, "trainer"), "nvcr.io/nvidia/pytorch:"
                     "24.03-py3", LEGACY_12_2_ENV, [3],
                     {"0.log": progress(40, 60) + ecc_crash("20:41:09")}),
        GpuContainer(Pod("monitoring", "gpu-exporter-x2", 64, "exporter"), "nvcr.io/nvidia/k8s/"
                     "dcgm-exporter:3.3.9-3.6.1-ubuntu22.04", LEGACY_12_2_ENV, [4],
                     {"0.log": nvidia_smi_lost("20:48:00")}),
        GpuContainer(Pod("ci", "runner-gpu-7f9c-abcde", 65, "runner"), "docker:27-dind",
                     {"PATH": "/usr/local/bin:/usr/bin:/bin"}, [5],
                     {"0.log": docker_requirement_error("20:49:30")}),
        GpuContainer(Pod("ci", "runner-gpu-7f9c-fghij", 66, "runner"), "docker:27-dind",
                     {"PATH": "/usr/local/bin:/usr/bin:/bin"}, [6],
                     {"0.log": docker_cdi_unresolvable("20:50:30")}),
        # Near-misses: deviceQuery passing; a CPU pod's TensorFlow probing for CUDA (it
        # restarted, so its log is read, but it holds no GPU).
        GpuContainer(Pod("ml-team", "sample-check-1", 67, "samples"), "nvcr.io/nvidia/k8s/"
                     "cuda-sample:devicequery", CUDA_12_8_ENV, [7],
                     {"0.log": device_query_pass("20:45:00")}),
        GpuContainer(Pod("web", "tf-cpu-embedder-0", 68, "embed"), "tensorflow/tensorflow:"
                     "2.3.0", {"PATH": "/usr/local/bin:/usr/bin:/bin"}, [],
                     {"0.log": tensorflow_no_device("20:30:00"),
                      "1.log": tensorflow_no_device("20:40:00")}),
    ]  # fmt: skip
    nodes.append(with_containers(node, containers))

    # Rotated logs: the failure is in the rotated file, the live file holds later lines; an
    # older, compressed rotation is not read.
    node = with_gpu_brand(
        gpu_k8s_node("synthetic-pods-rotated-logs"), H100_BRAND, H100_NAME, (9, 0)
    )
    rotated = GpuContainer(
        Pod("ml-team", "llama-pretrain-0", 70, "trainer"),
        "nvcr.io/nvidia/pytorch:24.03-py3",
        LEGACY_12_2_ENV,
        [0],
        {
            "0.log.20261129-204500": progress(30, 40) + nvidia_smi_lost("20:44:59"),
            "0.log": progress(46, 20),
        },
    )
    nodes.append(with_containers(node, [rotated]))

    # Every GPU pod lost its GPUs (a systemctl daemon-reload rewrote the device cgroups).
    node = with_gpu_brand(
        gpu_k8s_node("synthetic-pods-nvml-lost-everywhere"), H100_BRAND, H100_NAME, (9, 0)
    )
    lost = [
        GpuContainer(Pod("ml-team", f"worker-{i}", 80 + i, "worker"), "nvcr.io/nvidia/pytorch:"
                     "24.03-py3", LEGACY_12_2_ENV, [i],
                     {"0.log": progress(40, 5) + nvidia_smi_lost(f"20:52:0{i}")})
        for i in range(3)
    ]  # fmt: skip
    nodes.append(with_containers(node, lost))

    # An A100-style NVSwitch node without the fabric manager: CUDA in the pods fails with
    # error 802 (the gpus check sees the same from NVML and the process list).
    node = with_gpu_brand(
        gpu_k8s_node("synthetic-pods-fabric-not-ready"), H100_BRAND, H100_NAME, (9, 0)
    )
    for i in range(len(H100_PCI)):
        node.replace_call("nvmlDeviceGetGpuFabricInfoV", [i], error="NotSupported")
    node.processes = [p for p in node.processes if p["name"] != "nv-fabricmanager"]
    trainers = [
        GpuContainer(Pod("ml-team", f"llama-pretrain-{i}", 90 + i, "trainer"), "nvcr.io/nvidia/"
                     "pytorch:24.03-py3", LEGACY_12_2_ENV, [2 * i, 2 * i + 1],
                     {"0.log": pytorch_error_802(f"20:5{i}:10")})
        for i in range(2)
    ]  # fmt: skip
    nodes.append(with_containers(node, trainers))
    return nodes


# An 8-GPU AMD Instinct MI300X node (an OAM platform: one XGMI hive, every GPU a direct
# neighbour of the other seven over one link), amdgpu 6.10.5 from ROCm 6.3's DKMS package.
# Each GPU's DRM nodes step by 8 (card1, card9, ... card57), as on real MI300X nodes.
MI300X_PCI = [
    "0000:0c:00.0",
    "0000:22:00.0",
    "0000:38:00.0",
    "0000:5c:00.0",
    "0000:9f:00.0",
    "0000:af:00.0",
    "0000:bf:00.0",
    "0000:df:00.0",
]
MI300X_VRAM = 206141652992  # 196592 MiB, as amdgpu reports an MI300X's HBM3
MI300X_HIVE = "11386580467236257794"
MI300X_RAS_BLOCKS = ("umc", "sdma", "gfx", "mmhub", "xgmi_wafl")
AMDGPU_VERSION = "6.10.5"


def amd_unique_id(index: int) -> str:
    """A stable, made-up amdgpu unique_id (16 hex digits, as the driver prints it)."""
    return f"{0x7C3A51D2E0B4F600 + index * 0x1111:016x}"


def amd_kernel_log(*extra: str, loaded: bool = True) -> str:
    """kern.log of an MI300X node: this boot's amdgpu start-up lines (none where amdgpu did
    not load), then `extra`."""
    boot = (
        f"{stamp('08:00:02')} Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103) "
        "(x86_64-linux-gnu-gcc-13 (Ubuntu 13.2.0-23ubuntu4) 13.2.0) #49-Ubuntu SMP\n"
    )
    if not loaded:
        return boot + "".join(extra)
    lines = [
        boot,
        f"{stamp('08:00:07')} [drm] amdgpu kernel modesetting enabled.\n",
        f"{stamp('08:00:07')} [drm] amdgpu version: {AMDGPU_VERSION}\n",
        f"{stamp('08:00:07')} [drm] initializing kernel modesetting (IP DISCOVERY "
        "0x1002:0x74A1 0x1002:0x74A1 0x00).\n",
    ]
    lines += [
        f"{stamp('08:00:19')} [drm] Initialized amdgpu 3.59.0 20150101 for {a} on minor "
        f"{1 + 8 * i}\n"
        for i, a in enumerate(MI300X_PCI)
    ]
    return "".join(lines) + "".join(extra)


def xgmi_row(own: int, count: int, value: str) -> str:
    """An xgmi_num_hops / xgmi_num_links line: one hex byte per hive node, this GPU's 00."""
    return "".join("00 " if i == own else f"{value} " for i in range(count)) + "\n"


def mi300x_node(name: str) -> Node:
    """A healthy 8x MI300X node: no NVIDIA GPU, no NVML."""
    node = Node(name, init_error="LibraryNotFound")
    for address, (vendor, device, class_code) in OTHER_PCI.items():
        node.pci(address, vendor, device, class_code)
    first = MI300X_PCI[0]
    for i, address in enumerate(MI300X_PCI):
        base = f"/sys/bus/pci/devices/{address}"
        node.pci(address, "0x1002", "0x74a1", "0x120000")
        node.symlink(f"{base}/driver", "../../../../bus/pci/drivers/amdgpu")
        for drm in (1 + 8 * i, 128 + 8 * i):  # each DRM node's `dev` (major:minor)
            kind = "card" if drm < 128 else "renderD"
            node.file(f"{base}/drm/{kind}{drm}/dev", f"226:{drm}\n")
        node.file(f"{base}/unique_id", amd_unique_id(i) + "\n")
        node.file(f"{base}/mem_info_vram_total", f"{MI300X_VRAM}\n")
        node.file(f"{base}/mem_info_vram_used", f"{(142 + i) * 2**30}\n")
        node.file(f"{base}/gpu_busy_percent", "100\n")
        for link in ("current", "max"):
            node.file(f"{base}/{link}_link_speed", "32.0 GT/s PCIe\n")
            node.file(f"{base}/{link}_link_width", "16\n")
        for block in MI300X_RAS_BLOCKS:
            node.file(f"{base}/ras/{block}_err_count", "ue: 0\nce: 0\n")
        node.file(f"{base}/ras/gpu_vram_bad_pages", "")
        node.file(f"{base}/ras/features", "feature mask: 0x3c5f\n")
        # The hive's directory lies under its first GPU; the others link to it (amdgpu_xgmi.c).
        if address == first:
            node.file(f"{base}/xgmi_hive_info/xgmi_hive_id", MI300X_HIVE + "\n")
        else:
            node.symlink(f"{base}/xgmi_hive_info", f"../{first}/xgmi_hive_info")
        node.file(f"{base}/xgmi_device_id", f"{4613629217419446300 + i}\n")
        node.file(f"{base}/xgmi_physical_id", f"{i}\n")
        node.file(f"{base}/xgmi_num_hops", xgmi_row(i, len(MI300X_PCI), "01"))
        node.file(f"{base}/xgmi_num_links", xgmi_row(i, len(MI300X_PCI), "01"))
        node.file(f"{base}/xgmi_error", "0\n")
        hwmon = f"{base}/hwmon/hwmon{3 + i}"
        node.file(f"{hwmon}/temp2_label", "junction\n")
        node.file(f"{hwmon}/temp2_input", f"{61000 + 1000 * i}\n")
        node.file(f"{hwmon}/temp3_label", "mem\n")
        node.file(f"{hwmon}/temp3_input", f"{52000 + 1000 * i}\n")
    # The device nodes ROCm containers are given (empty files stand for device nodes).
    node.file("/dev/kfd")
    for i in range(len(MI300X_PCI)):
        node.file(f"/dev/dri/card{1 + 8 * i}")
        node.file(f"/dev/dri/renderD{128 + 8 * i}")
    node.file("/sys/module/amdgpu/initstate", "live\n")
    node.file("/sys/module/amdgpu/version", AMDGPU_VERSION + "\n")
    node.file("/sys/module/amdgpu/parameters/bad_page_threshold", "-1\n")
    node.file("/proc/sys/kernel/osrelease", "6.8.0-49-generic\n")
    node.file("/proc/sys/kernel/random/boot_id", BOOT_ID)
    node.file("/proc/stat", f"cpu  49860 1 10153 215654 882 0 236 2148 0 0\nbtime {BOOT_TIME}\n")
    node.file("/var/log/kern.log", amd_kernel_log())
    return node


def amd_cdi_spec(render_base: int = 128, step: int = 8) -> str:
    """/var/run/cdi/amd.json as the AMD Container Toolkit writes it (Go's json.Encoder of a
    CDI 0.6.0 spec: each GPU's card and render node, then /dev/kfd; and `all`)."""
    kfd = {"path": "/dev/kfd", "type": "c", "major": 235, "minor": 0, "fileMode": 438,
           "permissions": "rwm", "uid": 0, "gid": 110}  # fmt: skip

    def node(path: str, minor: int) -> dict[str, Any]:
        return {"path": path, "type": "c", "major": 226, "minor": minor, "fileMode": 432,
                "permissions": "rwm", "uid": 0, "gid": 44}  # fmt: skip

    devices = []
    every = []
    for i in range(len(MI300X_PCI)):
        gpu = [
            node(f"/dev/dri/card{1 + 8 * i}", 1 + 8 * i),
            node(f"/dev/dri/renderD{render_base + step * i}", render_base + step * i),
        ]
        every += gpu
        devices.append({"name": str(i), "containerEdits": {"deviceNodes": [*gpu, kfd]}})
    devices.append({"name": "all", "containerEdits": {"deviceNodes": [*every, kfd]}})
    spec = {"cdiVersion": "0.6.0", "kind": "amd.com/gpu", "devices": devices,
            "containerEdits": {}}  # fmt: skip
    return json.dumps(spec, separators=(",", ":"))


def amd_variants() -> list[Node]:
    """AMD Instinct MI300X nodes: healthy, and one fault each."""
    nodes = [mi300x_node("synthetic-amd-mi300x-8gpu-healthy")]
    gpu3 = f"/sys/bus/pci/devices/{MI300X_PCI[3]}"

    # amdgpu did not load (a kernel upgrade without the DKMS rebuild): no driver files at all.
    node = mi300x_node("synthetic-amd-driver-not-loaded")
    node.files = {p: c for p, c in node.files.items()
                  if (not p.startswith("/sys/module/amdgpu")
                  and not p.startswith("/sys/bus/pci/devices/0000:")) or p.endswith(
                      ("/vendor", "/device", "/class"))}  # fmt: skip
    node.symlinks = {}
    node.directories = set()
    node.file("/var/log/kern.log", amd_kernel_log(loaded=False))
    nodes.append(node)

    # GPU 3 stayed out of the driver (its initialisation failed): still on the bus.
    node = mi300x_node("synthetic-amd-gpu-not-initialized")
    node.files = {
        p: c
        for p, c in node.files.items()
        if not p.startswith(f"{gpu3}/") or p.endswith(("/vendor", "/device", "/class"))
    }
    node.symlinks = {p: t for p, t in node.symlinks.items() if not p.startswith(f"{gpu3}/")}
    node.directories = {d for d in node.directories if not d.startswith(f"{gpu3}/")}
    nodes.append(node)

    # Uncorrectable HBM errors on GPU 3: the UMC block counts them, the driver logs them,
    # and pages wait to be retired at the next reset.
    node = mi300x_node("synthetic-amd-ras-uncorrectable")
    node.file(f"{gpu3}/ras/umc_err_count", "ue: 2\nce: 17\n")
    node.file(
        f"{gpu3}/ras/gpu_vram_bad_pages",
        "0x0000a4c3 : 0x00001000 : R\n0x0001f207 : 0x00001000 : P\n",
    )
    node.file(
        "/var/log/kern.log",
        amd_kernel_log(
            f"{stamp('20:41:07')} amdgpu {MI300X_PCI[3]}: amdgpu: socket: 0, die: 0 2 "
            "uncorrectable hardware errors detected in umc block\n",
        ),
    )
    nodes.append(node)

    # GPU 5 has retired pages close to the driver's threshold (192 GiB / 100 MiB = 1965).
    node = mi300x_node("synthetic-amd-bad-pages-near-threshold")
    pages = "".join(f"0x{0x10000 + 7 * n:08x} : 0x00001000 : R\n" for n in range(1800))
    node.file(f"/sys/bus/pci/devices/{MI300X_PCI[5]}/ras/gpu_vram_bad_pages", pages)
    nodes.append(node)

    # A ring timeout on GPU 2, the driver's reset, and the reset's success.
    node = mi300x_node("synthetic-amd-ring-timeout-reset")
    gpu2 = MI300X_PCI[2]
    node.file(
        "/var/log/kern.log",
        amd_kernel_log(
            f"{stamp('20:52:31')} amdgpu {gpu2}: amdgpu: ring comp_1.0.0 timeout, signaled "
            "seq=1894471, emitted seq=1894473\n",
            f"{stamp('20:52:31')} amdgpu {gpu2}: amdgpu:  Process python3 pid 48211 thread "
            "python3 pid 48290\n",
            f"{stamp('20:52:31')} amdgpu {gpu2}: amdgpu: GPU reset begin!\n",
            f"{stamp('20:52:33')} amdgpu {gpu2}: amdgpu: MODE1 reset\n",
            f"{stamp('20:52:33')} amdgpu {gpu2}: amdgpu: GPU reset succeeded, trying to resume\n",
            f"{stamp('20:52:34')} amdgpu {gpu2}: amdgpu: GPU reset(1) succeeded!\n",
        ),
    )
    nodes.append(node)

    # On Kubernetes: the AMD GPU device plugin's socket beside the kubelet's (kubevirt's
    # device-plugin-manager names it `<namespace>_<resource>`, no suffix), and a node without.
    node = mi300x_node("synthetic-amd-k8s-device-plugin")
    node.file("/var/lib/kubelet/device-plugins/kubelet.sock")
    node.file("/var/lib/kubelet/device-plugins/amd.com_gpu")
    nodes.append(node)
    node = mi300x_node("synthetic-amd-k8s-no-device-plugin")
    node.file("/var/lib/kubelet/device-plugins/kubelet.sock")
    nodes.append(node)

    # amdgpu loaded but its KFD did not start (an IOMMU left in a mode KFD refuses): no
    # /dev/kfd, so no ROCm container can reach a GPU.
    node = mi300x_node("synthetic-amd-kfd-missing")
    del node.files["/dev/kfd"]
    nodes.append(node)

    # A CDI spec the AMD Container Toolkit wrote (amd-ctk cdi generate: /var/run/cdi/amd.json,
    # one JSON line) before the GPUs' DRM minors moved: it names render nodes that are gone.
    node = mi300x_node("synthetic-amd-cdi-stale")
    node.file("/var/run/cdi/amd.json", amd_cdi_spec(render_base=129, step=1) + "\n")
    nodes.append(node)

    # GPU 6 lost its XGMI link to GPU 1 (hive node 2): both ends show no link.
    node = mi300x_node("synthetic-amd-xgmi-link-down")
    for own, peer in ((6, 1), (1, 6)):
        links = [f"{0 if i == own else (0 if i == peer else 1):02x} " for i in range(8)]
        node.file(f"/sys/bus/pci/devices/{MI300X_PCI[own]}/xgmi_num_links", "".join(links) + "\n")
    nodes.append(node)
    nodes.append(amd_workloads_node())
    return nodes


def open_files(node: Node, pid: int, targets: list[str]) -> Node:
    """A process's file descriptors (`/proc/<pid>/fd/<n>`, links to what each opened)."""
    for fd, target in enumerate(targets):
        node.symlink(f"/proc/{pid}/fd/{fd}", target)
    return node


def amd_workloads_node() -> Node:
    """MI300X GPUs held by pods through the AMD GPU device plugin (device IDs are the GPUs'
    PCI addresses): a training pod on GPUs 0 and 1 with its ROCm process (the KFD and both
    render nodes open), a notebook holding GPU 2 idle, a privileged debug pod given no GPU
    that runs on GPU 3, and a host process holding the KFD alone."""
    node = mi300x_node("synthetic-amd-k8s-workloads")
    node.file("/var/lib/kubelet/device-plugins/kubelet.sock")
    node.file("/var/lib/kubelet/device-plugins/amd.com_gpu")
    for i, busy in enumerate((100, 100, 0, 37, 0, 0, 0, 0)):
        node.file(f"/sys/bus/pci/devices/{MI300X_PCI[i]}/gpu_busy_percent", f"{busy}\n")
    stdio = ["/dev/null", "pipe:[48210]", "pipe:[48210]"]
    open_files(node, 1, ["/dev/null", "/dev/null", "/dev/null", "socket:[20113]"])
    open_files(node, 61001, [*stdio, KFD, "/dev/dri/renderD128", "/dev/dri/renderD136"])
    open_files(node, 63001, [*stdio, KFD, "/dev/dri/renderD152", "socket:[51877]"])
    open_files(node, 7001, [*stdio, KFD])
    node.file("/proc/7001/cgroup", "0::/user.slice/user-1000.slice/session-4.scope\n")
    pods = [
        Pod(
            "ml-team",
            "llama-rocm-train-0",
            61,
            "trainer",
            [("amd.com/gpu", MI300X_PCI[0:2])],
            pids=(61001,),
        ),
        Pod("research", "notebook-dana", 62, "jupyter", [("amd.com/gpu", [MI300X_PCI[2]])]),
        Pod("research", "debug-shell-eve", 63, "shell", pids=(63001,)),
    ]
    return on_kubelet(node, pods, [("amd.com/gpu", MI300X_PCI)])


KFD = "/dev/kfd"


KUBELET_CONFIG = "/var/lib/kubelet/config.yaml"
IMDS_404 = (
    '<?xml version="1.0" encoding="iso-8859-1"?>\n<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 '
    'Transitional//EN"\n\t"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">\n<html '
    'xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">\n <head>\n  <title>404 - Not '
    "Found</title>\n </head>\n <body>\n  <h1>404 - Not Found</h1>\n </body>\n</html>\n"
)
GCE_HEADERS = {"Metadata-Flavor": "Google", "Content-Type": "application/text"}


def kubelet_config(graceful: bool) -> str:
    """The kubelet's KubeletConfiguration as kubeadm writes it, with graceful node shutdown on
    (30 s, 10 s of it for critical pods) or left at its default (off)."""
    text = (
        "apiVersion: kubelet.config.k8s.io/v1beta1\nauthentication:\n  anonymous:\n"
        "    enabled: false\n  webhook:\n    cacheTTL: 0s\n    enabled: true\n"
        "authorization:\n  mode: Webhook\ncgroupDriver: systemd\nclusterDNS:\n- 10.96.0.10\n"
        "clusterDomain: cluster.local\nkind: KubeletConfiguration\n"
        "rotateCertificates: true\nstaticPodPath: /etc/kubernetes/manifests\n"
    )
    if graceful:
        text += "shutdownGracePeriod: 30s\nshutdownGracePeriodCriticalPods: 10s\n"
    return text


def on_cloud(name: str, dmi: dict[str, str], graceful: bool, answers: list[dict[str, Any]]) -> Node:
    """The pods of `whole_gpu_pods` on a cloud VM (its DMI strings), with the kubelet's config
    and the metadata service's answers as capture records them."""
    uuids = [gpu_uuid(i) for i in range(8)]
    node = on_kubelet(
        idle(idle(gpu_k8s_node(name), 6), 7), whole_gpu_pods(), [("nvidia.com/gpu", uuids)]
    )
    for key, value in dmi.items():
        node.file(f"/sys/class/dmi/id/{key}", value + "\n")
    node.file(KUBELET_CONFIG, kubelet_config(graceful))
    node.lifecycle = answers
    return node


def imds(spot: dict[str, str] | None, rebalance: dict[str, str] | None) -> list[dict[str, Any]]:
    """IMDSv2's answers: the token (redacted), the spot action, the rebalance, no events."""
    text = {"Content-Type": "text/plain"}
    html = {"Content-Type": "text/html"}

    def get(path: str, body: dict[str, str] | None) -> dict[str, Any]:
        if body is None:
            return {"method": "GET", "path": path, "status": 404, "body": IMDS_404, "headers": html}
        return {
            "method": "GET",
            "path": path,
            "status": 200,
            "body": json.dumps(body),
            "headers": text,
        }

    return [
        {
            "method": "PUT",
            "path": "/latest/api/token",
            "status": 200,
            "body": "<redacted>",
            "headers": text,
        },
        get("/latest/meta-data/spot/instance-action", spot),
        get("/latest/meta-data/events/recommendations/rebalance", rebalance),
        {
            "method": "GET",
            "path": "/latest/meta-data/events/maintenance/scheduled",
            "status": 200,
            "body": "[]",
            "headers": text,
        },
    ]


AWS_DMI = {"sys_vendor": "Amazon EC2", "product_name": "p5.48xlarge", "bios_vendor": "Amazon EC2"}


def lifecycle_variants() -> list[Node]:
    """Spot and maintenance notices as each provider gives them (check `lifecycle`); captured
    at 21:00:00."""
    spot = {"action": "terminate", "time": "2026-11-29T21:02:00Z"}
    gce = [
        {
            "method": "GET",
            "path": "/computeMetadata/v1/instance/preempted",
            "status": 200,
            "body": "FALSE",
            "headers": GCE_HEADERS,
        },
        {
            "method": "GET",
            "path": "/computeMetadata/v1/instance/maintenance-event",
            "status": 200,
            "body": "TERMINATE_ON_HOST_MAINTENANCE",
            "headers": GCE_HEADERS,
        },
    ]
    vm = "aks-gpupool-31415926-vmss_3"
    events = {
        "DocumentIncarnation": 3,
        "Events": [
            {
                "EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
                "EventStatus": "Scheduled",
                "EventType": "Preempt",
                "ResourceType": "VirtualMachine",
                "Resources": [vm],
                "NotBefore": "Sun, 29 Nov 2026 21:00:30 GMT",
                "Description": "",
                "EventSource": "Platform",
                "DurationInSeconds": -1,
            }
        ],
    }
    json_type = {"Content-Type": "application/json; charset=utf-8"}
    azure = [
        {
            "method": "GET",
            "path": "/metadata/scheduledevents?api-version=2020-07-01",
            "status": 200,
            "body": json.dumps(events),
            "headers": json_type,
        },
        {
            "method": "GET",
            "path": "/metadata/instance/compute/name?api-version=2021-02-01&format=text",
            "status": 200,
            "body": vm,
            "headers": {"Content-Type": "text/plain; charset=utf-8"},
        },
    ]
    azure_dmi = {
        "sys_vendor": "Microsoft Corporation",
        "product_name": "Virtual Machine",
        "chassis_asset_tag": "7783-7084-3265-9085-8269-3286-77",
    }
    gce_dmi = {"sys_vendor": "Google", "product_name": "Google Compute Engine"}
    return [
        on_cloud(
            "synthetic-aws-spot-interruption",
            AWS_DMI,
            True,
            imds(spot, {"noticeTime": "2026-11-29T20:58:13Z"}),
        ),
        on_cloud("synthetic-gce-maintenance", gce_dmi, True, gce),
        on_cloud("synthetic-azure-preempt", azure_dmi, True, azure),
        on_cloud("synthetic-graceful-shutdown-disabled", AWS_DMI, False, imds(None, None)),
    ]


def main(root: Path = HERE) -> None:
    """Write every synthetic snapshot under `root`."""
    for node in variants():
        node.write(root)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
