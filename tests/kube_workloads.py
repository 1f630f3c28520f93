"""The API stand-in's workloads, for `gpuprobe mesh --transport nccl`, and the control plane
that acts on them.

`WorkloadStandIn` extends the stand-in (tests/kube_standin.py) with what the NCCL mesh creates
and reads, as strictly as the API server serves it:

- batch/v1 Jobs, core/v1 Services and ConfigMaps, and the MPI Operator's kubeflow.org/v2beta1
  MPIJobs (served only once `install`ed, and then in discovery's `/apis/kubeflow.org/v2beta1`
  resource list, as the CRD makes it): create (201; 409 for a name taken; 404 for a namespace
  that does not exist), get, list, delete (with DeleteOptions' `propagationPolicy`, and the
  API's defaults: Background, but Orphan for batch/v1 Jobs, whose pods then stay);
- every object validated: built-in kinds against Kubernetes' OpenAPI schemas (strict) and the
  API server's own rules beyond them (`validate_pod_spec`, `validate_job`, `validate_service`,
  `validate_config_map`: a node field selector takes one value per term, an extended resource
  needs a limit equal to its request, a Job's pods restart Never or OnFailure, a Service's name
  is a DNS-1035 label, ...); MPIJobs against the CRD's structural schema (kubeflow/mpi-operator
  v0.8.2, manifests/base/kubeflow.org_mpijobs.yaml: its fields, types, enums, defaults; its
  templates as core/v1 PodTemplateSpecs), unknown fields refused;
- the garbage collector: deleting an owner deletes (Background, Foreground) or orphans (Orphan)
  what its `ownerReferences` name;
- pods by name, and `pods/log` as text/plain (400 for a container that does not exist or has
  not started, as the kubelet answers);
- RBAC from Roles too: `role_rules` reads the Roles and RoleBindings of rendered manifests
  (daemonset/mesh-nccl), each rule valid in its namespace only.

`ControlPlane` plays, on a thread, what acts on those objects in a cluster: the MPI Operator
v2 (kubeflow/mpi-operator, pkg/controller/mpi_job_controller.go: its validation, worker pods
`<job>-worker-<i>` with their hostnames and labels, the launcher Job `<job>-launcher` once the
workers are ready, its conditions, `cleanPodPolicy`), the Job controller (Indexed pods
`<job>-<index>-<suffix>` with hostname `<job>-<index>` and `JOB_COMPLETION_INDEX`; conditions
SuccessCriteriaMet/Complete and FailureTarget/Failed), the scheduler (node field selectors,
taints and tolerations, allocatable `nvidia.com/gpu`, pod anti-affinity; a pod it cannot place
gets kube-scheduler's FitError words in its PodScheduled condition and a FailedScheduling
event) and the kubelets (a placed pod's container runs, then ends as the test's `Ending` says:
each pod's log and exit code).
"""

from __future__ import annotations

import copy
import re
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from kube_standin import (
    DNS_SUBDOMAIN,
    QUALIFIED,
    ApiFailure,
    KubeStandIn,
    PlainText,
    RequestInfo,
    Rule,
    cluster_role_rules,
    decode_times,
    validate,
)

MESH_USER = "system:serviceaccount:gpuprobe:gpuprobe-mesh-nccl"
MESH_TOKEN = "mesh-token"
GPU = "nvidia.com/gpu"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
# The kinds served here beside the base stand-in's, by (group, plural).
WORKLOADS = {
    ("batch", "jobs"): "Job",
    ("", "services"): "Service",
    ("", "configmaps"): "ConfigMap",
    ("kubeflow.org", "mpijobs"): "MPIJob",
}
# Discovery's resource lists (`/apis/GROUP/VERSION`) of the groups served here.
RESOURCES = {
    ("batch", "v1"): [("jobs", "Job"), ("cronjobs", "CronJob")],
    ("kubeflow.org", "v2beta1"): [("mpijobs", "MPIJob")],
    ("kubeflow.org", "v1"): [("pytorchjobs", "PyTorchJob"), ("tfjobs", "TFJob")],
}
NOW = "%Y-%m-%dT%H:%M:%SZ"
# The API's 1 MiB bound on a ConfigMap's data (core validation, MaxSecretSize's sibling).
CONFIG_MAP_BYTES = 1024 * 1024


