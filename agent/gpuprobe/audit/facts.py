"""What one node's report says about the facts an audit compares and counts.

Each skew field is one small function of the report that reads its checks' `data` through
the checks' own types (`DriverData`, `GpusData`, ...: by index, so renaming a field in a check
fails mypy here too) and returns the value as text, or None when the node cannot tell
(NVML unavailable, the check did not run) or the field does not apply (no GPU, no container
engine); a None leaves the node out of that field's skew. The counts feed the cluster totals.

The data is a report's as read back from the wire or from JSON: objects are dicts and arrays
lists (an exact type test costs a tenth of an abstract one, and an audit makes dozens per node).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from gpuprobe.gpu import cuda
from gpuprobe.report import Action, NodeReport

if TYPE_CHECKING:  # the checks' types only: an audit's helper processes load no check
    from gpuprobe.checks.driver import DriverData
    from gpuprobe.checks.gpus import GpuFacts, GpusData
    from gpuprobe.checks.nvidia.mig import MigData
    from gpuprobe.checks.nvidia.sharing import SharingData
    from gpuprobe.checks.pods import PodsData
    from gpuprobe.checks.toolkit import ToolkitData
    from gpuprobe.gpu.nvidia.mig import GpuInstance, MigGpu


# Findings whose action is one of these leave a GPU healthy: nothing to do (an idle GPU, an
# informational XID), or the application's fault (XID 13, 31, 43: restart the app).
HEALTHY_ACTIONS = frozenset({Action.NONE, Action.RESTART_APP})
# The pods check's verdicts for an image this node's driver cannot run: too new, or admitted
# through a forward-compatibility clause on GPUs without forward compatibility.
TOO_NEW_VERDICTS = frozenset({"too-new", "forward-compatibility-unsupported"})


def _data(report: NodeReport, check: str) -> Mapping[str, Any]:
    result = report.check(check)
    return result.data if result is not None else {}


def _driver(report: NodeReport) -> DriverData:
    return cast("DriverData", _data(report, "driver"))


def _gpus_data(report: NodeReport) -> GpusData:
    return cast("GpusData", _data(report, "gpus"))


def _gpus(report: NodeReport) -> list[GpuFacts]:
    data = _gpus_data(report)
    return _objects(data["gpus"] if "gpus" in data else None)


def _mig_gpus(report: NodeReport) -> list[MigGpu]:
    data = cast("MigData", _data(report, "mig"))
    return _objects(data["gpus"] if "gpus" in data else None)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _objects(value: Any) -> list[Any]:
    """The objects of a list: what the check's type says its items are (a report from the
    wire may hold anything else, which is left out)."""
    return [item for item in _list(value) if isinstance(item, dict)]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# --- skew fields -------------------------------------------------------------------------


def driver_version(report: NodeReport) -> str | None:
    """The driver's version (`driver.data.driver_version`): NVIDIA's as NVML reports it, or
    amdgpu's on a node with only AMD GPUs."""
    data = _driver(report)
    return _text(data["driver_version"] if "driver_version" in data else None)


def driver_vendor(report: NodeReport) -> str | None:
    """Whose driver `driver_version` is: `nvidia` (NVML's), `amd` (amdgpu's, on a node with
    only AMD GPUs: an in-tree driver's is the kernel release), from `driver.data.vendors`."""
    data = _driver(report)
    vendors = _list(data["vendors"] if "vendors" in data else None)
    if "nvidia" in vendors:
        return "nvidia"
    return "amd" if "amd" in vendors else None


def cuda_driver_version(report: NodeReport) -> str | None:
    """The CUDA version the driver supports (`driver.data.cuda_driver_version`)."""
    data = _driver(report)
    return _text(data["cuda_driver_version"] if "cuda_driver_version" in data else None)


def gpu_model(report: NodeReport) -> str | None:
    """The GPUs' model names (`gpus.data.gpus[].name`), joined by ` + ` on a node that mixes
    models; lost GPUs, which answer no name, are left out."""
    names = sorted(
        {n for g in _gpus(report) if (n := _text(g["name"] if "name" in g else None)) is not None}
    )
    return " + ".join(names) or None


