"""NVIDIA's rules of the `pods` check: the CUDA of a GPU container's image against the driver
and the container's GPUs, and the GPU facts that explain a pod's CUDA failure.

Every running container's OCI spec gives its image's CUDA requirement (`NVIDIA_REQUIRE_CUDA`,
else `CUDA_VERSION`), evaluated as the NVIDIA runtime evaluates it
(`gpuprobe.containers.cuda_requirement`) against the driver and each of the container's GPUs
(`gpuprobe.gpu.nvidia.cuda_targets`); where the runtime does not evaluate it
(`NVIDIA_DISABLE_REQUIRE`), NVIDIA's compatibility rules (`gpuprobe.gpu.cuda`, forward
compatibility on data-center GPUs with the image's `cuda-compat` package) decide. The
containers' GPUs are the kubelet's grants, else `NVIDIA_VISIBLE_DEVICES`, else the device
nodes the spec passes. A CUDA error 46 (busy or unavailable) is explained by the GPUs'
compute modes (`gpuprobe.gpu.nvidia.modes`), read once when one asks.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gpuprobe.causes import gpu_list
from gpuprobe.checks.rules import pod_signatures as sig
from gpuprobe.checks.rules import pods_bounds as bounds
from gpuprobe.containers import cuda_requirement as req
from gpuprobe.containers import oci
from gpuprobe.gpu import cuda, kernel_log
from gpuprobe.gpu.nvidia.cuda_targets import DriverCuda, read_cuda_targets, read_driver_cuda
from gpuprobe.gpu.nvidia.modes import GpuModes, read_modes
from gpuprobe.host import Host
from gpuprobe.report import Action, Finding, PodRef, Severity, gpu_resource

NO_DEVICES = frozenset({"", "void", "none"})
# Brands whose GPUs run CUDA forward compatibility (NVIDIA: data-center and the listed
# workstation/vGPU brands; never GeForce or Titan), in the requirement language's names.
FORWARD_COMPAT_BRANDS = frozenset(
    {"tesla", "nvidia", "quadro", "quadrortx", "nvidiartx", "grid", "vapps", "vpc", "vcs",
     "vws", "cloudgaming", "unknown"}
)  # fmt: skip
# What the runtime admits through a brand clause on a GPU without forward compatibility.
COMPAT_UNSUPPORTED = "forward-compatibility-unsupported"
# How a message names the brands without forward compatibility.
BRAND_WORDS = {
    "geforce": "a GeForce",
    "geforcertx": "a GeForce RTX",
    "titan": "a Titan",
    "titanrtx": "a Titan RTX",
    "nvs": "an NVS",
}


@dataclass
class NodeGpu:
    """One GPU as the requirement rules see it."""

    index: int
    uuid: str | None
    minor: int | None
    brand: str | None
    arch: str | None
    pci: str | None
    migs: dict[str, int] = field(default_factory=dict)  # MIG UUID → parent index
    name: str | None = None

    @property
    def resource(self) -> str:
        """The finding resource of the GPU."""
        return gpu_resource(self.index, self.uuid)


@dataclass(frozen=True)
class CudaTargets:
    """What a container's image CUDA is held against: the driver's CUDA and the GPUs."""

    driver: DriverCuda
    gpus: list[NodeGpu]


def read_targets(host: Host) -> CudaTargets:
    """The driver's CUDA and each GPU as the requirement rules see it."""
    return CudaTargets(read_driver_cuda(host), node_gpus(host))


def node_gpus(host: Host) -> list[NodeGpu]:
    return [
        NodeGpu(
            gpu.index,
            gpu.uuid,
            gpu.minor,
            req.BRANDS.get(gpu.brand) if gpu.brand is not None else None,
            gpu.capability,
            kernel_log.pci_prefix(gpu.bus_id) if gpu.bus_id else None,
            dict.fromkeys(gpu.mig_uuids, gpu.index),
            gpu.name,
        )
        for gpu in read_cuda_targets(host)
    ]


def container_gpus(
    spec: oci.ContainerSpec, gpus: list[NodeGpu], held: dict[PodRef, set[int]]
) -> list[NodeGpu] | None:
    """The GPUs a container was given; None for a container without GPUs."""
    if spec.problem is not None:
        return None
    by_index = {g.index: g for g in gpus}
    if spec.pod is not None and spec.pod in held:
        return [by_index[i] for i in sorted(held[spec.pod]) if i in by_index]
    visible = spec.env.get("NVIDIA_VISIBLE_DEVICES")
    if visible is not None and visible.strip().lower() not in NO_DEVICES:
        if visible.strip().lower() == "all":
            return list(gpus)
        chosen = _visible_gpus(visible, gpus)
        return [by_index[i] for i in sorted(chosen) if i in by_index]
    if spec.gpu_minors:
        return [g for g in gpus if g.minor in spec.gpu_minors]
    return None


