"""The control plane that acts on the stand-in's workloads (tests/kube_workloads.py), on a
thread: what `gpuprobe mesh --transport nccl`'s tests play in a cluster's stead.

`ControlPlane` is the MPI Operator v2 (kubeflow/mpi-operator, pkg/controller/
mpi_job_controller.go: its validation, worker pods `<job>-worker-<i>` with their hostnames and
labels, the launcher Job `<job>-launcher` once the workers are ready, its conditions,
`cleanPodPolicy`), the Job controller (Indexed pods `<job>-<index>-<suffix>` with hostname
`<job>-<index>` and `JOB_COMPLETION_INDEX`; conditions SuccessCriteriaMet/Complete and
FailureTarget/Failed), the scheduler (node field selectors, taints and tolerations, allocatable
`nvidia.com/gpu`, pod anti-affinity; a pod it cannot place gets kube-scheduler's FitError words
in its PodScheduled condition and a FailedScheduling event) and the kubelets (a placed pod's
container runs, then ends as the test's `Ending` says: each pod's log and exit code).
"""

from __future__ import annotations

import copy
import secrets
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kube_standin import ApiFailure, decode_times, validate
from kube_validation import operator_validation, validate_job, validate_pod_spec
from kube_workloads import (
    GPU,
    MESH_TOKEN,
    MESH_USER,
    WorkloadStandIn,
    gpu_node_status,
    mesh_rules,
    micro_now,
    now,
)


@dataclass
class Ending:
    """How a test's program ends: the log of each pod (`launcher`, `rank-<index>`) and its exit
    code (0 unless named); or never (`hold`); or its image never pulls (`pull_error`: the
    kubelet's ErrImagePull message)."""

    logs: dict[str, str] = field(default_factory=dict)
    exit_codes: dict[str, int] = field(default_factory=dict)
    hold: bool = False
    pull_error: str | None = None


# How a test (by its name) ends, given its program's pods (bound, with their hostnames).
Script = Callable[[str, list[dict[str, Any]]], Ending]
TEST_LABEL = "gpuprobe.io/mesh-test"
ROLE = "training.kubeflow.org/job-role"
INDEX = "batch.kubernetes.io/job-completion-index"
UPDATED = "lastUpdateTime"  # an MPIJob condition's time of update