def gpu_count(report: NodeReport) -> str | None:
    """How many GPUs the drivers see and can query: NVML's (a lost GPU does not count) and
    amdgpu's; "0" on a node with no GPU on the PCI bus; None when NVML is unavailable on a
    node with NVIDIA GPUs."""
    data = _gpus_data(report)
    amd = data["gpus_seen_by_amdgpu"] if "gpus_seen_by_amdgpu" in data else None
    amd_count = amd if isinstance(amd, int) else 0
    if (data["gpus_seen_by_nvml"] if "gpus_seen_by_nvml" in data else None) is None:
        on_bus = data["gpus_on_pci_bus"] if "gpus_on_pci_bus" in data else None
        return str(amd_count) if on_bus == 0 else None
    nvidia = sum(
        1
        for g in _gpus(report)
        if not (g["lost"] if "lost" in g else None)
        and (g["vendor"] if "vendor" in g else None) != "amd"
    )
    return str(nvidia + amd_count)


def amdgpu_version(report: NodeReport) -> str | None:
    """The amdgpu driver's version on a node with AMD GPUs (`driver.data.amd.amdgpu_version`:
    a DKMS build's own; an in-tree driver has none and goes by `driver_version`)."""
    data = _driver(report)
    amd = data["amd"] if "amd" in data else None
    if not isinstance(amd, dict):
        return None
    return _text(amd["amdgpu_version"] if "amdgpu_version" in amd else None)


def rocm_version(report: NodeReport) -> str | None:
    """The host's ROCm release where ROCm is installed on the host (`driver.data.amd`)."""
    data = _driver(report)
    amd = data["amd"] if "amd" in data else None
    if not isinstance(amd, dict):
        return None
    return _text(amd["rocm_version"] if "rocm_version" in amd else None)


def mig_layout(report: NodeReport) -> str | None:
    """The MIG layout: `disabled` when no GPU has MIG on, else each MIG-enabled GPU's index
    and its MIG devices' profiles (`0:1g.10gb×2+3g.40gb 1:7g.80gb`; `none` for a GPU without
    instances), from `mig.data.gpus`."""
    gpus = [g for g in _mig_gpus(report) if not (g["lost"] if "lost" in g else None)]
    if not gpus:
        return None
    enabled = [g for g in gpus if _mig_enabled(g)]
    if not enabled:
        return "disabled"
    return " ".join(f"{g['index'] if 'index' in g else None}:{_mig_devices(g)}" for g in enabled)


def _mig_enabled(gpu: MigGpu) -> bool:
    return (gpu["mig_mode_current"] if "mig_mode_current" in gpu else None) == 1


def _gpu_instances(gpu: MigGpu) -> list[GpuInstance]:
    return _objects(gpu["gpu_instances"] if "gpu_instances" in gpu else None)


def _mig_devices(gpu: MigGpu) -> str:
    profiles: Counter[str] = Counter()
    for instance in _gpu_instances(gpu):
        cis = instance["compute_instances"] if "compute_instances" in instance else None
        for ci in _list(cis):
            if isinstance(ci, dict):
                profiles[_text(ci["profile"] if "profile" in ci else None) or "unknown"] += 1
    if not profiles:
        return "none"
    return "+".join(f"{p}×{n}" if n > 1 else p for p, n in sorted(profiles.items()))


def toolkit_mode(report: NodeReport) -> str | None:
    """The NVIDIA Container Toolkit's mode (`toolkit.data.toolkit_config.mode`: auto, legacy,
    cdi, csv, jit-cdi; `auto`, its default, when installed without a config file), or
    `not installed`; None on a node without GPUs or with an unreadable config."""
    data = cast("ToolkitData", _data(report, "toolkit"))
    if not data or not (data["gpus"] if "gpus" in data else None):
        return None
    if not (data["toolkit_installed"] if "toolkit_installed" in data else None):
        return "not installed"
    config = data["toolkit_config"] if "toolkit_config" in data else None
    if isinstance(config, dict):
        return _text(config.get("mode"))  # as the toolkit's config reader gives it
    toolkit = report.check("toolkit")
    if toolkit is not None and any(f.code == "CONFIG_INVALID" for f in toolkit.findings):
        return None  # the config is there but unreadable: the mode is unknown
    return "auto"


def runtime_default(report: NodeReport) -> str | None:
    """The default runtime of each container engine that runs GPU containers
    (`toolkit.data.engines`), as `flavor:runtime` (`containerd:nvidia`, `k3s:runc`), joined
    by `, `; None when no engine runs GPU containers."""
    data = cast("ToolkitData", _data(report, "toolkit"))
    pairs = sorted(  # each engine as its reader gives it
        f"{e.get('flavor')}:{e.get('default_runtime')}"
        for e in _list(data["engines"] if "engines" in data else None)
        if isinstance(e, dict) and e.get("in_use") and e.get("runs_gpu_containers")
    )
    return ", ".join(pairs) or None