def _visible_gpus(visible: str, gpus: list[NodeGpu]) -> set[int]:
    """The GPU indexes NVIDIA_VISIBLE_DEVICES names: GPU indexes and UUIDs, MIG UUIDs and
    `<gpu index>:<mig index>` as their parent GPU; a value that is none of these (any pod can
    write anything there) is passed over."""
    names: dict[str, int] = {}
    for g in gpus:
        names[str(g.index)] = g.index
        if g.uuid:
            names[g.uuid] = g.index
        names.update(g.migs)
    chosen: set[int] = set()
    for raw in visible.split(","):
        value = raw.strip()
        if value in names:
            chosen.add(names[value])
            continue
        gpu, colon, mig = value.partition(":")
        if colon and gpu.isdecimal() and mig.isdecimal():
            chosen.add(int(gpu))
    return chosen


def image_findings(
    judged: list[tuple[dict[str, Any], list[Finding]]], driver: DriverCuda
) -> list[Finding]:
    """The image findings of the first MAX_NAMED containers that have any (in listing order),
    and one finding per code summing up the rest."""
    named, rest = bounds.split(
        [(entry, found) for entry, found in judged if found],
        bounds.MAX_NAMED,
        lambda pair: bounds.container_rank(pair[0]),
    )
    findings = [f for _, found in named for f in found]
    # One finding per container (the first of its GPUs'), so the count counts containers.
    rest_firsts = [found[0] for _, found in rest]
    cudas = bounds.counted(
        [str(e["cuda_required"]) for e, found in rest if found[0].code == "IMAGE_CUDA_TOO_NEW"]
    )
    needs = ", ".join(f"{cuda} ×{n}" for cuda, n in cudas.items())

    def what(first: Finding, count: int) -> str:
        if first.code == "IMAGE_CUDA_TOO_NEW":
            return (
                f"{count} more GPU container(s) run images that need more CUDA than driver "
                f"{driver.version} (CUDA {driver.cuda}) gives their GPUs (images' CUDA: "
                f"{needs}); only the first {bounds.MAX_NAMED} are named one by one "
                f"(data.containers lists the first {bounds.MAX_LISTED}, "
                "data.containers_not_listed counts the rest by verdict). Fix: upgrade the "
                "driver, or run images built for its CUDA"
            )
        return (
            f"{count} more GPU container(s) are refused by the NVIDIA runtime in legacy mode "
            f"(their NVIDIA_REQUIRE_* variables do not hold on this node); only the first "
            f"{bounds.MAX_NAMED} are named one by one. Fix: give them GPUs and a driver their "
            "NVIDIA_REQUIRE_* variables accept, or correct them"
        )

    return findings + bounds.summed_up(rest_firsts, what)


# --- image CUDA ---


def judge_image(
    spec: oci.ContainerSpec, own: list[NodeGpu], driver: DriverCuda
) -> tuple[dict[str, Any], list[Finding]]:
    requirements = req.requirements(spec.env)
    image_cuda = _image_cuda(spec.env)
    entry: dict[str, Any] = {
        **(spec.pod.to_dict() if spec.pod else {"namespace": None, "pod": None, "container": None}),
        "runtime": spec.runtime,
        "id": spec.id,
        "image": spec.image,
        "gpus": [g.resource for g in own],
        "cuda_required": image_cuda,
        "requirements": [_short(r) for r in requirements],
        "require_disabled": spec.env.get("NVIDIA_DISABLE_REQUIRE", "") in req.TRUE_WORDS,
    }
    if driver.version is None or image_cuda is None:
        entry["verdict"] = "unknown" if image_cuda else "no-cuda-requirement"
        return entry, []
    if requirements:
        verdict, refusal = _by_runtime(requirements, own, driver)
    else:
        verdict, refusal = _by_table(spec, image_cuda, own, driver), None
    entry["verdict"] = verdict
    if verdict == "refused" and refusal is not None:
        return entry, _refused(spec, own, refusal)
    if verdict == COMPAT_UNSUPPORTED and refusal is not None:
        return entry, _compat_unsupported(spec, own, driver, image_cuda, refusal)
    if verdict != "too-new":
        return entry, []
    return entry, _too_new(spec, own, driver, image_cuda, refusal)


