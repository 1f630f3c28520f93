"""Check `pods`: why GPU pods on this node fail — their images' CUDA against the driver, and
the known GPU failure signatures in their logs.

1. Every running container's OCI spec (`gpuprobe.containers.oci`) gives its image's CUDA
   requirement (`NVIDIA_REQUIRE_CUDA`, else `CUDA_VERSION`), evaluated as the NVIDIA runtime
   evaluates it (`gpuprobe.containers.cuda_requirement`) against the driver and each of the
   container's GPUs; where the runtime does not evaluate it (`NVIDIA_DISABLE_REQUIRE`),
   NVIDIA's compatibility rules (`gpuprobe.gpu.cuda`, forward compatibility on data-center
   GPUs with the image's `cuda-compat` package) decide. A container that needs more CUDA
   than that is `IMAGE_CUDA_TOO_NEW`, CRITICAL on each of its GPUs.
2. The bounded tail of the kubelet's logs of every container of a pod that holds GPUs or
   restarted (`gpuprobe.containers.cri_log`), matched against the known signatures
   (`gpuprobe.checks.rules.pod_signatures`): `POD_GPU_FAILURE`, WARNING per pod and cause; a
   signature in every GPU pod (NVML lost everywhere) or one that indicts the node (an
   unresolvable CDI device) raises the node-level finding it implies. CUDA's error 802 stays
   a POD_GPU_FAILURE: the `gpus` check raises FABRIC_NOT_READY from NVML's fabric state.
3. With API access, the node's pods as the API server reports them (`host.pod_statuses`):
   a pod the kubelet rejected (`status.reason` / `message`, `pod_signatures.POD_REASONS`) and
   each container's waiting, terminated and last terminated message (the same signatures as
   the logs) are POD_GPU_FAILUREs too, one finding per pod and cause whether its log, its
   status or both show it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NotRequired, TypedDict

from gpuprobe.causes import gpu_list
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check
from gpuprobe.checks.rules import pod_signatures as sig
from gpuprobe.checks.rules import pods_bounds as bounds
from gpuprobe.checks.rules.kernel_reading import read_sources
from gpuprobe.checks.rules.sections import WORKLOADS, WorkloadsConfig
from gpuprobe.config import Config
from gpuprobe.containers import cri_log, oci
from gpuprobe.containers import cuda_requirement as req
from gpuprobe.gpu import cuda, kernel_log
from gpuprobe.gpu.backend import VendorUses
from gpuprobe.gpu.nvidia.cuda_targets import DriverCuda, read_cuda_targets, read_driver_cuda
from gpuprobe.gpu.nvidia.modes import GpuModes, read_modes
from gpuprobe.host import Host
from gpuprobe.host.podstatus import ContainerStatus, PodStatusAnswer, State
from gpuprobe.report import (
    Action,
    CheckResult,
    Finding,
    PodRef,
    Severity,
    gpu_resource,
    parse_time,
)
from gpuprobe.workloads.attribution import attribute

NAME = "pods"
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
# An XID this long before (or shortly after) a container's CUDA error is its cause.
XID_BEFORE = timedelta(seconds=120)
XID_AFTER = timedelta(seconds=10)
# At most this many containers' logs a round (64 KiB each: 32 MiB), GPU pods' first.
MAX_LOGS = 512


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


class PodLogs(TypedDict):
    """How much of the GPU pods' logs was read (`data.logs`)."""

    containers_read: int
    bytes_read: int
    max_bytes_per_container: int
    containers_not_read: Any


class PodsData(TypedDict):
    """The check's data (docs/checks.md, check `pods`)."""

    driver_version: str | None
    cuda_driver_version: str | None
    containers: list[dict[str, Any]]  # each GPU container with its image's CUDA verdict
    failures: list[dict[str, Any]]  # each GPU pod failure its log shows
    logs: PodLogs
    unreadable_specs: NotRequired[list[dict[str, Any]]]
    api: NotRequired[dict[str, Any]]  # the API server's pods: how many read, or its error
    # Past the bounds (checks.rules.pods_bounds): how many were not listed, by verdict or cause.
    containers_not_listed: NotRequired[dict[str, Any]]
    failures_not_listed: NotRequired[dict[str, Any]]
    unreadable_specs_not_listed: NotRequired[int]


