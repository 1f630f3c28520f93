"""The API stand-in's workloads, for `gpuprobe mesh --transport nccl`.

`WorkloadStandIn` extends the stand-in (tests/kube_standin.py) with what the NCCL mesh creates
and reads, as strictly as the API server serves it:

- batch/v1 Jobs, core/v1 Services and ConfigMaps, and the MPI Operator's kubeflow.org/v2beta1
  MPIJobs (served only once `install`ed, and then in discovery's `/apis/kubeflow.org/v2beta1`
  resource list, as the CRD makes it): create (201; 409 for a name taken; 404 for a namespace
  that does not exist), get, list, delete (with DeleteOptions' `propagationPolicy`, and the
  API's defaults: Background, but Orphan for batch/v1 Jobs, whose pods then stay);
- every object validated: built-in kinds against Kubernetes' OpenAPI schemas (strict) and the
  API server's own rules beyond them, MPIJobs against the CRD's structural schema
  (tests/kube_validation.py);
- the garbage collector: deleting an owner deletes (Background, Foreground) or orphans (Orphan)
  what its `ownerReferences` name;
- pods by name, and `pods/log` as text/plain (400 for a container that does not exist or has
  not started, as the kubelet answers);
- RBAC from Roles too: `role_rules` reads the Roles and RoleBindings of rendered manifests
  (daemonset/mesh-nccl), each rule valid in its namespace only.

What acts on those objects (the MPI Operator, the Job controller, the scheduler, the kubelets)
is tests/kube_control_plane.py.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from kube_standin import (
    DNS_SUBDOMAIN,
    ApiFailure,
    KubeStandIn,
    PlainText,
    RequestInfo,
    Rule,
    cluster_role_rules,
    decode_times,
    validate,
)
from kube_validation import (
    validate_config_map,
    validate_job,
    validate_mpijob,
    validate_service,
)

MESH_USER = "system:serviceaccount:gpuprobe:gpuprobe-mesh-nccl"
MESH_TOKEN = "mesh-token"
GPU = "nvidia.com/gpu"
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