class ControlPlane:
    """The MPI Operator, the Job controller, the scheduler and the kubelets, acting on the
    stand-in's objects every `tick` seconds on a thread; what they could not do (an object of
    theirs the API's validation refuses) is in `errors`."""

    def __init__(
        self, api: WorkloadStandIn, script: Script, tick: float = 0.05, operator: bool = True
    ) -> None:
        self.api, self.script, self.tick = api, script, tick
        self.operator = operator  # the MPI Operator runs (its CRD may be installed without it)
        self.errors: list[str] = []
        self.validation_refused: list[str] = []
        self.bindings: list[tuple[str, str]] = []  # (pod, node), as the scheduler bound them
        self._done: set[str] = set()  # uids the controllers have acted on for good
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ControlPlane:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(self.tick):
            try:
                with self.api._lock:
                    self.step()
            except Exception as exc:  # a test reads `errors`: the player never dies silently
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def step(self) -> None:
        """One round of every controller, the scheduler and the kubelets."""
        for job in list(self.api.workload("kubeflow.org", "mpijobs").values()):
            if self.operator:
                self._mpi_operator(job)
        for job in list(self.api.workload("batch", "jobs").values()):
            self._job_controller(job)
        for pod in list(self.api.pods.values()):
            if not pod["spec"].get("nodeName"):
                self._schedule(pod)
        for pod in list(self.api.pods.values()):
            if pod["spec"].get("nodeName"):
                self._kubelet(pod)

    # -- objects the controllers make ---------------------------------------------------------
    def _make_pod(self, pod: dict[str, Any]) -> None:
        pod.setdefault("apiVersion", "v1")
        pod.setdefault("kind", "Pod")
        pod["metadata"].update(uid=f"uid-pod-{pod['metadata']['name']}", creationTimestamp=now())
        pod["status"] = {"phase": "Pending"}
        validate(pod)
        problems = validate_pod_spec(pod["spec"], "spec")
        if problems:
            raise ApiFailure(422, "Invalid", "; ".join(problems))
        self.api.add_pod(pod)

    def _make(self, group: str, plural: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        meta.update(uid=f"uid-{obj['kind'].lower()}-{meta['name']}", creationTimestamp=now())
        if group != "kubeflow.org":
            validate(obj)
        self.api._version += 1
        meta["resourceVersion"] = str(self.api._version)
        self.api.workload(group, plural)[(meta["namespace"], meta["name"])] = obj

    def event(
        self, regarding: dict[str, Any], reason: str, message: str, kind: str = "Pod"
    ) -> None:
        """A core/v1 Event about an object, as a controller records it."""
        meta = regarding["metadata"]
        name = f"{meta['name']}.{secrets.token_hex(8)}"
        found = [
            e
            for e in self.api.workload("", "events").values()
            if e["involvedObject"]["name"] == meta["name"] and e["reason"] == reason
        ]
        if found:
            found[0]["message"] = message
            return
        self.api.add_object(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": name, "namespace": meta["namespace"]},
                "involvedObject": {
                    "apiVersion": regarding.get("apiVersion", "v1"),
                    "kind": kind,
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta.get("uid", ""),
                },
                "reason": reason,
                "message": message,
                "type": "Warning",
                "eventTime": micro_now(),
                "reportingComponent": "default-scheduler"
                if kind == "Pod"
                else "mpi-job-controller",
                "reportingInstance": "standin",
                "action": "Scheduling" if kind == "Pod" else "Validating",
                "source": {},
            }
        )

    @staticmethod
    def _owner(obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        return {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }

    # -- the MPI Operator -----------------------------------------------------------------------
    def _mpi_operator(self, job: dict[str, Any]) -> None:
        meta, spec = job["metadata"], job["spec"]
        name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]
        if uid in self._done:
            return
        status = job.setdefault("status", {})
        if not status:
            problems = operator_validation(job)
            if problems:
                self.validation_refused.append(name)
                self.event(job, "ValidationError", "; ".join(problems), kind="MPIJob")
                self._done.add(uid)
                return
            self._operator_objects(job)
            status["conditions"] = [
                _condition(
                    "Created", "MPIJobCreated", f"MPIJob {namespace}/{name} is created.", UPDATED
                )
            ]
            status["startTime"] = now()
        workers = [
            p
            for p in self._pods_of(uid)
            if (p["metadata"].get("labels") or {}).get(ROLE) == "worker"
        ]
        launcher_key = (namespace, f"{name}-launcher")
        launcher = self.api.workload("batch", "jobs").get(launcher_key)
        wanted = spec["mpiReplicaSpecs"]["Worker"]["replicas"]
        ready = len(workers) == wanted and all(_ready(p) for p in workers)
        if launcher is None and (ready or spec["launcherCreationPolicy"] == "AtStartup"):
            self._launcher_job(job)
            return
        if launcher is None:
            return
        done = {
            c["type"]
            for c in (launcher.get("status") or {}).get("conditions") or []
            if c["status"] == "True"
        }
        if "Complete" in done or "Failed" in done:
            succeeded = "Complete" in done
            status["conditions"].append(
                _condition(
                    "Succeeded",
                    "MPIJobSucceeded",
                    f"MPIJob {namespace}/{name} successfully completed.",
                    UPDATED,
                )
                if succeeded
                else _condition(
                    "Failed",
                    "MPIJobFailed",
                    f"MPIJob {namespace}/{name} has failed: launcher Job failed",
                    UPDATED,
                )
            )
            status["completionTime"] = now()
            if spec["runPolicy"].get("cleanPodPolicy") in ("Running", "All"):
                for pod in workers:
                    if pod["status"].get("phase") in ("Pending", "Running"):
                        self.api.collect(
                            "", "pods", (namespace, pod["metadata"]["name"]), "Background"
                        )
            self._done.add(uid)

    def _operator_objects(self, job: dict[str, Any]) -> None:
        """The hostfile ConfigMap, the headless Service and one worker pod per replica."""
        meta, spec = job["metadata"], job["spec"]
        name, namespace = meta["name"], meta["namespace"]
        owner = self._owner(job)
        workers = spec["mpiReplicaSpecs"]["Worker"]["replicas"]
        slots = spec["slotsPerWorker"]
        hosts = "".join(
            f"{name}-worker-{i}.{name}.{namespace}.svc slots={slots}\n" for i in range(workers)
        )
        self._make(
            "",
            "configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": f"{name}-config",
                    "namespace": namespace,
                    "labels": {"app": name},
                    "ownerReferences": [owner],
                },
                "data": {"hostfile": hosts},
            },
        )
        self._make(
            "",
            "services",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {"app": name},
                    "ownerReferences": [owner],
                },
                "spec": {
                    "clusterIP": "None",
                    "selector": {
                        "training.kubeflow.org/operator-name": "mpi-operator",
                        "training.kubeflow.org/job-name": name,
                    },
                },
            },
        )
        template = spec["mpiReplicaSpecs"]["Worker"]["template"]
        for i in range(workers):
            pod_spec = copy.deepcopy(template["spec"])
            pod_spec.update(hostname=f"{name}-worker-{i}", subdomain=name, restartPolicy="Never")
            pod_spec["dnsConfig"] = {"searches": [f"{name}.{namespace}.svc.cluster.local"]}
            container = pod_spec["containers"][0]
            if not container.get("command") and not container.get("args"):
                container["command"] = ["/usr/sbin/sshd", "-De"]
            labels = {
                **(template.get("metadata") or {}).get("labels", {}),
                "training.kubeflow.org/operator-name": "mpi-operator",
                "training.kubeflow.org/job-name": name,
                ROLE: "worker",
                "training.kubeflow.org/replica-index": str(i),
            }
            self._make_pod(
                {
                    "metadata": {
                        "name": f"{name}-worker-{i}",
                        "namespace": namespace,
                        "labels": labels,
                        "ownerReferences": [owner],
                    },
                    "spec": pod_spec,
                }
            )

    def _launcher_job(self, job: dict[str, Any]) -> None:
        meta, spec = job["metadata"], job["spec"]
        name, namespace = meta["name"], meta["namespace"]
        template = copy.deepcopy(spec["mpiReplicaSpecs"]["Launcher"]["template"])
        labels = {
            **(template.get("metadata") or {}).get("labels", {}),
            "training.kubeflow.org/operator-name": "mpi-operator",
            "training.kubeflow.org/job-name": name,
            ROLE: "launcher",
        }
        pod_spec = template["spec"]
        pod_spec.update(
            hostname=f"{name}-launcher",
            subdomain=name,
            restartPolicy=spec["mpiReplicaSpecs"]["Launcher"]["restartPolicy"],
        )
        pod_spec["containers"][0].setdefault("env", []).extend(
            [
                {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
                {"name": "OMPI_MCA_orte_set_default_slots", "value": str(spec["slotsPerWorker"])},
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": ""},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": ""},
            ]
        )
        run = spec["runPolicy"]
        launcher = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": f"{name}-launcher",
                "namespace": namespace,
                "labels": {"app": name},
                "ownerReferences": [self._owner(job)],
            },
            "spec": {
                "template": {"metadata": {"labels": labels}, "spec": pod_spec},
                **{
                    k: run[k]
                    for k in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished")
                    if k in run
                },
                "podReplacementPolicy": "Failed",
            },
        }
        problems = validate_job(launcher)
        if problems:
            raise ApiFailure(422, "Invalid", "; ".join(problems))
        self._make("batch", "jobs", launcher)
        launcher["status"] = {}
        uid = launcher["metadata"]["uid"]
        launcher["spec"]["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        launcher["spec"]["template"]["metadata"]["labels"].update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": f"{name}-launcher",
            }
        )
        launcher["spec"].setdefault("completionMode", "NonIndexed")

    # -- the Job controller -------------------------------------------------------------------
    def _pods_of(self, uid: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.api.pods.values()
            if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])
        ]

    def _job_controller(self, job: dict[str, Any]) -> None:
        meta, spec = job["metadata"], job["spec"]
        uid = meta["uid"]
        if uid in self._done or spec.get("suspend"):
            return
        status = job.setdefault("status", {})
        indexed = spec.get("completionMode") == "Indexed"
        count = (spec.get("completions") or 1) if indexed else (spec.get("parallelism") or 1)
        if "startTime" not in status:
            status["startTime"] = now()
            for index in range(count):
                self._job_pod(job, index if indexed else None)
        pods = self._pods_of(uid)
        failed = [p for p in pods if p["status"].get("phase") == "Failed"]
        succeeded = [p for p in pods if p["status"].get("phase") == "Succeeded"]
        status.update(
            active=len(pods) - len(failed) - len(succeeded),
            failed=len(failed),
            succeeded=len(succeeded),
        )
        if len(failed) > spec.get("backoffLimit", 6):
            message = "Job has reached the specified backoff limit"
            status["conditions"] = [
                _condition("FailureTarget", "BackoffLimitExceeded", message),
                _condition("Failed", "BackoffLimitExceeded", message),
            ]
            for pod in pods:  # the controller ends the pods still active
                if pod["status"].get("phase") in ("Pending", "Running"):
                    self.api.collect(
                        "", "pods", (meta["namespace"], pod["metadata"]["name"]), "Background"
                    )
            self._done.add(uid)
        elif len(succeeded) == count:
            status["conditions"] = [
                _condition(
                    "SuccessCriteriaMet",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                ),
                _condition(
                    "Complete", "CompletionsReached", "Reached expected number of succeeded pods"
                ),
            ]
            status["completionTime"] = now()
            self._done.add(uid)

    def _job_pod(self, job: dict[str, Any], index: int | None) -> None:
        meta = job["metadata"]
        name = meta["name"]
        template = copy.deepcopy(job["spec"]["template"])
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        annotations: dict[str, str] = {}
        pod_spec = template["spec"]
        suffix = secrets.token_hex(3)[:5]
        if index is None:
            pod_name = f"{name}-{suffix}"
        else:
            pod_name = f"{name}-{index}-{suffix}"
            labels[INDEX] = str(index)
            annotations[INDEX] = str(index)
            pod_spec.setdefault("hostname", f"{name}-{index}")
            for container in pod_spec["containers"]:
                container.setdefault("env", []).append(
                    {
                        "name": "JOB_COMPLETION_INDEX",
                        "valueFrom": {
                            "fieldRef": {"fieldPath": f"metadata.annotations['{INDEX}']"}
                        },
                    }
                )
        self._make_pod(
            {
                "metadata": {
                    "name": pod_name,
                    "namespace": meta["namespace"],
                    "labels": labels,
                    "annotations": annotations,
                    "ownerReferences": [self._owner(job)],
                },
                "spec": pod_spec,
            }
        )

    # -- the scheduler -------------------------------------------------------------------------
    def _schedule(self, pod: dict[str, Any]) -> None:
        nodes = sorted(self.api.nodes)
        spec = pod["spec"]
        reasons: dict[str, tuple[str, bool]] = {}  # node: (reason, resolvable by preemption)
        terms = (
            ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or {}
        ).get("nodeSelectorTerms")
        named = None
        if terms and all(t.get("matchFields") for t in terms):
            named = {v for t in terms for f in t["matchFields"] for v in f["values"]}
        for node_name in nodes:
            node = self.api.nodes[node_name]
            if named is not None and node_name not in named:
                reasons[node_name] = ("node(s) didn't satisfy plugin(s) [NodeAffinity]", False)
                continue
            taint = next(
                (t for t in node["spec"].get("taints") or [] if not _tolerated(t, spec)), None
            )
            if taint is not None:
                reasons[node_name] = (
                    f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}",
                    False,
                )
            elif _gpus(pod) > self._free_gpus(node_name):
                reasons[node_name] = (f"Insufficient {GPU}", True)
            elif self._anti_affinity_conflict(pod, node_name):
                reasons[node_name] = ("node(s) didn't match pod anti-affinity rules", True)
        feasible = [n for n in nodes if n not in reasons]
        conditions = pod["status"].setdefault("conditions", [])
        conditions[:] = [c for c in conditions if c["type"] != "PodScheduled"]
        if feasible:
            spec["nodeName"] = feasible[0]
            self.bindings.append((pod["metadata"]["name"], feasible[0]))
            conditions.append(
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()}
            )
            return
        counts = Counter(reason for reason, _ in reasons.values())
        preemption = Counter(
            "No preemption victims found for incoming pod"
            if resolvable
            else "Preemption is not helpful for scheduling"
            for _, resolvable in reasons.values()
        )
        total = len(nodes)
        message = (
            f"0/{total} nodes are available: "
            + ", ".join(sorted(f"{c} {r}" for r, c in counts.items()))
            + f". preemption: 0/{total} nodes are available: "
            + ", ".join(sorted(f"{c} {r}" for r, c in preemption.items()))
            + "."
        )
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": now(),
            }
        )
        self.event(pod, "FailedScheduling", message)

    def _free_gpus(self, node: str) -> int:
        allocatable = int(self.api.nodes[node]["status"].get("allocatable", {}).get(GPU, "0"))
        used = sum(
            _gpus(p)
            for p in self.api.pods.values()
            if p["spec"].get("nodeName") == node
            and p["status"].get("phase") not in ("Succeeded", "Failed")
        )
        return allocatable - used

    def _anti_affinity_conflict(self, pod: dict[str, Any], node: str) -> bool:
        terms = ((pod["spec"].get("affinity") or {}).get("podAntiAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or []
        for term in terms:
            wanted = (term.get("labelSelector") or {}).get("matchLabels") or {}
            for other in self.api.pods.values():
                labels = other["metadata"].get("labels") or {}
                if (
                    other is not pod
                    and other["spec"].get("nodeName") == node
                    and all(labels.get(k) == v for k, v in wanted.items())
                ):
                    return True
        return False

    # -- the kubelets --------------------------------------------------------------------------
    def _kubelet(self, pod: dict[str, Any]) -> None:
        status = pod["status"]
        phase = status.get("phase")
        if phase in ("Succeeded", "Failed"):
            return
        labels = pod["metadata"].get("labels") or {}
        test = labels.get(TEST_LABEL, "")
        container = pod["spec"]["containers"][0]
        if phase == "Pending":
            ending = self.script(test, self._program_pods(test))
            if ending.pull_error is not None:
                _container_status(
                    pod, {"waiting": {"reason": "ErrImagePull", "message": ending.pull_error}}
                )
                return
            status.update(phase="Running", startTime=now(), podIP="10.244.0.10", hostIP="10.0.0.1")
            _container_status(pod, {"running": {"startedAt": now()}}, ready=True)
            for kind in ("Initialized", "ContainersReady", "Ready"):
                status["conditions"].append(
                    {"type": kind, "status": "True", "lastTransitionTime": now()}
                )
            return
        role = labels.get(ROLE, "rank")
        if role == "worker":
            return  # sshd: runs until the operator deletes it
        program = self._program_pods(test)
        if role == "rank" and any(p["status"].get("phase") == "Pending" for p in program):
            return  # the all-reduce needs every rank
        if len(program) < (2 if role == "rank" else 1):
            return
        ending = self.script(test, program)
        if ending.hold:
            return
        key = "launcher" if role == "launcher" else f"rank-{labels.get(INDEX)}"
        code = ending.exit_codes.get(key, 0)
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self.api.logs[(namespace, name, container["name"])] = ending.logs.get(key, "")
        reason = "Completed" if code == 0 else "Error"
        _container_status(
            pod,
            {
                "terminated": {
                    "exitCode": code,
                    "reason": reason,
                    "startedAt": now(),
                    "finishedAt": now(),
                }
            },
        )
        status["phase"] = "Succeeded" if code == 0 else "Failed"
        for condition in status["conditions"]:
            if condition["type"] in ("Ready", "ContainersReady"):
                condition["status"] = "False"

    def _program_pods(self, test: str) -> list[dict[str, Any]]:
        """The pods that run a test's all-reduce (its launcher, or its ranks), by index."""
        found = [
            p
            for p in self.api.pods.values()
            if (p["metadata"].get("labels") or {}).get(TEST_LABEL) == test
            and (p["metadata"].get("labels") or {}).get(ROLE, "rank") in ("rank", "launcher")
        ]
        return sorted(found, key=lambda p: int((p["metadata"].get("labels") or {}).get(INDEX, "0")))


def _condition(
    kind: str, reason: str, message: str, probe: str = "lastProbeTime"
) -> dict[str, Any]:
    """A True condition (a Job's carry lastProbeTime, an MPIJob's lastUpdateTime)."""
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        probe: now(),
        "lastTransitionTime": now(),
    }


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod["status"].get("conditions") or []
    )


