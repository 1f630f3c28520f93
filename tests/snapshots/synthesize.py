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
    return nodes + container_variants()


# --- Container toolkit, engines, CDI, device plugin and GPU sharing ---------------------------
# Configuration files in the shapes their tools write are kept in tests/fixtures/toolkit/
# (nvidia-ctk runtime configure for containerd v2/v3, Docker and CRI-O; nvidia-ctk config
# default; k3s's generated config); the CDI spec is written here in the shape of
# `nvidia-ctk cdi generate` (nvidia-container-toolkit cmd/nvidia-ctk/cdi/generate), so its
# driver version and GPU count can vary.

FIXTURES = HERE.parent / "fixtures" / "toolkit"
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


def nvidia_cdi_spec(driver: str, gpus: int) -> str:
    """A CDI spec as `nvidia-ctk cdi generate` writes it for `gpus` GPUs and `driver`."""
    nodes = "".join(f"            - path: /dev/nvidia{i}\n" for i in range(gpus))
    devices = "".join(
        f'    - name: "{i}"\n'
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
        "kind: nvidia.com/gpu\n"
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
    nodes.append(mps_daemon(set_compute_mode(gpu_k8s_node("synthetic-mps-daemon-running"), 3)))

    # MPS configured but its control daemon is not running (GPUs left in Default).
    nodes.append(gpu_k8s_node("synthetic-mps-daemon-missing"))

    # MPS on a node where GPUs 0 and 1 have MIG enabled.
    node = mps_daemon(set_compute_mode(gpu_k8s_node("synthetic-mps-on-mig"), 3))
    for i in (0, 1):
        node.call("nvmlDeviceGetMigMode", [i], [1, 1])
    for i in range(2, len(H100_PCI)):
        node.call("nvmlDeviceGetMigMode", [i], [0, 0])
    nodes.append(node)

    # Time-slicing while GPU 2 was left in EXCLUSIVE_PROCESS and GPU 6 in Prohibited.
    node = gpu_k8s_node("synthetic-time-slicing-exclusive-gpu")
    set_compute_mode(node, 3, range(2, 3))
    set_compute_mode(node, 2, range(6, 7))
    nodes.append(node)
    return nodes


def main(root: Path = HERE) -> None:
    """Write every synthetic snapshot under `root`."""
    for node in variants():
        node.write(root)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