def _refused(spec: oci.ContainerSpec, own: list[NodeGpu], refusal: req.Verdict) -> list[Finding]:
    """A requirement other than CUDA's (an NVIDIA_REQUIRE_ARCH, a driver range), or one the
    runtime cannot parse: the runtime in legacy mode refuses the container."""
    signature = sig.by_cause(sig.RUNTIME_REQUIREMENT)
    who = f"pod {spec.pod.namespace}/{spec.pod.pod}" if spec.pod else f"container {spec.id[:12]}"
    where = f", container {spec.pod.container}" if spec.pod else ""
    message = (
        f"{who}{where}: the NVIDIA runtime in legacy mode refuses it on this node "
        f'("{refusal.message}"). Fix: give it GPUs and a driver its NVIDIA_REQUIRE_* '
        "variables accept, or correct them"
    )
    pods = (spec.pod,) if spec.pod else ()
    resource = own[0].resource if own else "node"
    return [Finding("POD_GPU_FAILURE", Severity.WARNING, message, signature.action, resource, pods)]


def _image_cuda(env: dict[str, str]) -> str | None:
    if "NVIDIA_REQUIRE_CUDA" in env:
        found = req.required_cuda(env["NVIDIA_REQUIRE_CUDA"])
        if found:
            return found
    version = env.get("CUDA_VERSION", "").strip()
    return version or None


def _short(requirement: str) -> str:
    groups = [g for g in requirement.split(" ") if g]
    if len(groups) <= 1:
        return requirement
    return f"{groups[0]} (+{len(groups) - 1} alternatives)"


def _by_runtime(
    requirements: list[str], own: list[NodeGpu], driver: DriverCuda
) -> tuple[str, req.Verdict | None]:
    """What the NVIDIA runtime decides: every requirement against every GPU given; and
    whether what it admits through a forward-compatibility clause can run (the verdict
    COMPAT_UNSUPPORTED with the clause that admitted it, on a GPU of a brand without
    forward compatibility: CUDA fails at start with error 804)."""
    facts = [req.Facts(driver.cuda, driver.version, g.arch, g.brand) for g in own] or [
        req.Facts(driver.cuda, driver.version)
    ]
    via_cuda = True
    unsupported: req.Verdict | None = None
    for requirement in requirements:
        for fact in facts:
            verdict = req.evaluate(requirement, fact)
            if verdict.outcome is req.Outcome.INVALID:
                return "refused", verdict
            if verdict.outcome is req.Outcome.UNSATISFIED:
                # Only a requirement that asks for CUDA (cuda>= first) is about the image's CUDA.
                cuda_asked = req.required_cuda(requirement) is not None
                return ("too-new" if cuda_asked else "refused"), verdict
            if verdict.group and not any(
                c.lower().startswith("cuda") for c in verdict.group.split(",")
            ):
                via_cuda = False
                if fact.brand is not None and fact.brand not in FORWARD_COMPAT_BRANDS:
                    unsupported = unsupported or verdict
    if unsupported is not None:
        return COMPAT_UNSUPPORTED, unsupported
    return ("ok" if via_cuda else "forward-compatibility"), None


def _by_table(
    spec: oci.ContainerSpec, image_cuda: str, own: list[NodeGpu], driver: DriverCuda
) -> str:
    """NVIDIA's compatibility rules, where the runtime checks nothing."""
    try:
        toolkit, version = cuda.parse_version(image_cuda), cuda.parse_version(driver.version or "")
    except ValueError:
        return "unknown"
    driver_cuda = cuda.parse_version(driver.cuda) if driver.cuda else None
    support, _ = cuda.support(version, toolkit, driver_cuda)
    if support is cuda.Support.FULL:
        return "ok"
    if support is cuda.Support.MINOR_VERSION_COMPATIBILITY:
        return "minor-version-compatibility"
    if support is cuda.Support.UNKNOWN:
        return "unknown"
    compat = any(k.startswith("NV_CUDA_COMPAT_PACKAGE") for k in spec.env)
    if compat and own and all(g.brand in FORWARD_COMPAT_BRANDS for g in own):
        return "forward-compatibility"
    return "too-new"


def _too_new(
    spec: oci.ContainerSpec,
    own: list[NodeGpu],
    driver: DriverCuda,
    image_cuda: str,
    refusal: req.Verdict | None,
) -> list[Finding]:
    who = (
        f"pod {spec.pod.namespace}/{spec.pod.pod}, container {spec.pod.container}"
        if spec.pod
        else f"container {spec.id[:12]}"
    )
    image = f", image {spec.image}," if spec.image else ""
    why = (
        f": its NVIDIA_REQUIRE_CUDA does not hold on this node's driver and GPUs (the NVIDIA "
        f'runtime in legacy mode refuses it: "{refusal.message}")'
        if refusal
        else " and its GPUs run no forward compatibility"
    )
    message = (
        f"{who}{image} needs CUDA {image_cuda}; driver {driver.version} supports CUDA "
        f"{driver.cuda}{why}. {_fix(image_cuda, driver)}"
    )
    pods = (spec.pod,) if spec.pod else ()
    resources = [g.resource for g in own] or ["node"]
    return [
        Finding("IMAGE_CUDA_TOO_NEW", Severity.CRITICAL, message, Action.FIX_CONFIG, r, pods)
        for r in resources
    ]