def now() -> str:
    """The time as the API writes it (RFC 3339, seconds)."""
    return time.strftime(NOW, time.gmtime())


def micro_now() -> str:
    """A MicroTime (six fractional digits), as events.k8s.io's eventTime."""
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


# -- RBAC from Roles ---------------------------------------------------------------------------
def role_rules(objects: list[dict[str, Any]], user: str) -> list[Rule]:
    """The rules rendered manifests grant `user`: ClusterRoles through ClusterRoleBindings
    (every namespace), Roles and ClusterRoles through RoleBindings (the binding's namespace)."""
    rules = cluster_role_rules(objects, user)
    by_name = {
        (o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects
    }
    for binding in (o for o in objects if o["kind"] == "RoleBinding"):
        namespace = binding["metadata"]["namespace"]
        bound = any(
            s["kind"] == "ServiceAccount"
            and f"system:serviceaccount:{s['namespace']}:{s['name']}" == user
            for s in binding.get("subjects") or []
        )
        ref = binding["roleRef"]
        role = by_name.get((ref["kind"], namespace if ref["kind"] == "Role" else None, ref["name"]))
        if not bound or role is None:
            continue
        for r in role.get("rules") or []:
            rules.append(
                Rule(
                    set(r.get("apiGroups") or []),
                    set(r.get("resources") or []),
                    set(r.get("verbs") or []),
                    set(r.get("resourceNames") or []),
                    namespace,
                )
            )
    return rules


def mesh_rules() -> list[Rule]:
    """What `kubectl kustomize daemonset/mesh-nccl` grants the NCCL mesh's account."""
    from deployment import objects

    return role_rules(objects("mesh-nccl"), MESH_USER)


# -- the API server's validation beyond the OpenAPI schemas -------------------------------------
def _extended(name: str) -> bool:
    """An extended resource (a device plugin's: `vendor.com/thing`), never overcommitted."""
    return "/" in name and not name.startswith(("kubernetes.io/", "requests."))


def validate_pod_spec(spec: dict[str, Any], at: str) -> list[str]:
    """ValidatePodSpec's rules gpuprobe's pods reach (pkg/apis/core/validation)."""
    problems: list[str] = []
    volumes = [v.get("name", "") for v in spec.get("volumes") or []]
    if len(set(volumes)) != len(volumes):
        problems.append(f"{at}.volumes: Duplicate value")
    for name in volumes:
        if not DNS_LABEL.fullmatch(name) or len(name) > 63:
            problems.append(f"{at}.volumes: {name!r} is not a DNS label")
    containers = spec.get("containers") or []
    if not containers:
        problems.append(f"{at}.containers: Required value")
    names = [c.get("name", "") for c in containers]
    if len(set(names)) != len(names):
        problems.append(f"{at}.containers: Duplicate value")
    for i, container in enumerate(containers):
        where = f"{at}.containers[{i}]"
        if not DNS_LABEL.fullmatch(container.get("name", "")):
            problems.append(f"{where}.name: not a DNS label")
        if not container.get("image"):
            problems.append(f"{where}.image: Required value")
        mounts = [m.get("mountPath") for m in container.get("volumeMounts") or []]
        if len(set(mounts)) != len(mounts):
            problems.append(f"{where}.volumeMounts: must be unique")
        for mount in container.get("volumeMounts") or []:
            if mount.get("name") not in volumes:
                problems.append(f"{where}.volumeMounts.name: Not found: {mount.get('name')!r}")
        resources = container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        for name, value in {**limits, **requests}.items():
            if _extended(name) and not str(value).isdecimal():
                problems.append(f"{where}.resources: {name} must be a whole number")
        for name, value in requests.items():
            if _extended(name) and name not in limits:
                problems.append(
                    f"{where}.resources.limits: Required value: Limit must be set for non "
                    "overcommitable resources"
                )
            elif _extended(name) and str(limits[name]) != str(value):
                problems.append(f"{where}.resources.requests[{name}]: must be equal to its limit")
    for key in ("hostname", "subdomain"):
        if key in spec and (not DNS_LABEL.fullmatch(spec[key]) or len(spec[key]) > 63):
            problems.append(f"{at}.{key}: {spec[key]!r} is not a DNS label")
    for i, toleration in enumerate(spec.get("tolerations") or []):
        where = f"{at}.tolerations[{i}]"
        operator = toleration.get("operator", "Equal")
        if operator == "Exists" and toleration.get("value"):
            problems.append(f"{where}.operator: value must be empty when `operator` is 'Exists'")
        if operator == "Equal" and not toleration.get("key"):
            problems.append(f"{where}.operator: operator must be Exists when `key` is empty")
        if toleration.get("key") and not QUALIFIED.fullmatch(toleration["key"]):
            problems.append(f"{where}.key: not a qualified name")
        if toleration.get("effect") not in (
            None,
            "",
            "NoSchedule",
            "PreferNoSchedule",
            "NoExecute",
        ):
            problems.append(f"{where}.effect: Unsupported value")
    affinity = spec.get("affinity") or {}
    node = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if node is not None:
        terms = node.get("nodeSelectorTerms") or []
        if not terms:
            problems.append(f"{at}.affinity: nodeSelectorTerms: Required value")
        for i, term in enumerate(terms):
            where = f"{at}.affinity.nodeAffinity.nodeSelectorTerms[{i}]"
            for field_term in term.get("matchFields") or []:
                if field_term.get("operator") in ("In", "NotIn"):
                    if len(field_term.get("values") or []) != 1:
                        problems.append(
                            f"{where}.matchFields.values: Required value: must be only one value "
                            "when `operator` is 'In' or 'NotIn' for node field selector"
                        )
                else:
                    problems.append(f"{where}.matchFields.operator: not a valid selector operator")
                if field_term.get("key") != "metadata.name":
                    problems.append(f"{where}.matchFields.key: not a valid field selector key")
    for kind in ("podAffinity", "podAntiAffinity"):
        for term in (affinity.get(kind) or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or []:
            if not term.get("topologyKey"):
                problems.append(f"{at}.affinity.{kind}: topologyKey: Required value")
    return problems


def validate_job(job: dict[str, Any]) -> list[str]:
    """ValidateJob's rules (pkg/apis/batch/validation) beyond the schema."""
    problems = []
    name = job["metadata"]["name"]
    if len(name) > 63:  # the Job's name is its pods' `job-name` label value
        problems.append("metadata.name: must be no more than 63 characters")
    spec = job.get("spec") or {}
    template = spec.get("template") or {}
    pod = template.get("spec") or {}
    if pod.get("restartPolicy") not in ("OnFailure", "Never"):
        problems.append(
            'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"'
        )
    if spec.get("selector") is not None and not spec.get("manualSelector"):
        problems.append("spec.selector: Invalid value: `selector` will be auto-generated")
    if spec.get("completionMode") == "Indexed":
        if spec.get("completions") is None:
            problems.append("spec.completions: Required value: when completion mode is Indexed")
        elif spec["completions"] > 100_000:
            problems.append("spec.completions: must be less than or equal to 100000")
    for key, least in (("backoffLimit", 0), ("ttlSecondsAfterFinished", 0), ("parallelism", 0)):
        if key in spec and spec[key] < least:
            problems.append(f"spec.{key}: must be greater than or equal to {least}")
    if "activeDeadlineSeconds" in spec and spec["activeDeadlineSeconds"] <= 0:
        problems.append("spec.activeDeadlineSeconds: must be greater than 0")
    return problems + validate_pod_spec(pod, "spec.template.spec")


def validate_service(service: dict[str, Any]) -> list[str]:
    """ValidateService's rules beyond the schema."""
    problems = []
    name = service["metadata"]["name"]
    if not DNS_1035.fullmatch(name) or len(name) > 63:
        problems.append(f"metadata.name: {name!r} is not a DNS-1035 label")
    spec = service.get("spec") or {}
    ports = spec.get("ports") or []
    headless = spec.get("clusterIP") == "None"
    if not ports and not headless and spec.get("type") != "ExternalName":
        problems.append("spec.ports: Required value")
    if len(ports) > 1 and not all(p.get("name") for p in ports):
        problems.append("spec.ports.name: Required value")
    for port in ports:
        if not 1 <= int(port.get("port", 0)) <= 65535:
            problems.append("spec.ports.port: must be between 1 and 65535")
    return problems


def validate_config_map(config_map: dict[str, Any]) -> list[str]:
    """ValidateConfigMap's rules: keys, and the 1 MiB bound."""
    problems = []
    data = config_map.get("data") or {}
    for key in data:
        if not CONFIG_KEY.fullmatch(key) or len(key) > 253:
            problems.append(f"data[{key}]: a valid config key must consist of [-._a-zA-Z0-9]")
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > CONFIG_MAP_BYTES:
        problems.append(f"[]: Too long: must have at most {CONFIG_MAP_BYTES} bytes")
    return problems


# The MPIJob CRD's structural schema outside the pod templates (kubeflow/mpi-operator v0.8.2,
# manifests/base/kubeflow.org_mpijobs.yaml), unknown fields refused; its defaults.
_INT, _STR, _BOOL, _OBJ = (
    {"type": "integer"},
    {"type": "string"},
    {"type": "boolean"},
    {"type": "object"},
)
MPIJOB_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "apiVersion": _STR,
        "kind": _STR,
        "metadata": _OBJ,
        "status": _OBJ,
        "spec": {
            "type": "object",
            "required": ["mpiReplicaSpecs"],
            "additionalProperties": False,
            "properties": {
                "launcherCreationPolicy": _STR,
                "mpiImplementation": {"type": "string", "enum": ["OpenMPI", "Intel", "MPICH"]},
                "mpiReplicaSpecs": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"replicas": _INT, "restartPolicy": _STR, "template": _OBJ},
                    },
                },
                "runLauncherAsWorker": _BOOL,
                "runPolicy": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "activeDeadlineSeconds": _INT,
                        "backoffLimit": _INT,
                        "cleanPodPolicy": _STR,
                        "managedBy": _STR,
                        "schedulingPolicy": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "minAvailable": _INT,
                                "minResources": _OBJ,
                                "priorityClass": _STR,
                                "queue": _STR,
                                "scheduleTimeoutSeconds": _INT,
                            },
                        },
                        "suspend": _BOOL,
                        "ttlSecondsAfterFinished": _INT,
                    },
                },
                "slotsPerWorker": _INT,
                "sshAuthMountPath": _STR,
            },
        },
    },
}
MPIJOB_DEFAULTS = {
    "launcherCreationPolicy": "AtStartup",
    "mpiImplementation": "OpenMPI",
    "runLauncherAsWorker": False,
    "slotsPerWorker": 1,
    "sshAuthMountPath": "/root/.ssh",
}