SkewField = Callable[[NodeReport], "str | None"]
# The fields compared across nodes, in the order the audit reports them.
SKEW_FIELDS: dict[str, SkewField] = {
    "driver_version": driver_version,
    "cuda_driver_version": cuda_driver_version,
    "amdgpu_version": amdgpu_version,
    "rocm_version": rocm_version,
    "gpu_model": gpu_model,
    "gpu_count": gpu_count,
    "mig_layout": mig_layout,
    "toolkit_mode": toolkit_mode,
    "runtime_default": runtime_default,
}


def skew_values(report: NodeReport) -> dict[str, str | None]:
    """Every skew field's value on this node."""
    return {name: field(report) for name, field in SKEW_FIELDS.items()}


# --- counts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Counts:
    """What one node adds to the cluster totals."""

    gpus: int = 0
    healthy_gpus: int = 0
    idle_gpus: int = 0
    mig_slices: int = 0
    time_slicing_units: int = 0
    # Pods failing for GPU reasons, by (namespace, cause) (the `pods` check's failures).
    gpu_pod_failures: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # Images that need a newer driver, by (image, CUDA it needs).
    images_too_new: Mapping[tuple[str, str], ImageNeed] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The counts as JSON (the workload failures only when there are some)."""
        d: dict[str, Any] = {
            "gpus": self.gpus,
            "healthy_gpus": self.healthy_gpus,
            "idle_gpus": self.idle_gpus,
            "mig_slices": self.mig_slices,
            "time_slicing_units": self.time_slicing_units,
        }
        if self.gpu_pod_failures:
            d["gpu_pod_failures"] = [
                {"namespace": ns, "cause": cause, "pods": n}
                for (ns, cause), n in sorted(self.gpu_pod_failures.items())
            ]
        if self.images_too_new:
            d["images_needing_newer_driver"] = [
                {"image": image, "cuda_required": cuda, **need.to_dict(cuda)}
                for (image, cuda), need in ranked_images(self.images_too_new)
            ]
        return d

    def __add__(self, other: Counts) -> Counts:
        failures = Counter(self.gpu_pod_failures)
        failures.update(other.gpu_pod_failures)
        images = dict(self.images_too_new)
        for key, need in other.images_too_new.items():
            images[key] = images[key] + need if key in images else need
        return Counts(
            self.gpus + other.gpus,
            self.healthy_gpus + other.healthy_gpus,
            self.idle_gpus + other.idle_gpus,
            self.mig_slices + other.mig_slices,
            self.time_slicing_units + other.time_slicing_units,
            dict(failures),
            images,
        )


def counts(report: NodeReport) -> Counts:
    """The node's GPUs (on the PCI bus, or as many as NVML lists if more: lost, fallen off the
    bus and driverless GPUs count), the healthy ones (listed by NVML, not lost, and no finding
    on the GPU or its MIG devices that asks for a repair: an action other than NONE and
    RESTART_APP), the idle ones (`idle` now), its MIG devices, and the units its time-sliced
    resources advertise."""
    gpus = _gpus(report)
    data = _gpus_data(report)
    on_bus = data["gpus_on_pci_bus"] if "gpus_on_pci_bus" in data else None
    troubled = _gpus_with_findings(report)
    healthy = sum(
        1
        for g in gpus
        if not (g["lost"] if "lost" in g else None)
        and "index" in g
        and isinstance(g["index"], int)
        and g["index"] not in troubled
    )
    return Counts(
        gpus=max(len(gpus), on_bus if isinstance(on_bus, int) and on_bus > 0 else 0),
        healthy_gpus=healthy,
        idle_gpus=sum(1 for g in gpus if (g["idle"] if "idle" in g else None) is True),
        mig_slices=mig_slices(report),
        time_slicing_units=time_slicing_units(report),
        gpu_pod_failures=gpu_pod_failures(report),
        images_too_new=images_too_new(report),
    )


def gpu_pod_failures(report: NodeReport) -> dict[tuple[str, str], int]:
    """The pods failing for GPU reasons, counted by namespace and cause (`pods.data.failures`;
    a pod counts once per cause however many of its containers show it)."""
    data = cast("PodsData", _data(report, "pods"))
    failures = _list(data["failures"] if "failures" in data else None)
    if not failures:  # most nodes
        return {}
    pods = {
        (ns, pod, cause)
        for f in failures
        if isinstance(f, dict)
        and (ns := _text(f.get("namespace"))) is not None
        and (pod := _text(f.get("pod"))) is not None
        and (cause := _text(f.get("cause"))) is not None
    }
    return dict(Counter((ns, cause) for ns, _, cause in pods))


def images_too_new(report: NodeReport) -> dict[tuple[str, str], ImageNeed]:
    """The images whose CUDA this node's driver cannot run (`pods.data.containers` with
    verdict `too-new` or `forward-compatibility-unsupported`), by (image, CUDA needed):
    their containers, this node, their namespaces."""
    found: dict[tuple[str, str], ImageNeed] = {}
    data = cast("PodsData", _data(report, "pods"))
    for c in _list(data["containers"] if "containers" in data else None):
        if not isinstance(c, dict) or c.get("verdict") not in TOO_NEW_VERDICTS:
            continue
        key = (_text(c.get("image")) or "(unknown image)", str(c.get("cuda_required")))
        namespace = _text(c.get("namespace"))
        need = ImageNeed(1, 1, frozenset({namespace} if namespace else ()))
        old = found.get(key)
        # one node: its containers add up, the node counts once
        found[key] = (
            need
            if old is None
            else ImageNeed(old.containers + 1, 1, old.namespaces | need.namespaces)
        )
    return found


@dataclass(frozen=True)
class ImageNeed:
    """How many containers of an image need a newer driver, on how many nodes, in which
    namespaces."""

    containers: int
    nodes: int
    namespaces: frozenset[str] = frozenset()

    def __add__(self, other: ImageNeed) -> ImageNeed:
        return ImageNeed(
            self.containers + other.containers,
            self.nodes + other.nodes,
            self.namespaces | other.namespaces,
        )

    def to_dict(self, cuda_required: str) -> dict[str, Any]:
        """The counts as JSON, with the oldest driver that fully runs the image's CUDA."""
        return {
            "containers": self.containers,
            "nodes": self.nodes,
            "namespaces": sorted(self.namespaces),
            "driver_needed": driver_needed(cuda_required),
        }