def run(ctx: CheckContext, config: Config) -> CheckResult:
    """Judge every GPU container's image CUDA and every GPU pod's log."""
    host = ctx.host
    driver, gpus = read_driver_cuda(host), _gpus(host)
    held = _held(ctx, config)
    specs = oci.read_specs(host)
    judged: list[tuple[dict[str, Any], list[Finding]]] = []
    gpu_pods: set[tuple[str, str]] = {(p.namespace, p.pod) for p in held}
    for spec in specs:
        if spec.rocm_devices and spec.pod is not None:
            # A ROCm container (given /dev/kfd): a GPU pod, whose image CUDA is no question.
            gpu_pods.add((spec.pod.namespace, spec.pod.pod))
        own = _container_gpus(spec, gpus, held)
        if own is None:
            continue
        if spec.pod is not None:
            gpu_pods.add((spec.pod.namespace, spec.pod.pod))
        judged.append(_judge_image(spec, own, driver))
    containers = [entry for entry, _ in judged]
    findings = _image_findings(judged, driver)
    unreadable = [{"path": s.path, "problem": s.problem} for s in specs if s.problem]
    # GPU pods' logs first, then restarted containers' (most restarts first).
    logs, unread = cri_log.read_pod_logs(host, gpu_pods, MAX_LOGS)
    owners = _Owners(
        gpu_pods,
        {g.index: g for g in gpus},
        held,
        _spec_gpus(specs, gpus, held),
        _Xids(host, config),
        _Modes(host),
    )
    failures = _failures(logs, owners)
    listed = host.pod_statuses.ask(host.node_name)
    failures += _status_failures(listed, owners)
    findings += _failure_findings(failures, gpu_pods)
    listed_containers, more_containers = bounds.split(
        containers, bounds.MAX_LISTED, bounds.container_rank
    )
    data: PodsData = {
        "driver_version": driver.version,
        "cuda_driver_version": driver.cuda,
        "containers": sorted(listed_containers, key=_by_pod),
        "failures": [f.to_dict() for f in failures[: bounds.MAX_LISTED]],
        "logs": {
            "containers_read": len(logs),
            "bytes_read": sum(log.bytes_read for log in logs),
            "max_bytes_per_container": cri_log.MAX_TAIL_BYTES,
            "containers_not_read": unread,
        },
    }
    if more_containers:
        data["containers_not_listed"] = bounds.not_listed(
            "verdicts", [c["verdict"] for c in more_containers]
        )
    if len(failures) > bounds.MAX_LISTED:
        data["failures_not_listed"] = bounds.not_listed(
            "causes", [f.cause for f in failures[bounds.MAX_LISTED :]]
        )
    if unreadable:
        data["unreadable_specs"] = unreadable[: bounds.MAX_LISTED]
    if len(unreadable) > bounds.MAX_LISTED:
        data["unreadable_specs_not_listed"] = len(unreadable) - bounds.MAX_LISTED
    if not listed.absent:
        data["api"] = _api_data(listed)
    return CheckResult(NAME, _summary(containers, failures, specs, listed), findings, data)