def _gpus(pod: dict[str, Any]) -> int:
    return sum(
        int(((c.get("resources") or {}).get("limits") or {}).get(GPU, "0"))
        for c in pod["spec"]["containers"]
    )


def _tolerated(taint: dict[str, Any], spec: dict[str, Any]) -> bool:
    if taint.get("effect") == "PreferNoSchedule":
        return True
    for toleration in spec.get("tolerations") or []:
        if toleration.get("effect") not in (None, "", taint.get("effect")):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration["key"] == taint["key"]:
                return True
        elif toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get(
            "value", ""
        ):
            return True
    return False


def _container_status(pod: dict[str, Any], state: dict[str, Any], ready: bool = False) -> None:
    container = pod["spec"]["containers"][0]
    pod["status"]["containerStatuses"] = [
        {
            "name": container["name"],
            "image": container["image"],
            "imageID": "",
            "ready": ready,
            "restartCount": 0,
            "started": "running" in state,
            "state": state,
        }
    ]
    decode_times(pod)
    validate(pod)


@contextmanager
def cluster(
    directory: Path,
    script: Script,
    gpu_nodes: dict[str, int],
    mpi_operator: bool = False,
    taints: dict[str, list[dict[str, str]]] | None = None,
    operator_running: bool = True,
) -> Iterator[tuple[WorkloadStandIn, ControlPlane]]:
    """A started stand-in (the agent's and the NCCL mesh's RBAC; GPU nodes with their
    allocatable GPUs and taints; the MPI Operator's API when asked, its controller running
    unless told not to) and its control plane; stopped on every way out."""
    from kube_standin import manifest_rules

    stand_in = WorkloadStandIn(directory, manifest_rules())
    stand_in.add_user(MESH_TOKEN, MESH_USER, mesh_rules())
    for name, gpus in gpu_nodes.items():
        stand_in.add_node(
            name,
            {"nvidia.com/gpu.present": "true"},
            status=gpu_node_status(gpus),
            **({"taints": (taints or {})[name]} if name in (taints or {}) else {}),
        )
    if mpi_operator:
        stand_in.install("kubeflow.org", ["v2beta1", "v1"])
    stand_in.start()
    plane = ControlPlane(stand_in, script, operator=operator_running)
    try:
        with plane:
            yield stand_in, plane
    finally:
        stand_in.stop()


def hostnames(pods: list[dict[str, Any]]) -> dict[str, str]:
    """Each program pod's node, by its hostname (what NCCL calls the machine)."""
    return {p["spec"].get("hostname") or p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