def driver_needed(cuda_required: str) -> str | None:
    """The oldest driver NVIDIA lists as fully supporting a CUDA version (None if unknown)."""
    try:
        release = cuda.release_for(cuda.parse_version(cuda_required))
    except ValueError:
        return None
    return release.min_driver_text if release else None


def ranked_images(
    images: Mapping[tuple[str, str], ImageNeed],
) -> list[tuple[tuple[str, str], ImageNeed]]:
    """The images, most containers first."""
    return sorted(images.items(), key=lambda kv: (-kv[1].containers, kv[0]))


def _gpus_with_findings(report: NodeReport) -> set[int]:
    """The indexes of the GPUs that a finding asking for a repair names (`gpu:<index>:...`,
    `mig:<index>:...`)."""
    found = set()
    for _, finding in report.findings():
        kind, _, rest = finding.resource.partition(":")
        index = rest.partition(":")[0]
        if kind in ("gpu", "mig") and index.isdigit() and finding.action not in HEALTHY_ACTIONS:
            found.add(int(index))
    return found


def mig_slices(report: NodeReport) -> int:
    """The MIG devices (compute instances) on the node's MIG-enabled GPUs."""
    return sum(
        len(_list(instance["compute_instances"] if "compute_instances" in instance else None))
        for gpu in _mig_gpus(report)
        if _mig_enabled(gpu) and not (gpu["lost"] if "lost" in gpu else None)
        for instance in _gpu_instances(gpu)
    )


def time_slicing_units(report: NodeReport) -> int:
    """The schedulable units of the node's time-sliced resources (GPUs × replicas, from
    `sharing.data.resources[].schedulable_units`); 0 without time-slicing."""
    data = cast("SharingData", _data(report, "sharing"))
    if (data["strategy"] if "strategy" in data else None) != "time-slicing":
        return 0
    return sum(  # each resource as the sharing check gives it
        units
        for r in _list(data["resources"] if "resources" in data else None)
        if isinstance(r, dict)
        and isinstance(units := r.get("schedulable_units"), int)
        and not isinstance(units, bool)
    )
