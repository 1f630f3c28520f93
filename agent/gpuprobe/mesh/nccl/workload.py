"""The objects one NCCL test between nodes is made of, as the API takes them (pure: no calls).

Two ways to run it, the same request of the scheduler either way: one pod per node, bound to
the named nodes (a node field selector on `metadata.name` per node, and never two pods on one
node: anti-affinity on the hostname), each asking for
the node's GPUs (`nvidia.com/gpu`) as a limit, tolerating only the taints the operator names,
with a memory-backed `/dev/shm` for NCCL's intra-node transport.

- **MPIJob** (kubeflow.org/v2beta1, the MPI Operator): one worker per node running sshd, and
  a launcher (no GPU) that starts nccl-tests' `all_reduce_perf` over them with `mpirun`, one
  rank per GPU (`slotsPerWorker` = GPUs per node). The launcher is created only once every
  worker is ready (`launcherCreationPolicy: WaitForWorkersReady`, MPI Operator v0.5.0+), so a
  worker still pulling its image is no launcher failure.
- **Indexed Job** (batch/v1): one pod per node (`completions` = `parallelism` = nodes), each
  running gpuprobe's rank program (`gpuprobe.mesh.nccl_rank`, mounted from a ConfigMap) in
  the user's PyTorch image; a headless Service is the pods' subdomain, so rank 0 is found at
  `<job>-0.<service>` (`MASTER_ADDR`).

Both end on their own if gpuprobe does not end them (killed outright): a deadline
(`activeDeadlineSeconds`) and a time to live after they finish (`ttlSecondsAfterFinished`);
the Service and ConfigMap are owned by the Job, so they go with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

GPU = "nvidia.com/gpu"
RUN_LABEL = "gpuprobe.io/mesh-run"
TEST_LABEL = "gpuprobe.io/mesh-test"
COMMON_LABELS = {
    "app.kubernetes.io/name": "gpuprobe",
    "app.kubernetes.io/component": "mesh-nccl",
    "app.kubernetes.io/managed-by": "gpuprobe",
}
STORE_PORT = 29500  # torch.distributed's TCP store on rank 0 (nccl_rank's MASTER_PORT)
RANK_DIR = "/opt/gpuprobe"
RANK_FILE = "nccl_rank.py"
RANK_CONTAINER = "rank"
LAUNCHER_CONTAINER = "launcher"
WORKER_CONTAINER = "worker"
# Time a finished test's objects stay when nothing deletes them (gpuprobe killed outright).
TTL_SECONDS = 300
# Beyond the test's own deadline, the most a Job or MPIJob may run before Kubernetes ends it.
BACKSTOP_SECONDS = 120
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# The ranks keep no state worth a graceful stop: their GPUs are free for the next round sooner.
GRACE_SECONDS = 5


@dataclass(frozen=True)
class Toleration:
    """A taint the test's pods tolerate: `key` (and `value`, else any), `effect` (else all)."""

    key: str
    value: str | None = None
    effect: str | None = None

    def to_dict(self) -> dict[str, str]:
        """As a pod's `tolerations[]` item."""
        found = {"key": self.key, "operator": "Exists" if self.value is None else "Equal"}
        if self.value is not None:
            found["value"] = self.value
        if self.effect is not None:
            found["effect"] = self.effect
        return found


@dataclass(frozen=True)
class Sweep:
    """The sizes all-reduced: nccl-tests' `-b`, `-e`, `-f` (sizes as nccl-tests reads them)."""

    min_bytes: str = "8M"
    max_bytes: str = "8G"
    factor: int = 2

    def args(self) -> list[str]:
        """The flags, as both all_reduce_perf and the rank program take them."""
        return ["-b", self.min_bytes, "-e", self.max_bytes, "-f", str(self.factor)]


@dataclass(frozen=True)
class Workload:
    """One test: its name, where (namespace, nodes), what each pod asks for, what it runs."""

    name: str
    namespace: str
    nodes: tuple[str, ...]
    gpus: int
    image: str
    run: str  # the mesh run's id: every object of the run carries it
    tolerations: tuple[Toleration, ...] = ()
    resources: tuple[tuple[str, str], ...] = ()  # more per-pod limits (an RDMA resource)
    binary: str = "all_reduce_perf"
    sweep: Sweep = field(default_factory=Sweep)
    deadline_seconds: float = 300.0

    @property
    def active_seconds(self) -> int:
        """The most its Job (MPIJob) may run before Kubernetes ends it: the test's deadline
        and a margin, a backstop for a gpuprobe killed outright."""
        return math.ceil(self.deadline_seconds) + BACKSTOP_SECONDS

    @property
    def labels(self) -> dict[str, str]:
        """The labels of every object and pod of the test."""
        return {**COMMON_LABELS, RUN_LABEL: self.run, TEST_LABEL: self.name}

    @property
    def selector(self) -> str:
        """The label selector of the test's pods."""
        return f"{TEST_LABEL}={self.name}"

    @property
    def ranks(self) -> int:
        """Ranks in all: one per GPU of every node."""
        return len(self.nodes) * self.gpus

    @property
    def service(self) -> str:
        """The headless Service (the rank pods' subdomain)."""
        return self.name

    @property
    def master(self) -> str:
        """Rank 0's name: the Indexed Job's pod 0 (`<job>-0`) in the Service's subdomain."""
        return f"{self.name}-0.{self.service}"

    def meta(self, name: str | None = None) -> dict[str, Any]:
        """An object's metadata."""
        return {"name": name or self.name, "namespace": self.namespace, "labels": self.labels}