def _image_findings(
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


def _by_pod(entry: dict[str, Any]) -> tuple[str, str, str, str]:
    return (entry["namespace"] or "", entry["pod"] or "", entry["container"] or "", entry["id"])


# --- facts ---


def _gpus(host: Host) -> list[NodeGpu]:
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


def _held(ctx: CheckContext, config: Config) -> dict[PodRef, set[int]]:
    """The NVIDIA GPU indices the kubelet gave each container (empty without a kubelet):
    an image's CUDA is held against NVIDIA's GPUs only (the other vendors' GPUs unread)."""
    host = ctx.host
    settings = config.section(WORKLOADS, WorkloadsConfig)
    answer = host.podresources.ask(settings.socket, settings.timeout_seconds)
    if answer.list is None:
        return {}
    held: dict[PodRef, set[int]] = defaultdict(set)
    for use in attribute(host, answer, [VendorUses(ctx.gpus.nvidia.uses())]).devices:
        for grant in use.grants:
            held[grant.pod].add(use.gpu)
    return dict(held)


def _container_gpus(
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


# --- image CUDA ---


def _judge_image(
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


# --- pod logs ---


@dataclass
class Failure:
    """One container's failure: its cause, the line that shows it, when, on which GPUs."""

    pod: PodRef
    cause: str
    line: str
    time: datetime | None
    file: str
    excerpt: str = ""
    detail: str | None = None
    xid: int | None = None
    gpus: list[str] = field(default_factory=list)
    # Found in the pod's status in the API rather than a log: which status and its reason.
    status: str | None = None
    reason: str | None = None
    # The last termination of a container that runs now: the pod failed so, but the node
    # may be fixed since (a CDI spec regenerated), so it implies no node-level finding.
    past: bool = False
    # The NVIDIA container toolkit's hook failed at initialization with this error (the
    # container never started), whatever the signature: the node cannot start GPU containers.
    hook: str | None = None
    # What the check found on the node that explains the failure (the GPU's compute
    # capability, its compute mode), in words and as facts for the data.
    context: str = ""
    facts: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The failure as the check's data shows it."""
        line = self.line if len(self.line) <= 500 else self.excerpt  # a 16 KiB JSON line
        d: dict[str, Any] = {**self.pod.to_dict(), "cause": self.cause, "line": line}
        d["time"] = self.time.isoformat().replace("+00:00", "Z") if self.time else None
        d["file"] = self.file or None
        if self.status is not None:
            d["status"], d["reason"] = self.status, self.reason
        if self.detail:
            d["detail"] = self.detail
        if self.xid is not None:
            d["xid"] = self.xid
        if self.hook is not None:
            d["hook_error"] = self.hook
        d.update(self.facts)
        d["gpus"] = self.gpus
        return d


@dataclass(frozen=True)
class _Owners:
    """What ties a failure to GPUs: the pods that hold GPUs, the node's GPUs by index, each
    container's GPUs (from the kubelet's PodResources and from its OCI spec), and the XIDs."""

    gpu_pods: set[tuple[str, str]]
    by_index: dict[int, NodeGpu]
    held: dict[PodRef, set[int]]
    spec_gpus: dict[PodRef, set[int]]
    xids: _Xids
    modes: _Modes

    def of(self, ref: PodRef) -> list[NodeGpu]:
        """A container's GPUs, by index."""
        own = self.held.get(ref, set()) | self.spec_gpus.get(ref, set())
        return [self.by_index[i] for i in sorted(own) if i in self.by_index]

    def of_pod(self, namespace: str, pod: str) -> list[NodeGpu]:
        """The GPUs of all a pod's containers, by index."""
        own = {
            i
            for ref, indexes in (*self.held.items(), *self.spec_gpus.items())
            if (ref.namespace, ref.pod) == (namespace, pod)
            for i in indexes
        }
        return [self.by_index[i] for i in sorted(own) if i in self.by_index]


def _failures(logs: list[cri_log.ContainerLog], owners: _Owners) -> list[Failure]:
    found: list[Failure] = []
    for log in logs:
        pod = PodRef(log.namespace, log.pod, log.container)
        has_gpu = (log.namespace, log.pod) in owners.gpu_pods
        own = owners.of(pod)
        failure = None
        for line in reversed(log.lines):  # the last failure is the one that ended it
            hit = sig.match(line.text)
            hook = sig.hook_failure(line.text)
            if hit is None or (hit.signature.needs_gpu and not (has_gpu or hook)):
                continue
            xid = None
            if hit.signature.cause == sig.CUDA_FAULT_AT_XID:
                xid = owners.xids.near(line.time, own)
                if xid is None:
                    continue  # an application's own fault, not the GPU's
            failure = Failure(
                pod, hit.signature.cause, line.text, line.time, line.file, hit.excerpt
            )
            failure.detail, failure.xid, failure.hook = hit.detail, xid, hook
            failure.gpus = [g.resource for g in own]
            _explain(failure, own, owners, [x.text for x in log.lines])
            break
        if failure is not None:
            found.append(failure)
    return found


def _spec_gpus(
    specs: list[oci.ContainerSpec], gpus: list[NodeGpu], held: dict[PodRef, set[int]]
) -> dict[PodRef, set[int]]:
    out: dict[PodRef, set[int]] = {}
    for spec in specs:
        if spec.pod is None:
            continue
        own = _container_gpus(spec, gpus, held)
        if own:
            out[spec.pod] = {g.index for g in own}
    return out


class _Xids:
    """The current boot's XID lines with a time, oldest first, read (once, when a CUDA fault
    asks) as the `xid` check reads the kernel logs (each log's rotated files as one stream,
    oldest file first)."""

    def __init__(self, host: Host, config: Config) -> None:
        self.host, self.config = host, config
        self._lines: list[kernel_log.XidLine] | None = None

    def lines(self) -> list[kernel_log.XidLine]:
        """The XID lines, read on first use."""
        if self._lines is None:
            now = datetime.fromtimestamp(self.host.clock.wall(), UTC)
            logs = read_sources(self.host, self.config, now).nvidia_logs()
            timed = [x for log in logs for x in log.xids if x.time is not None]
            self._lines = sorted(timed, key=lambda x: x.time or now)
        return self._lines

    def near(self, when: datetime | None, own: list[NodeGpu]) -> int | None:
        """The XID on one of `own` (any GPU when their buses are unknown) logged within
        XID_BEFORE before or XID_AFTER after `when`."""
        if when is None:
            return None
        pcis = {g.pci for g in own if g.pci}
        for x in reversed(self.lines()):
            if x.time is None or (pcis and x.pci not in pcis):
                continue
            if when - XID_BEFORE <= x.time <= when + XID_AFTER:
                return x.xid
        return None


class _Modes:
    """The GPUs' compute modes by index, read (once) when a CUDA error 46 asks."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._modes: dict[int, GpuModes] | None = None

    def of(self, index: int) -> GpuModes | None:
        """One GPU's modes (None when NVML does not count it)."""
        if self._modes is None:
            self._modes = {m.index: m for m in read_modes(self.host)}
        return self._modes.get(index)


def _explain(failure: Failure, own: list[NodeGpu], owners: _Owners, lines: list[str]) -> None:
    """What the node says about a failure whose cause is the GPU's: its compute capability
    beside the architectures the image was built for (no kernel image), or its compute mode
    (busy or unavailable)."""
    gpus = own or list(owners.by_index.values())
    if failure.cause == sig.NO_KERNEL_IMAGE:
        failure.context, failure.facts = _capability(gpus, lines, bool(own))
    elif failure.cause == sig.GPU_BUSY:
        failure.context, failure.facts = _compute_modes(gpus, owners.modes, bool(own))


def _capability(gpus: list[NodeGpu], lines: list[str], own: bool) -> tuple[str, dict[str, Any]]:
    built = next((m for m in map(sig.BUILT_FOR.search, reversed(lines)) if m), None)
    archs = built.group("archs").split() if built else []
    known = [g for g in gpus if g.arch]
    if not known:
        return "the GPU's compute capability could not be read (NVML)", {}
    whose = "its" if own else "this node's"
    by_arch: dict[str, list[int]] = defaultdict(list)
    for g in known:
        by_arch[g.arch or ""].append(g.index)
    said = [
        f"{gpu_list(indexes)} ({_name(known, indexes[0])}) compute capability {arch} ({_sm(arch)})"
        for arch, indexes in by_arch.items()
    ]
    text = f"{whose} {'; '.join(said)}"
    missing = [_sm(a) for a in by_arch if archs and _sm(a) not in archs]
    if missing:
        text += f"; the image's PyTorch is built for {' '.join(archs)}, not {', '.join(missing)}"
    facts: dict[str, Any] = {"compute_capabilities": sorted(by_arch)}
    if archs:
        facts["image_built_for"] = archs
    return text, facts


def _sm(arch: str) -> str:
    """`9.0` → `sm_90`, as nvcc and PyTorch name an architecture."""
    return "sm_" + arch.replace(".", "")


def _name(gpus: list[NodeGpu], index: int) -> str:
    return next((g.name for g in gpus if g.index == index and g.name), "GPU")


def _compute_modes(gpus: list[NodeGpu], modes: _Modes, own: bool) -> tuple[str, dict[str, Any]]:
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


def _hook_failed(failures: list[Failure]) -> list[Finding]:
    """The node-level finding of the container toolkit's hook failing at initialization: no
    GPU container can start on the node while it lasts. Only the runtime's words about a
    container's start count (a status, not a log line), and only while that container has
    not started since."""
    hooked = [f for f in failures if f.hook and f.status is not None and not f.past]
    if not hooked:
        return []
    errors = list(dict.fromkeys(f.hook or "" for f in hooked))
    pods = tuple(dict.fromkeys(f.pod for f in hooked))
    named = ", ".join(f"{p.namespace}/{p.pod} ({p.container})" for p in pods[:3])
    more = f" and {len(pods) - 3} more" if len(pods) > 3 else ""
    said = "; ".join(f'"{e}"' for e in errors)
    message = (
        "no GPU container can start on this node: the NVIDIA container toolkit's hook fails "
        f"before the container starts ({said}) for {named}{more}. "
        f"Fix: {sig.hook_fix(errors[0])}"
    )
    return [Finding("POD_GPU_FAILURE", Severity.CRITICAL, message, Action.FIX_CONFIG, "node", pods)]


# --- pod statuses from the API server ---


def _status_failures(listed: PodStatusAnswer, owners: _Owners) -> list[Failure]:
    """The GPU failures the pods' statuses show: a pod the kubelet rejected, and each
    container's first state (waiting, terminated, last terminated) whose message matches."""
    found: list[Failure] = []
    for pod in listed.pods:
        gpu_pod = (pod.namespace, pod.name) in owners.gpu_pods or pod.asks_for_gpus
        if pod.message:
            text = _one_line(pod.message)
            hit = sig.match_pod_reason(pod.reason, text, gpu_pod)
            if hit is not None:
                rejected = Failure(
                    PodRef(pod.namespace, pod.name), hit.signature.cause, text, None, "",
                    hit.excerpt, hit.detail, status="status", reason=pod.reason,
                )  # fmt: skip
                rejected.gpus = [g.resource for g in owners.of_pod(pod.namespace, pod.name)]
                found.append(rejected)
        for container in pod.containers:
            ref = PodRef(pod.namespace, pod.name, container.name)
            own = owners.of(ref)
            failure = _container_failure(ref, _states(container), gpu_pod)
            if failure is None:
                continue
            # Past: the container runs now, or (an init container) completed since.
            done = container.terminated is not None and container.terminated.exit_code == 0
            failure.past = failure.status == "lastState.terminated" and (
                container.running_since is not None or done
            )
            if failure.cause == sig.CUDA_FAULT_AT_XID:
                failure.xid = owners.xids.near(failure.time, own)
                if failure.xid is None:
                    continue  # an application's own fault, not the GPU's
            failure.gpus = [g.resource for g in own]
            _explain(failure, own, owners, [failure.line])
            found.append(failure)
    return found


def _states(container: ContainerStatus) -> list[tuple[str, State]]:
    """A container's states with a message, current first: where each is in the status."""
    named = [
        ("state.waiting", container.waiting),
        ("state.terminated", container.terminated),
        ("lastState.terminated", container.last_terminated),
    ]
    return [(where, state) for where, state in named if state is not None and state.message]


def _container_failure(
    ref: PodRef, states: list[tuple[str, State]], gpu_pod: bool
) -> Failure | None:
    for where, state in states:
        text = _one_line(state.message or "")
        hit = sig.match(text)
        # The toolkit's hook fails only for a container the runtime gives GPUs, whatever it
        # asked for (the GPU Operator's validators get them from the runtime class).
        hook = sig.hook_failure(text)
        if hit is None or (hit.signature.needs_gpu and not (gpu_pod or hook)):
            continue
        return Failure(
            ref, hit.signature.cause, text, _finished(state), "", hit.excerpt, hit.detail,
            status=where, reason=state.reason, hook=hook,
        )  # fmt: skip
    return None


def _one_line(text: str) -> str:
    """A status message on one line (a runtime's error holds the hook's stderr lines)."""
    return " ".join(text.split())


def _finished(state: State) -> datetime | None:
    if state.finished_at is None:
        return None
    try:
        return parse_time(state.finished_at)
    except ValueError:
        return None


def _api_data(listed: PodStatusAnswer) -> dict[str, Any]:
    if listed.error is not None:
        return {"error": {"code": listed.error.code, "message": listed.error.message}}
    return {"pods_read": len(listed.pods), "truncated": listed.truncated}


def _failure_findings(failures: list[Failure], gpu_pods: set[tuple[str, str]]) -> list[Finding]:
    grouped: dict[tuple[str, str, str], list[Failure]] = defaultdict(list)
    for f in failures:
        grouped[(f.pod.namespace, f.pod.pod, f.cause)].append(f)
    findings: list[Finding] = []
    unnamed: list[str] = []  # the causes of the pods past MAX_NAMED
    for (namespace, pod, cause), group in grouped.items():
        if len(findings) >= bounds.MAX_NAMED:
            unnamed.append(cause)
            continue
        signature = sig.by_cause(cause)
        what = signature.title
        xid = next((f.xid for f in group if f.xid is not None), None)
        if xid is not None:
            what += f" (XID {xid})"
        logged = [f for f in group if f.status is None]
        shown = [f for f in group if f.status is not None]
        evidence = []
        if logged:
            names = ", ".join(dict.fromkeys(f.pod.container for f in logged))
            evidence.append(f'container {names} logged "{logged[0].excerpt}"')
        if shown:
            evidence.append(f'{_status_who(shown[0])} says "{shown[0].excerpt}"')
        message = f"pod {namespace}/{pod} failed: {what}; {'; '.join(evidence)}. "
        context = next((f.context for f in group if f.context), "")
        message += f"{context[:1].upper()}{context[1:]}. " if context else ""
        message += f"Fix: {signature.fix}"
        resource = next((f.gpus[0] for f in group if f.gpus), "node")
        pods = tuple(dict.fromkeys(f.pod for f in group))
        findings.append(
            Finding("POD_GPU_FAILURE", Severity.WARNING, message, signature.action, resource, pods)
        )
    if unnamed:
        causes = ", ".join(f"{c} ×{n}" for c, n in bounds.counted(unnamed).items())
        message = (
            f"{len(unnamed)} more pod failure(s) for GPU reasons ({causes}); only the first "
            f"{bounds.MAX_NAMED} are named one by one (data.failures lists the first "
            f"{bounds.MAX_LISTED}, data.failures_not_listed counts the rest by cause)"
        )
        action = sig.by_cause(next(iter(bounds.counted(unnamed)))).action
        findings.append(Finding("POD_GPU_FAILURE", Severity.WARNING, message, action, "node"))
    findings += _node_level(failures, gpu_pods)
    return findings


def _status_who(f: Failure) -> str:
    """Which status of the pod shows a failure: its own, or a container's state."""
    reason = f" ({f.reason})" if f.reason else ""
    if f.status == "status":
        return f"its status{reason}"
    return f"container {f.pod.container}'s {f.status}{reason}"


def _node_level(failures: list[Failure], gpu_pods: set[tuple[str, str]]) -> list[Finding]:
    """The node-level findings that some signatures imply."""
    findings = []
    failures = [f for f in failures if not f.past]
    lost = {(f.pod.namespace, f.pod.pod) for f in failures if f.cause == sig.NVML_UNKNOWN_ERROR}
    if lost and len(gpu_pods) > 1 and lost >= gpu_pods:
        pods = tuple(dict.fromkeys(f.pod for f in failures if f.cause == sig.NVML_UNKNOWN_ERROR))
        message = (
            f'every GPU pod on the node ({len(gpu_pods)}) lost its GPUs ("Failed to '
            "initialize NVML: Unknown Error\"): the node's device cgroup rules were rewritten "
            "(systemd daemon-reload with the systemd cgroup driver). Fix: "
            f"{sig.by_cause(sig.NVML_UNKNOWN_ERROR).fix}"
        )
        findings.append(
            Finding("POD_GPU_FAILURE", Severity.CRITICAL, message, Action.FIX_CONFIG, "node", pods)
        )
    findings += _hook_failed(failures)
    # CUDA's error 802 stays the pods' POD_GPU_FAILURE: the `gpus` check owns FABRIC_NOT_READY
    # from NVML's fabric state, which clears when the fabric is up (a log line never does).
    unresolved = [f for f in failures if f.cause == sig.CDI_UNRESOLVABLE]
    if unresolved:
        names = sorted({f.detail or "?" for f in unresolved})
        message = (
            f"the container runtime cannot resolve CDI device {', '.join(names)}: no CDI spec "
            "on the node defines it (missing, or generated before a driver or GPU change). "
            f"Fix: {sig.by_cause(sig.CDI_UNRESOLVABLE).fix}"
        )
        pods = tuple(dict.fromkeys(f.pod for f in unresolved))
        findings.append(
            Finding("CDI_SPEC_STALE", Severity.CRITICAL, message, Action.FIX_CONFIG, "node", pods)
        )
    return findings


def _summary(
    containers: list[dict[str, Any]],
    failures: list[Failure],
    specs: list[oci.ContainerSpec],
    listed: PodStatusAnswer,
) -> str:
    unread = f"; pod statuses not read (API {listed.error.code})" if listed.error else ""
    if not specs and not failures:
        return "no running containers found in the container runtimes' state" + unread
    too_new = sum(1 for c in containers if c["verdict"] in ("too-new", COMPAT_UNSUPPORTED))
    pods = len({(f.pod.namespace, f.pod.pod) for f in failures})
    clean = "no GPU failure in logs" + ("" if listed.absent or listed.error else " or statuses")
    parts = [f"{len(containers)} GPU container(s)"]
    parts.append(f"{too_new} need a newer driver" if too_new else "every image's CUDA runs")
    parts.append(f"{pods} pod(s) failed for GPU reasons" if pods else clean)
    return "; ".join(parts) + unread


def _least_deadline(config: Config) -> float:
    """The disk's sources within the usual deadline, and the API server's list besides: up
    to API_REQUESTS requests, each bounded by `kubernetes.timeout_seconds` (a slow API server
    must not time out the findings the disk gave)."""
    return config.checks.deadline_seconds + API_REQUESTS * config.kubernetes.timeout_seconds


# The list's requests at most: MAX_PODS in pages of 250, and one to learn there are more.
API_REQUESTS = 3
CHECK: Check[PodsData] = Check(
    NAME,
    run,
    least_deadline=_least_deadline,
    # The audit's workload failures (gpuprobe.audit.facts): pods failing for GPU reasons,
    # images that need a newer driver.
    summary_keys={
        "containers": {"namespace": None, "image": None, "cuda_required": None, "verdict": None},
        "failures": {"namespace": None, "pod": None, "cause": None},
    },
)
