"""Running containers' OCI runtime specs, as the container runtimes keep them on the host.

Each running container has a bundle whose `config.json` is the OCI runtime spec the runtime
started it with: the process's environment (what the image's `ENV` and the pod spec set),
the annotations the CRI plugin adds (which pod and container it is), and the device nodes.

- containerd (CRI plugin, namespace `k8s.io`):
  `/run/containerd/io.containerd.runtime.v2.task/k8s.io/<container id>/config.json`, with
  annotations `io.kubernetes.cri.container-type` (`container` | `sandbox`),
  `io.kubernetes.cri.sandbox-namespace`, `io.kubernetes.cri.sandbox-name`,
  `io.kubernetes.cri.sandbox-uid` (containerd 1.6.11+), `io.kubernetes.cri.container-name`,
  `io.kubernetes.cri.image-name`;
- CRI-O: `/run/containers/storage/overlay-containers/<container id>/userdata/config.json`,
  with `io.kubernetes.cri-o.ContainerType`, `io.kubernetes.pod.namespace`,
  `io.kubernetes.pod.name`, `io.kubernetes.pod.uid`, `io.kubernetes.container.name`,
  `io.kubernetes.cri-o.ImageName`.

Pause (sandbox) containers are skipped. Facts only: the `pods` check judges them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from gpuprobe.host import Host
from gpuprobe.host.fs import HostFS
from gpuprobe.report import PodRef

CONTAINERD_TASKS = "/run/containerd/io.containerd.runtime.v2.task/k8s.io"
CRIO_CONTAINERS = "/run/containers/storage/overlay-containers"
# A spec is a few KiB; one far larger is not a spec the runtime wrote.
MAX_SPEC_BYTES = 4 * 1024 * 1024
_CONTAINER_ID = re.compile(r"^[0-9a-f]{64}$")
_GPU_NODE = re.compile(r"^/dev/nvidia(\d+)$")


@dataclass(frozen=True)
class RuntimeLayout:
    """Where one runtime keeps its containers' specs, and how its annotations name pods."""

    runtime: str
    directory: str
    spec_path: str  # relative to the container's directory
    kind: str  # annotation: container or sandbox
    namespace: str
    pod: str
    pod_uid: str
    container: str
    image: str


LAYOUTS = (
    RuntimeLayout(
        "containerd",
        CONTAINERD_TASKS,
        "config.json",
        "io.kubernetes.cri.container-type",
        "io.kubernetes.cri.sandbox-namespace",
        "io.kubernetes.cri.sandbox-name",
        "io.kubernetes.cri.sandbox-uid",
        "io.kubernetes.cri.container-name",
        "io.kubernetes.cri.image-name",
    ),
    RuntimeLayout(
        "cri-o",
        CRIO_CONTAINERS,
        "userdata/config.json",
        "io.kubernetes.cri-o.ContainerType",
        "io.kubernetes.pod.namespace",
        "io.kubernetes.pod.name",
        "io.kubernetes.pod.uid",
        "io.kubernetes.container.name",
        "io.kubernetes.cri-o.ImageName",
    ),
)


@dataclass
class ContainerSpec:
    """One running container's spec: who it is, its image, its environment, its GPUs' nodes.

    `pod` is None for a container no kubelet started (no CRI annotations). `problem` says why
    a spec could not be read (then only `id`, `runtime` and `path` are known).
    """

    id: str
    runtime: str
    path: str
    pod: PodRef | None = None
    pod_uid: str | None = None
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    gpu_minors: tuple[int, ...] = ()
    # The container was given /dev/kfd: it runs ROCm on AMD GPUs.
    rocm_devices: bool = False
    annotations: dict[str, str] = field(default_factory=dict)
    problem: str | None = None


def read_specs(host: Host) -> list[ContainerSpec]:
    """Every running workload container's spec, of every runtime, in runtime then ID order."""
    fs = host.fs
    found: list[ContainerSpec] = []
    for layout in LAYOUTS:
        for entry in fs.listdir(layout.directory):
            if not _CONTAINER_ID.match(entry):
                continue
            path = f"{layout.directory}/{entry}/{layout.spec_path}"
            spec = _read(fs, layout, entry, path)
            if spec is not None:
                found.append(spec)
    return found


def _read(fs: HostFS, layout: RuntimeLayout, cid: str, path: str) -> ContainerSpec | None:
    try:
        raw = fs.read_bytes(path, MAX_SPEC_BYTES + 1)
    except FileNotFoundError:
        return None  # a bundle being torn down, or a task directory without a spec
    except OSError as e:
        return ContainerSpec(cid, layout.runtime, path, problem=e.strerror or str(e))
    if len(raw) > MAX_SPEC_BYTES:
        return ContainerSpec(cid, layout.runtime, path, problem="larger than 4 MiB")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        return ContainerSpec(cid, layout.runtime, path, problem=f"not JSON: {e}")
    except RecursionError:
        # Python's decoder recurses once per level: a few thousand nested arrays (well
        # under the size bound) exhaust the stack. No runtime writes such a spec.
        return ContainerSpec(cid, layout.runtime, path, problem="JSON nested too deeply")
    if not isinstance(doc, dict):
        return ContainerSpec(cid, layout.runtime, path, problem="not a JSON object")
    annotations = _strings(doc.get("annotations"))
    if annotations.get(layout.kind) == "sandbox":
        return None
    process = doc.get("process")
    env = _env(process.get("env") if isinstance(process, dict) else None)
    spec = ContainerSpec(cid, layout.runtime, path, env=env, annotations=annotations)
    spec.image = annotations.get(layout.image) or None
    namespace, pod = annotations.get(layout.namespace), annotations.get(layout.pod)
    if namespace and pod:
        spec.pod = PodRef(namespace, pod, annotations.get(layout.container, ""))
        spec.pod_uid = annotations.get(layout.pod_uid) or None
    spec.gpu_minors = _gpu_minors(doc.get("linux"))
    spec.rocm_devices = _has_kfd(doc.get("linux"))
    return spec


def _strings(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def _env(value: Any) -> dict[str, str]:
    """`KEY=value` entries as a mapping (the last one wins, as execve's environment does)."""
    env: dict[str, str] = {}
    if isinstance(value, list):
        for item in value:
            if isinstance(item, str) and "=" in item:
                key, _, text = item.partition("=")
                env[key] = text
    return env


def _has_kfd(linux: Any) -> bool:
    """Whether the spec gives the container `/dev/kfd`, ROCm's compute device (the AMD device
    plugin and `--device /dev/kfd` put it among the spec's devices)."""
    if not isinstance(linux, dict) or not isinstance(linux.get("devices"), list):
        return False
    return any(isinstance(d, dict) and d.get("path") == "/dev/kfd" for d in linux["devices"])


def _gpu_minors(linux: Any) -> tuple[int, ...]:
    """The GPU device nodes (`/dev/nvidia<minor>`) the spec gives the container (CDI and
    the device plugin's device specs put them there; the legacy hook adds them later)."""
    if not isinstance(linux, dict) or not isinstance(linux.get("devices"), list):
        return ()
    minors = []
    for device in linux["devices"]:
        if isinstance(device, dict) and isinstance(device.get("path"), str):
            found = _GPU_NODE.match(device["path"])
            if found:
                minors.append(int(found.group(1)))
    return tuple(sorted(set(minors)))