def validate_mpijob(job: dict[str, Any]) -> None:
    """The CRD's schema (422, as the API server answers), its defaults applied in place, each
    replica's template validated as a core/v1 PodTemplateSpec."""
    errors = sorted(jsonschema.Draft7Validator(MPIJOB_SCHEMA).iter_errors(job), key=str)
    if errors:
        where = ".".join(str(p) for p in errors[0].absolute_path)
        raise ApiFailure(422, "Invalid", f"MPIJob is invalid: {where}: {errors[0].message}")
    spec = job["spec"]
    for key, value in MPIJOB_DEFAULTS.items():
        spec.setdefault(key, value)
    spec.setdefault("runPolicy", {}).setdefault("suspend", False)
    for kind, replica in spec["mpiReplicaSpecs"].items():
        template = replica.get("template") or {}
        wrapper = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": "template"},
            "template": template,
        }
        validate(wrapper)
        problems = validate_pod_spec(template.get("spec") or {}, f"{kind}.template.spec")
        if problems:
            raise ApiFailure(422, "Invalid", "MPIJob is invalid: " + "; ".join(problems))


def operator_validation(job: dict[str, Any]) -> list[str]:
    """The MPI Operator's own ValidateMPIJob (pkg/apis/kubeflow/validation): a job it refuses
    gets a ValidationError event and no pods."""
    spec = job["spec"]
    problems = []
    workers = (spec["mpiReplicaSpecs"].get("Worker") or {}).get("replicas") or 1
    host = f"{job['metadata']['name']}-worker-{max(workers, 1) - 1}"
    if not DNS_1035.fullmatch(host) or len(host) > 63:
        problems.append(
            "metadata.name: will not able to create pod and service with invalid DNS label "
            f"{host!r}"
        )
    if (spec.get("runPolicy") or {}).get("cleanPodPolicy") not in ("None", "Running", "All"):
        problems.append("spec.runPolicy.cleanPodPolicy: Required value")
    launcher = spec["mpiReplicaSpecs"].get("Launcher")
    if launcher is None:
        problems.append("spec.mpiReplicaSpecs[Launcher]: Required value")
    for kind, replica in spec["mpiReplicaSpecs"].items():
        if replica.get("replicas") is None:
            problems.append(f"spec.mpiReplicaSpecs[{kind}].replicas: Required value")
        if replica.get("restartPolicy") not in ("Never", "OnFailure"):
            problems.append(f"spec.mpiReplicaSpecs[{kind}].restartPolicy: Unsupported value")
    if launcher is not None and launcher.get("replicas") not in (None, 1):
        problems.append("spec.mpiReplicaSpecs[Launcher].replicas: must be 1")
    return problems