def _compat_unsupported(
    spec: oci.ContainerSpec,
    own: list[NodeGpu],
    driver: DriverCuda,
    image_cuda: str,
    admitted: req.Verdict,
) -> list[Finding]:
    """An image the runtime admits through a forward-compatibility clause on GPUs that run no
    forward compatibility (GeForce, Titan, NVS): it will not run, so its CUDA is too new."""
    who = (
        f"pod {spec.pod.namespace}/{spec.pod.pod}, container {spec.pod.container}"
        if spec.pod
        else f"container {spec.id[:12]}"
    )
    image = f", image {spec.image}," if spec.image else ""
    lacking = [g for g in own if g.brand is not None and g.brand not in FORWARD_COMPAT_BRANDS]
    gpus = ", ".join(f"GPU {g.index}" + (f" ({g.name})" if g.name else "") for g in lacking)
    brands = sorted({BRAND_WORDS.get(g.brand or "", f"of brand {g.brand}") for g in lacking})
    verb = "is" if len(lacking) == 1 else "are"
    compat = sig.CUDA_ERRORS[804].words
    message = (
        f"{who}{image} needs CUDA {image_cuda}; driver {driver.version} supports CUDA "
        f"{driver.cuda}: the NVIDIA runtime admits it (its NVIDIA_REQUIRE_CUDA holds through "
        f"{admitted.group}, a forward-compatibility clause), but forward compatibility runs on "
        f"data-center GPUs only and {gpus} {verb} {' and '.join(brands)}: CUDA will fail at "
        f'start with error 804 ("{compat}"). {_fix(image_cuda, driver)}'
    )
    pods = (spec.pod,) if spec.pod else ()
    return [
        Finding(
            "IMAGE_CUDA_TOO_NEW", Severity.CRITICAL, message, Action.FIX_CONFIG, g.resource, pods
        )
        for g in lacking
    ]


def _fix(image_cuda: str, driver: DriverCuda) -> str:
    parts = []
    try:
        release = cuda.release_for(cuda.parse_version(image_cuda))
        newest = cuda.newest_supported(cuda.parse_version(driver.version or ""))
    except ValueError:
        release = newest = None
    if release is not None:
        parts.append(f"upgrade the driver to >= {release.min_driver_text} (CUDA {release.label})")
    else:
        parts.append(f"upgrade the driver to one that supports CUDA {image_cuda}")
    if newest is not None:
        ceiling = cuda.format_version(newest.version[:2])
        parts.append(
            f"run an image built for CUDA <= {ceiling} (the driver's newest: {newest.label})"
        )
    return "Fix: " + ", or ".join(parts) + "."


class ComputeModes:
    """The GPUs' compute modes by index, read (once) when a CUDA error 46 asks."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._modes: dict[int, GpuModes] | None = None

    def of(self, index: int) -> GpuModes | None:
        """One GPU's modes (None when NVML does not count it)."""
        if self._modes is None:
            self._modes = {m.index: m for m in read_modes(self.host)}
        return self._modes.get(index)


def compute_modes(
    gpus: list[NodeGpu], modes: ComputeModes, own: bool
) -> tuple[str, dict[str, Any]]:
    read = [(g.index, modes.of(g.index)) for g in gpus]
    named = {i: m.mode_name for i, m in read if m is not None and m.compute_mode is not None}
    if not named:
        return "the GPU's compute mode could not be read (NVML)", {}
    by_mode: dict[str, list[int]] = defaultdict(list)
    for index, mode in named.items():
        by_mode[mode].append(index)
    why = {
        "ExclusiveProcess": "one process at a time",
        "ExclusiveThread": "one thread of one process at a time",
        "Prohibited": "no process at all",
        "Default": "shared, so another process held it (another pod given the same GPU, or "
        "one outside Kubernetes)",
    }
    whose = "its" if own else "this node's"
    said = [
        f"{gpu_list(indexes)} in compute mode {mode}: {why.get(mode, 'as NVML says')}"
        for mode, indexes in by_mode.items()
    ]
    return f"{whose} {'; '.join(said)}", {"compute_modes": {str(i): m for i, m in named.items()}}
