"""Check `pods`: why GPU pods on this node fail — their images' CUDA against the driver, and
the known GPU failure signatures in their logs.

1. Every running container's OCI spec (`gpuprobe.containers.oci`) gives its image's CUDA
   requirement (`NVIDIA_REQUIRE_CUDA`, else `CUDA_VERSION`), evaluated as the NVIDIA runtime
   evaluates it (`gpuprobe.containers.cuda_requirement`) against the driver and each of the
   container's GPUs; where the runtime does not evaluate it (`NVIDIA_DISABLE_REQUIRE`),
   NVIDIA's compatibility rules (`gpuprobe.gpu.cuda`, forward compatibility on data-center
   GPUs with the image's `cuda-compat` package) decide. A container that needs more CUDA
   than that is `IMAGE_CUDA_TOO_NEW`, CRITICAL on each of its GPUs. These are NVIDIA's rules
   (`gpuprobe.checks.nvidia.cuda_images`); the images are held against NVIDIA's GPUs only.
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
from gpuprobe.checks.nvidia import cuda_images as images
from gpuprobe.checks.record import Check
from gpuprobe.checks.rules import pod_signatures as sig
from gpuprobe.checks.rules import pods_bounds as bounds
from gpuprobe.checks.rules.kernel_reading import read_sources
from gpuprobe.checks.rules.sections import WORKLOADS, WorkloadsConfig
from gpuprobe.config import Config
from gpuprobe.containers import cri_log, oci
from gpuprobe.gpu import kernel_log
from gpuprobe.gpu.backend import VendorUses
from gpuprobe.host import Host
from gpuprobe.host.podstatus import ContainerStatus, PodStatusAnswer, State
from gpuprobe.report import (
    Action,
    CheckResult,
    Finding,
    PodRef,
    Severity,
    parse_time,
)
from gpuprobe.workloads.attribution import attribute
from gpuprobe.workloads.kubelet import ask_podresources
from gpuprobe.workloads.pods import node_pod_statuses

NAME = "pods"
# An XID this long before (or shortly after) a container's CUDA error is its cause.
XID_BEFORE = timedelta(seconds=120)
XID_AFTER = timedelta(seconds=10)
# At most this many containers' logs a round (64 KiB each: 32 MiB), GPU pods' first.
MAX_LOGS = 512


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
    targets = images.read_targets(host)
    driver, gpus = targets.driver, targets.gpus
    held = _held(ctx, config)
    specs = oci.read_specs(host)
    judged: list[tuple[dict[str, Any], list[Finding]]] = []
    gpu_pods: set[tuple[str, str]] = {(p.namespace, p.pod) for p in held}
    for spec in specs:
        if spec.rocm_devices and spec.pod is not None:
            # A ROCm container (given /dev/kfd): a GPU pod, whose image CUDA is no question.
            gpu_pods.add((spec.pod.namespace, spec.pod.pod))
        own = images.container_gpus(spec, gpus, held)
        if own is None:
            continue
        if spec.pod is not None:
            gpu_pods.add((spec.pod.namespace, spec.pod.pod))
        judged.append(images.judge_image(spec, own, driver))
    containers = [entry for entry, _ in judged]
    findings = images.image_findings(judged, driver)
    unreadable = [{"path": s.path, "problem": s.problem} for s in specs if s.problem]
    # GPU pods' logs first, then restarted containers' (most restarts first).
    logs, unread = cri_log.read_pod_logs(host, gpu_pods, MAX_LOGS)
    owners = _Owners(
        gpu_pods,
        {g.index: g for g in gpus},
        held,
        _spec_gpus(specs, gpus, held),
        _Xids(host, config),
        images.ComputeModes(host),
    )
    failures = _failures(logs, owners)
    listed = node_pod_statuses(host)
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


def _by_pod(entry: dict[str, Any]) -> tuple[str, str, str, str]:
    return (entry["namespace"] or "", entry["pod"] or "", entry["container"] or "", entry["id"])


# --- facts ---


def _held(ctx: CheckContext, config: Config) -> dict[PodRef, set[int]]:
    """The NVIDIA GPU indices the kubelet gave each container (empty without a kubelet):
    an image's CUDA is held against NVIDIA's GPUs only (the other vendors' GPUs unread)."""
    host = ctx.host
    settings = config.section(WORKLOADS, WorkloadsConfig)
    answer = ask_podresources(host, settings.socket, settings.timeout_seconds)
    if answer.list is None:
        return {}
    held: dict[PodRef, set[int]] = defaultdict(set)
    for use in attribute(host, answer, [VendorUses(ctx.gpus.nvidia.uses())]).devices:
        for grant in use.grants:
            held[grant.pod].add(use.gpu)
    return dict(held)


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
    by_index: dict[int, images.NodeGpu]
    held: dict[PodRef, set[int]]
    spec_gpus: dict[PodRef, set[int]]
    xids: _Xids
    modes: images.ComputeModes

    def of(self, ref: PodRef) -> list[images.NodeGpu]:
        """A container's GPUs, by index."""
        own = self.held.get(ref, set()) | self.spec_gpus.get(ref, set())
        return [self.by_index[i] for i in sorted(own) if i in self.by_index]

    def of_pod(self, namespace: str, pod: str) -> list[images.NodeGpu]:
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
    specs: list[oci.ContainerSpec], gpus: list[images.NodeGpu], held: dict[PodRef, set[int]]
) -> dict[PodRef, set[int]]:
    out: dict[PodRef, set[int]] = {}
    for spec in specs:
        if spec.pod is None:
            continue
        own = images.container_gpus(spec, gpus, held)
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

    def near(self, when: datetime | None, own: list[images.NodeGpu]) -> int | None:
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


def _explain(
    failure: Failure, own: list[images.NodeGpu], owners: _Owners, lines: list[str]
) -> None:
    """What the node says about a failure whose cause is the GPU's: its compute capability
    beside the architectures the image was built for (no kernel image), or its compute mode
    (busy or unavailable)."""
    gpus = own or list(owners.by_index.values())
    if failure.cause == sig.NO_KERNEL_IMAGE:
        failure.context, failure.facts = _capability(gpus, lines, bool(own))
    elif failure.cause == sig.GPU_BUSY:
        failure.context, failure.facts = images.compute_modes(gpus, owners.modes, bool(own))


def _capability(
    gpus: list[images.NodeGpu], lines: list[str], own: bool
) -> tuple[str, dict[str, Any]]:
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


def _name(gpus: list[images.NodeGpu], index: int) -> str:
    return next((g.name for g in gpus if g.index == index and g.name), "GPU")


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
    too_new = sum(1 for c in containers if c["verdict"] in ("too-new", images.COMPAT_UNSUPPORTED))
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