# -- the stand-in ------------------------------------------------------------------------------
class WorkloadStandIn(KubeStandIn):
    """The stand-in serving Jobs, Services, ConfigMaps, MPIJobs, pods by name and their logs."""

    def __init__(self, directory: Path, rules: list[Rule]) -> None:
        super().__init__(directory, rules)
        self.namespaces = {"default", "kube-system", "gpuprobe"}
        self.logs: dict[tuple[str, str, str], str] = {}  # (namespace, pod, container): text
        self.created: list[tuple[str, str]] = []  # (kind, name), as they were asked for
        self.stored: dict[tuple[str, str], dict[str, Any]] = {}  # (kind, name): as created
        self.deleted: list[tuple[str, str, str]] = []  # (kind, name, propagation)

    def workload(self, group: str, plural: str) -> dict[tuple[str, str], dict[str, Any]]:
        """The store of a kind (by (namespace, name))."""
        return self.objects.setdefault((group, plural), {})

    def _discovery(self, path: str) -> dict[str, Any] | None:
        parts = path.rstrip("/").split("/")
        if len(parts) == 4 and parts[1] == "apis":
            group, version = parts[2], parts[3]
            if version not in self.groups.get(group, []) or (group, version) not in RESOURCES:
                raise ApiFailure(
                    404, "NotFound", "the server could not find the requested resource"
                )
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}",
                "resources": [
                    {
                        "name": plural,
                        "singularName": kind.lower(),
                        "namespaced": True,
                        "kind": kind,
                        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                    }
                    for plural, kind in RESOURCES[(group, version)]
                ],
            }
        return super()._discovery(path)

    def _route(
        self,
        info: RequestInfo,
        query: dict[str, list[str]],
        payload: Any,
        content_type: str,
        token: str,
    ) -> tuple[int, Any]:
        kind = WORKLOADS.get((info.group, info.resource))
        if kind is not None and info.namespace and not info.subresource:
            served = self.groups.get(info.group, []) if info.group else ["v1"]
            if info.version not in served:
                raise ApiFailure(
                    404, "NotFound", "the server could not find the requested resource"
                )
            if info.verb == "create":
                return 201, self._create(info, kind, payload, query)
            if info.verb == "get":
                return 200, copy.deepcopy(self._stored(info))
            if info.verb == "delete":
                return 200, self._delete(info, payload, query)
            if info.verb == "list":
                store = self.workload(info.group, info.resource)
                fields = {
                    "metadata.name": ("metadata", "name"),
                    "metadata.namespace": ("metadata", "namespace"),
                }
                return 200, self._page(
                    store, info.namespace, query, fields, f"{kind}List", info.group, info.version
                )
        if (info.group, info.resource) == ("", "pods") and info.namespace and info.name:
            pod = self.pods.get((info.namespace, info.name))
            if pod is None:
                raise ApiFailure(404, "NotFound", f'pods "{info.name}" not found')
            if info.verb == "get" and not info.subresource:
                return 200, copy.deepcopy(pod)
            if info.verb == "get" and info.subresource == "log":
                return 200, self._log(pod, query)
        return super()._route(info, query, payload, content_type, token)

    def _stored(self, info: RequestInfo) -> dict[str, Any]:
        found = self.workload(info.group, info.resource).get((info.namespace or "", str(info.name)))
        if found is None:
            what = f"{info.resource}.{info.group}" if info.group else info.resource
            raise ApiFailure(404, "NotFound", f'{what} "{info.name}" not found')
        return found

    def _create(
        self, info: RequestInfo, kind: str, payload: Any, query: dict[str, list[str]]
    ) -> dict[str, Any]:
        if not isinstance(payload, dict):
            raise ApiFailure(400, "BadRequest", "the body is not a JSON object")
        obj = copy.deepcopy(payload)
        api_version = f"{info.group}/{info.version}" if info.group else info.version
        if (obj.get("apiVersion"), obj.get("kind")) != (api_version, kind):
            raise ApiFailure(400, "BadRequest", f"the object is not a {api_version} {kind}")
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", info.namespace)
        if meta["namespace"] != info.namespace:
            raise ApiFailure(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the "
                "request",
            )
        if info.namespace not in self.namespaces:
            raise ApiFailure(404, "NotFound", f'namespaces "{info.namespace}" not found')
        name = meta.get("name", "")
        if not name:
            raise ApiFailure(
                422, "Invalid", "metadata.name: Required value: name or generateName is required"
            )
        if not DNS_SUBDOMAIN.fullmatch(name) or len(name) > 253:
            raise ApiFailure(422, "Invalid", f"metadata.name: {name!r} is not a DNS subdomain")
        store = self.workload(info.group, info.resource)
        if (info.namespace, name) in store:
            what = f"{info.resource}.{info.group}" if info.group else info.resource
            raise ApiFailure(409, "AlreadyExists", f'{what} "{name}" already exists')
        self.created.append((kind, name))
        if kind == "MPIJob":
            validate_mpijob(obj)
        else:
            decode_times(obj)
            validate(obj)
            check = {
                "Job": validate_job,
                "Service": validate_service,
                "ConfigMap": validate_config_map,
            }
            problems = check[kind](obj)
            if problems:
                raise ApiFailure(
                    422, "Invalid", f"{kind} {name!r} is invalid: " + "; ".join(problems)
                )
        self._version += 1
        meta.update(
            uid=f"uid-{kind.lower()}-{name}",
            creationTimestamp=now(),
            resourceVersion=str(self._version),
            generation=1,
        )
        if kind == "Job":
            uid = meta["uid"]
            owned = {"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid}
            obj["spec"]["selector"] = {"matchLabels": dict(owned)}
            labels = obj["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})
            labels.update(owned, **{"batch.kubernetes.io/job-name": name, "job-name": name})
            obj["spec"].setdefault("completionMode", "NonIndexed")
            obj["spec"].setdefault("suspend", False)
            obj["status"] = {}
        store[(info.namespace, name)] = obj
        self.stored[(kind, name)] = copy.deepcopy(obj)
        return copy.deepcopy(obj)

    def _delete(
        self, info: RequestInfo, payload: Any, query: dict[str, list[str]]
    ) -> dict[str, Any]:
        obj = self._stored(info)
        policy = (payload or {}).get("propagationPolicy") if isinstance(payload, dict) else None
        policy = policy or query.get("propagationPolicy", [None])[0]
        if policy is None:  # the API's defaults: batch/v1 Jobs orphan their pods
            policy = "Orphan" if (info.group, info.resource) == ("batch", "jobs") else "Background"
        if policy not in ("Orphan", "Background", "Foreground"):
            raise ApiFailure(400, "BadRequest", f"unsupported propagationPolicy {policy!r}")
        self.collect(info.group, info.resource, (info.namespace or "", str(info.name)), policy)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": info.name,
                "group": info.group,
                "kind": info.resource,
                "uid": obj["metadata"]["uid"],
            },
        }

    def collect(self, group: str, plural: str, key: tuple[str, str], policy: str) -> None:
        """Delete an object; its dependents (ownerReferences to its uid) deleted with it
        (Background, Foreground) or left without the reference (Orphan): the garbage
        collector's work, done at once."""
        store = self.pods if (group, plural) == ("", "pods") else self.workload(group, plural)
        obj = store.pop(key, None)
        if obj is None:
            return
        self._version += 1
        self.deleted.append((obj.get("kind", plural), key[1], policy))
        uid = obj["metadata"].get("uid")
        stores = [(("", "pods"), self.pods)] + [(k, self.workload(*k)) for k in WORKLOADS]
        stores.append((("", "events"), self.workload("", "events")))
        for (g, p), other in stores:
            for dependent_key, dependent in list(other.items()):
                refs = dependent["metadata"].get("ownerReferences") or []
                if not any(r.get("uid") == uid for r in refs):
                    continue
                if policy == "Orphan":
                    dependent["metadata"]["ownerReferences"] = [
                        r for r in refs if r.get("uid") != uid
                    ]
                else:
                    self.collect(g, p, dependent_key, "Background")

    def _log(self, pod: dict[str, Any], query: dict[str, list[str]]) -> PlainText:
        names = [c["name"] for c in pod["spec"]["containers"]]
        name = pod["metadata"]["name"]
        container = query.get("container", [""])[0]
        if not container:
            if len(names) > 1:
                raise ApiFailure(
                    400,
                    "BadRequest",
                    f"a container name must be specified for pod {name}, choose one of: {names}",
                )
            container = names[0]
        if container not in names:
            raise ApiFailure(
                400, "BadRequest", f"container {container} is not valid for pod {name}"
            )
        state = next(
            (
                s.get("state") or {}
                for s in (pod.get("status") or {}).get("containerStatuses") or []
                if s["name"] == container
            ),
            {},
        )
        if not state or "waiting" in state:
            reason = (state.get("waiting") or {}).get("reason", "ContainerCreating")
            raise ApiFailure(
                400,
                "BadRequest",
                f'container "{container}" in pod "{name}" is waiting to start: {reason}',
            )
        text = self.logs.get((pod["metadata"]["namespace"], name, container), "")
        tail = query.get("tailLines", [""])[0]
        if tail:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(tail) :]) if int(tail) else ""
        return PlainText(text)

    # -- what the tests read ------------------------------------------------------------------
    def left_behind(self) -> list[str]:
        """Every object of a gpuprobe NCCL test still stored: the test's own, and what the
        MPI Operator and the Job controller made for it."""
        found = []
        stores = [("Pod", self.pods)] + [(kind, self.workload(*k)) for k, kind in WORKLOADS.items()]
        for kind, store in stores:
            for (namespace, name), obj in store.items():
                labels = obj["metadata"].get("labels") or {}
                if (
                    name.startswith("gpuprobe-nccl-")
                    or labels.get("app.kubernetes.io/component") == "mesh-nccl"
                ):
                    found.append(f"{kind} {namespace}/{name}")
        return sorted(found)


def gpu_node_status(gpus: int) -> dict[str, Any]:
    """A GPU node's status as the kubelet reports it, with its device plugin's GPUs."""
    resources = {"cpu": "192", "memory": "2113412928Ki", "pods": "110", GPU: str(gpus)}
    return {"capacity": resources, "allocatable": resources}


# -- the control plane --------------------------------------------------------------------------
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