def _pod_spec(w: Workload, container: dict[str, Any]) -> dict[str, Any]:
    """A GPU pod's spec: bound to the test's nodes, one per node, the taints named tolerated,
    a memory-backed /dev/shm, no API credentials (the ranks need none)."""
    shm = {"name": "dshm", "mountPath": "/dev/shm"}
    container = {
        **container,
        "resources": {"limits": {GPU: str(w.gpus), **dict(w.resources)}},
        "volumeMounts": [*container.get("volumeMounts", []), shm],
    }
    spec: dict[str, Any] = {
        "affinity": {
            "nodeAffinity": {
                # One term per node, ORed: a node field selector takes one value per term.
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]}
                        for n in w.nodes
                    ]
                }
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {TEST_LABEL: w.name}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            },
        },
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": GRACE_SECONDS,
        "containers": [container],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }
    if w.tolerations:
        spec["tolerations"] = [t.to_dict() for t in w.tolerations]
    return spec


def mpi_job(w: Workload) -> dict[str, Any]:
    """The MPIJob: a launcher running all_reduce_perf under mpirun over one worker per node."""
    launcher = {
        "name": LAUNCHER_CONTAINER,
        "image": w.image,
        "command": [
            "mpirun",
            "--allow-run-as-root",
            "-np",
            str(w.ranks),
            "-bind-to",
            "none",
            "-map-by",
            "slot",
            "-x",
            "NCCL_DEBUG=WARN",
            "-x",
            "PATH",
            "-x",
            "LD_LIBRARY_PATH",
            w.binary,
            *w.sweep.args(),
            "-g",
            "1",
        ],
    }
    launcher_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [launcher],
    }
    if w.tolerations:
        launcher_spec["tolerations"] = [t.to_dict() for t in w.tolerations]
    worker = {"name": WORKER_CONTAINER, "image": w.image}  # the operator starts its sshd
    template = {"metadata": {"labels": w.labels}}
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": w.meta(),
        "spec": {
            "slotsPerWorker": w.gpus,
            "runLauncherAsWorker": False,
            "launcherCreationPolicy": "WaitForWorkersReady",
            "mpiImplementation": "OpenMPI",
            "sshAuthMountPath": "/root/.ssh",
            "runPolicy": {
                "cleanPodPolicy": "Running",
                "backoffLimit": 0,
                "activeDeadlineSeconds": w.active_seconds,
                "ttlSecondsAfterFinished": TTL_SECONDS,
            },
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {**template, "spec": launcher_spec},
                },
                "Worker": {
                    "replicas": len(w.nodes),
                    "restartPolicy": "Never",
                    "template": {**template, "spec": _pod_spec(w, worker)},
                },
            },
        },
    }


def indexed_job(w: Workload) -> dict[str, Any]:
    """The Indexed Job: one rank pod per node running the rank program from the ConfigMap."""
    rank = {
        "name": RANK_CONTAINER,
        "image": w.image,
        "command": ["python3", f"{RANK_DIR}/{RANK_FILE}", *w.sweep.args(), "-g", str(w.gpus)],
        # JOB_COMPLETION_INDEX (the node's rank) is set by the Job controller.
        "env": [
            {"name": "MASTER_ADDR", "value": w.master},
            {"name": "MASTER_PORT", "value": str(STORE_PORT)},
            {"name": "NNODES", "value": str(len(w.nodes))},
            {"name": "NCCL_DEBUG", "value": "WARN"},
        ],
        "ports": [{"name": "store", "containerPort": STORE_PORT}],
        "volumeMounts": [{"name": "rank-program", "mountPath": RANK_DIR, "readOnly": True}],
    }
    spec = _pod_spec(w, rank)
    spec["restartPolicy"] = "Never"
    spec["subdomain"] = w.service
    spec["volumes"].append(
        {"name": "rank-program", "configMap": {"name": w.name, "defaultMode": 0o444}}
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": w.meta(),
        "spec": {
            "completionMode": "Indexed",
            "completions": len(w.nodes),
            "parallelism": len(w.nodes),
            "backoffLimit": 0,
            "activeDeadlineSeconds": w.active_seconds,
            "ttlSecondsAfterFinished": TTL_SECONDS,
            "template": {"metadata": {"labels": w.labels}, "spec": spec},
        },
    }


def owner(job: dict[str, Any]) -> dict[str, Any]:
    """An ownerReference to a created Job: what it owns is deleted with it."""
    meta = job["metadata"]
    return {
        "apiVersion": job.get("apiVersion", "batch/v1"),
        "kind": job.get("kind", "Job"),
        "name": meta["name"],
        "uid": meta["uid"],
    }


def rank_service(w: Workload, owned_by: dict[str, Any]) -> dict[str, Any]:
    """The headless Service that gives each rank pod its name (`<job>-<index>.<service>`),
    published before the pods are ready (they have no readiness probe to pass)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {**w.meta(w.service), "ownerReferences": [owned_by]},
        "spec": {
            "clusterIP": "None",
            "selector": {TEST_LABEL: w.name},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "store", "port": STORE_PORT, "targetPort": STORE_PORT}],
        },
    }


def rank_program(w: Workload, owned_by: dict[str, Any], source: str) -> dict[str, Any]:
    """The ConfigMap the rank program is mounted from."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {**w.meta(), "ownerReferences": [owned_by]},
        "data": {RANK_FILE: source},
    }
