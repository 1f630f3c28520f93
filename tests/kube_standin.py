"""A strict stand-in for the Kubernetes API server, for the tests of gpuprobe.kube.

No API server can run on these machines, so the real client library (lightkube) talks to this
HTTPS server instead. It is as strict as the real one where gpuprobe's features reach:

- it serves only the endpoints the features use (others: 404 once authorized, as the API
  server answers for a resource it does not serve);
- it authenticates bearer tokens (401) and authorizes every request against the ClusterRole
  that `kubectl kustomize daemonset/` renders, bound to the agent's ServiceAccount (403);
- it validates every object a request creates or a patch produces against Kubernetes'
  published OpenAPI schemas (kubernetes-validate, strict: unknown fields are errors), and the
  events API's own rules (required fields, lengths, immutable fields on update);
- it applies patches with the API server's semantics for the content type the client sends:
  JSON merge patch (RFC 7386) and strategic merge patch, in which `status.conditions` merge by
  `type` and `spec.taints` (no patch strategy) is replaced whole; a `metadata.resourceVersion`
  in a patch is a precondition (409 Conflict when stale); a status patch changes only the
  status, a patch of the node leaves the status alone;
- it lists pods (`GET /api/v1/pods`, and per namespace) with the API server's field selector
  semantics for pods: only the fields the pod registry makes selectable (`metadata.name`,
  `metadata.namespace`, `spec.nodeName`, `status.phase`, ...; any other is a 400 `field label
  not supported`), `=`, `==` and `!=`; pages by `limit` and `continue`; a PodList as the API
  server writes it (items without `kind`/`apiVersion`), every pod validated on the way in;
- (tests/kube_workloads.py extends it with the NCCL mesh's Jobs, Services, ConfigMaps,
  MPIJobs, pods' logs and Roles' RBAC, validated by tests/kube_validation.py;
  tests/kube_control_plane.py acts on them; tests/kube_dra.py with resource.k8s.io's
  ResourceSlices and DeviceTaintRules, PodDisruptionBudgets and the Eviction API);
- it serves what the audit's cluster view reads: discovery (`/api`, `/apis`, `/apis/GROUP`,
  `/version`, open to every authenticated user as the `system:discovery` role makes them),
  nodes in pages, core/v1 Events (with the event registry's selectable fields),
  PersistentVolumeClaims, ConfigMaps, DaemonSets, StorageClasses, CSIDrivers, and the custom
  resources of groups a test `install`s (ClusterPolicies, PodGroups, JobSets, Kubeflow jobs,
  NodePools, ResourceSlices); a group not installed answers 404, as on a real cluster; every
  list pages by `limit`/`continue` with label and field selectors;
- it knows several identities (`add_user`: a token, a user, the rules the manifests grant
  that user), so the agent's RBAC and the auditor's (daemonset/auditor) are both enforced;
- it can be told to be down (connections refused), slow, to answer 409/429/500, to drip
  every answer a byte at a time, or to send raw answers a broken server or proxy gives (a
  redirect without a content type, an endless body, JSON of another shape).

Error bodies are `Status` objects, as the API server writes them.
"""

from __future__ import annotations

import base64
import bisect
import copy
import json
import re
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kubernetes_validate as kv
import yaml

from certs import Pki, make_pki

KUBERNETES = "1.31.0"
SERVICE_ACCOUNT = "system:serviceaccount:gpuprobe:gpuprobe"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
# Strategic merge keys of the lists gpuprobe's patches reach (k8s.io/api core/v1 types.go:
# NodeStatus.Conditions `patchStrategy:"merge" patchMergeKey:"type"`; NodeSpec.Taints has no
# patch strategy, so it is replaced).
MERGE_KEYS = {("status", "conditions"): "type", ("status", "addresses"): "type"}
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
QUALIFIED = re.compile(r"([a-z0-9.-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
EVENT_MUTABLE = {"series", "metadata"}
# metav1.MicroTime decodes with time.Parse(RFC3339Micro): exactly six fractional digits (a
# plain RFC 3339 second is refused); metav1.Time with RFC 3339.
MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
# The fields a pod's field selector may name (pkg/registry/core/pod/strategy.go,
# PodToSelectableFields, with the metadata fields every resource has), and where they are.
POD_FIELDS: dict[str, tuple[str, ...]] = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
    "spec.nodeName": ("spec", "nodeName"),
    "spec.restartPolicy": ("spec", "restartPolicy"),
    "spec.schedulerName": ("spec", "schedulerName"),
    "spec.serviceAccountName": ("spec", "serviceAccountName"),
    "spec.hostNetwork": ("spec", "hostNetwork"),
    "status.phase": ("status", "phase"),
    "status.podIP": ("status", "podIP"),
    "status.nominatedNodeName": ("status", "nominatedNodeName"),
}

# Every object has these selectable (apimachinery's DefaultClusterScopedAttr and
# DefaultNamespaceScopedAttr); core/v1 Events add theirs (pkg/registry/core/event/strategy.go).
META_FIELDS: dict[str, tuple[str, ...]] = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
}
EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    **META_FIELDS,
    "involvedObject.kind": ("involvedObject", "kind"),
    "involvedObject.namespace": ("involvedObject", "namespace"),
    "involvedObject.name": ("involvedObject", "name"),
    "involvedObject.uid": ("involvedObject", "uid"),
    "involvedObject.apiVersion": ("involvedObject", "apiVersion"),
    "involvedObject.resourceVersion": ("involvedObject", "resourceVersion"),
    "involvedObject.fieldPath": ("involvedObject", "fieldPath"),
    "reason": ("reason",),
    "reportingComponent": ("reportingComponent",),
    "source": ("source", "component"),
    "type": ("type",),
}
# A node's selectable fields (pkg/registry/core/node/strategy.go, NodeToSelectableFields).
NODE_FIELDS: dict[str, tuple[str, ...]] = {
    "metadata.name": ("metadata", "name"),
    "spec.unschedulable": ("spec", "unschedulable"),
}
# The API groups a 1.31 API server serves without any add-on (those gpuprobe reads or writes).
BUILT_IN_GROUPS: dict[str, list[str]] = {
    "apps": ["v1"],
    "batch": ["v1"],
    "events.k8s.io": ["v1"],
    "rbac.authorization.k8s.io": ["v1"],
    "storage.k8s.io": ["v1"],
}
# Groups that custom resources (or an opt-in API, resource.k8s.io) bring: served only once
# `install`ed.
CUSTOM_GROUPS = {
    "nvidia.com",
    "mellanox.com",
    "scheduling.volcano.sh",
    "scheduling.x-k8s.io",
    "jobset.x-k8s.io",
    "kubeflow.org",
    "trainer.kubeflow.org",
    "karpenter.sh",
    "kueue.x-k8s.io",
    "scheduling.run.ai",
    "leaderworkerset.x-k8s.io",
}
# The kinds the cluster view reads beside nodes and pods, by (group, plural).
SERVED: dict[tuple[str, str], str] = {
    ("", "events"): "Event",
    ("", "persistentvolumeclaims"): "PersistentVolumeClaim",
    ("", "configmaps"): "ConfigMap",
    ("apps", "daemonsets"): "DaemonSet",
    ("storage.k8s.io", "storageclasses"): "StorageClass",
    ("storage.k8s.io", "csidrivers"): "CSIDriver",
    ("resource.k8s.io", "resourceslices"): "ResourceSlice",
    ("nvidia.com", "clusterpolicies"): "ClusterPolicy",
    ("mellanox.com", "nicclusterpolicies"): "NicClusterPolicy",
    ("scheduling.volcano.sh", "podgroups"): "PodGroup",
    ("scheduling.x-k8s.io", "podgroups"): "PodGroup",
    ("jobset.x-k8s.io", "jobsets"): "JobSet",
    ("kubeflow.org", "pytorchjobs"): "PyTorchJob",
    ("kubeflow.org", "mpijobs"): "MPIJob",
    ("karpenter.sh", "nodepools"): "NodePool",
}
PLURALS = {kind: plural for (_, plural), kind in SERVED.items()}
AUDITOR = "system:serviceaccount:gpuprobe:gpuprobe-auditor"


def served_key(path: str, query: dict[str, list[str]]) -> str:
    """The key of `Faults.served` for a request: its path and selectors (not its page)."""
    picked = [f"{k}={query[k][0]}" for k in ("labelSelector", "fieldSelector") if k in query]
    return path + ("?" + "&".join(picked) if picked else "")


def _group_document(group: str, versions: list[str]) -> dict[str, Any]:
    """One APIGroup of the discovery document."""
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "name": group, "versions": listed, "preferredVersion": listed[0]}


@dataclass(frozen=True)
class PlainText:
    """An answer sent as `text/plain` (a pod's log), not JSON."""

    text: str


class ApiFailure(Exception):
    """An error response: HTTP code, Status reason and message."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        # The Status's `details` (causes, retryAfterSeconds) where the API server sends some.
        self.details: dict[str, Any] | None = None


@dataclass
class Rule:
    """One PolicyRule of a ClusterRole (any namespace), or of a Role (`namespace`: only there)."""

    groups: set[str]
    resources: set[str]
    verbs: set[str]
    names: set[str]
    namespace: str | None = None

    def allows(
        self, group: str, resource: str, verb: str, name: str | None, namespace: str | None = None
    ) -> bool:
        """RBAC's matching: namespace (a Role's), group, resource (with its subresource), verb,
        resourceNames."""
        return (
            (self.namespace is None or self.namespace == namespace)
            and (group in self.groups or "*" in self.groups)
            and (resource in self.resources or "*" in self.resources)
            and (verb in self.verbs or "*" in self.verbs)
            and (not self.names or (name is not None and name in self.names))
        )


def cluster_role_rules(objects: list[dict[str, Any]], user: str = SERVICE_ACCOUNT) -> list[Rule]:
    """The rules the rendered manifests grant a ServiceAccount (the agent's by default)
    through a ClusterRoleBinding (only those: an unbound role grants nothing)."""
    roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterRole"}
    rules: list[Rule] = []
    for binding in (o for o in objects if o["kind"] == "ClusterRoleBinding"):
        subjects = binding.get("subjects") or []
        bound = any(
            s["kind"] == "ServiceAccount"
            and f"system:serviceaccount:{s['namespace']}:{s['name']}" == user
            for s in subjects
        )
        role = roles.get(binding["roleRef"]["name"])
        if bound and role is not None and binding["roleRef"]["kind"] == "ClusterRole":
            for r in role.get("rules") or []:
                rules.append(
                    Rule(
                        set(r.get("apiGroups") or []),
                        set(r.get("resources") or []),
                        set(r.get("verbs") or []),
                        set(r.get("resourceNames") or []),
                    )
                )
    return rules


@dataclass(frozen=True)
class RequestInfo:
    """What the API server's request-info resolver makes of a path (apiserver/pkg/endpoints/
    request/requestinfo.go), for authorization."""

    verb: str
    group: str
    version: str
    namespace: str | None
    resource: str
    subresource: str
    name: str | None

    @property
    def rbac_resource(self) -> str:
        """`resource` or `resource/subresource`, as RBAC rules name them."""
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def request_info(method: str, path: str) -> RequestInfo:
    """The request's attributes; raises ApiFailure 404 for a path that is no resource."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise ApiFailure(404, "NotFound", "the server could not find the requested resource")
    namespace = None
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    if not rest:
        raise ApiFailure(404, "NotFound", "the server could not find the requested resource")
    resource, name = rest[0], rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else ""
    verb = {
        "GET": "get" if name else "list",
        "POST": "create",
        "PATCH": "patch",
        "PUT": "update",
        "DELETE": "delete" if name else "deletecollection",
    }.get(method, method.lower())
    return RequestInfo(verb, group, version, namespace, resource, subresource, name)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def strategic_merge(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    """Strategic merge patch for the types above: maps merge, lists with a merge key merge by
    it (a `null` value deletes a key), other lists are replaced."""
    if not isinstance(patch, dict):
        if isinstance(patch, list) and path in MERGE_KEYS and isinstance(target, list):
            key = MERGE_KEYS[path]
            merged = [copy.deepcopy(t) for t in target]
            for item in patch:
                if not isinstance(item, dict) or key not in item:
                    raise ApiFailure(
                        422, "Invalid", f"{'.'.join(path)}: each item needs its merge key {key!r}"
                    )
                at = next((i for i, t in enumerate(merged) if t.get(key) == item[key]), None)
                if at is None:
                    merged.append(strategic_merge({}, item, (*path, "[]")))
                else:
                    merged[at] = strategic_merge(merged[at], item, (*path, "[]"))
            return merged
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            raise ApiFailure(400, "BadRequest", f"unsupported patch directive {key!r}")
        if value is None:
            out.pop(key, None)
        else:
            out[key] = strategic_merge(out.get(key), value, (*path, key))
    return out


def validate(obj: dict[str, Any]) -> None:
    """Kubernetes' OpenAPI schema for the object's kind, strictly; 422 like the API server."""
    try:
        kv.validate(obj, KUBERNETES, strict=True)
    except kv.ValidationError as exc:
        raise ApiFailure(422, "Invalid", f"{obj.get('kind')} is invalid: {exc.message}") from None
    except kv.utils.SchemaNotFoundError as exc:
        raise ApiFailure(400, "BadRequest", str(exc)) from None


def decode_times(obj: dict[str, Any]) -> None:
    """The API server decodes time fields before anything else: a MicroTime without its six
    fractional digits, or a Time that is not RFC 3339, is a 400 (the decoder's error)."""
    micro = [obj.get("eventTime"), (obj.get("series") or {}).get("lastObservedTime")]
    times = [
        c.get(k)
        for c in (obj.get("status") or {}).get("conditions") or []
        for k in ("lastHeartbeatTime", "lastTransitionTime")
    ]
    times += [t.get("timeAdded") for t in (obj.get("spec") or {}).get("taints") or []]
    status = obj.get("status") or {}
    times += [status.get("startTime"), (obj.get("metadata") or {}).get("creationTimestamp")]
    for key in ("containerStatuses", "initContainerStatuses"):  # a Pod's container states
        for container in status.get(key) or []:
            for state in (container.get("state") or {}, container.get("lastState") or {}):
                for detail in state.values():
                    times += [detail.get("startedAt"), detail.get("finishedAt")]
    for value, layout, name in [(v, MICRO_TIME, "RFC3339Micro") for v in micro] + [
        (v, TIME, "RFC3339") for v in times
    ]:
        if value is not None and not (isinstance(value, str) and layout.fullmatch(value)):
            raise ApiFailure(
                400, "BadRequest", f"parsing time {json.dumps(value)} as {name}: cannot parse"
            )


def validate_event(event: dict[str, Any], old: dict[str, Any] | None = None) -> None:
    """The events API's own rules (k8s pkg/apis/core/validation/events.go, v1)."""
    problems: list[str] = []
    name = event.get("metadata", {}).get("name", "")
    if not DNS_SUBDOMAIN.fullmatch(name) or len(name) > 253:
        problems.append(f"metadata.name: {name!r} is not a DNS subdomain")
    for key in ("eventTime", "reportingController", "reportingInstance", "action", "reason"):
        if not event.get(key):
            problems.append(f"{key}: Required value")
    for key in ("reportingInstance", "action", "reason"):
        if len(str(event.get(key, ""))) > 128:
            problems.append(f"{key}: can have at most 128 characters")
    if not QUALIFIED.fullmatch(str(event.get("reportingController", ""))):
        problems.append("reportingController: not a qualified name")
    if event.get("type") not in ("Normal", "Warning"):
        problems.append(f"type: Unsupported value: {event.get('type')!r}")
    if len(str(event.get("note", "")).encode()) > 1024:
        problems.append("note: can have at most 1024 bytes")
    regarding = event.get("regarding") or {}
    if not regarding.get("kind") or not regarding.get("name"):
        problems.append("regarding: Required value")
    if not regarding.get("namespace") and event["metadata"].get("namespace") not in (
        "default",
        "kube-system",
    ):
        problems.append("metadata.namespace: events of cluster-scoped objects go to default")
    series = event.get("series")
    if series is not None and (series.get("count", 0) < 2 or not series.get("lastObservedTime")):
        problems.append("series: count must be at least 2, with lastObservedTime")
    if old is not None:
        for key in set(old) | set(event):
            if key not in EVENT_MUTABLE and old.get(key) != event.get(key):
                problems.append(f"{key}: field is immutable")
    if problems:
        raise ApiFailure(422, "Invalid", f"Event {name!r} is invalid: " + "; ".join(problems))


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Node object as a kubelet registers it (the fields gpuprobe reads and writes)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
        },
        "spec": {},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2026-12-01T00:00:00Z",
                    "lastTransitionTime": "2026-12-01T00:00:00Z",
                }
            ]
        },
    }


@dataclass
class Faults:
    """What the stand-in is told to do wrong."""

    delay: float = 0.0  # seconds before each answer
    answers: list[int] = field(default_factory=list)  # forced status codes, next requests first
    # Another writer's change, made just before the next node patch is applied (so a
    # precondition the client read a moment ago goes stale for real).
    interleave: Callable[[], None] | None = None
    # A slow-drip server: each answer (status line, headers, body) sent one byte every this
    # many seconds, each byte on time, so only a bound on the whole request ends it.
    drip: float = 0.0
    # Answers a broken or hostile server (or a proxy in front of one) gives, sent as they are
    # for the next requests, after authentication: see `RawAnswer`.
    raw: list[RawAnswer] = field(default_factory=list)
    # Documents answered as they are (200, JSON) to every authenticated GET of a path,
    # whatever the query: what a broken controller, a conversion webhook or a proxy in front
    # of the API server can hand a client that trusts the schema.
    served: dict[str, Any] = field(default_factory=dict)


@dataclass
class RawAnswer:
    """An answer sent byte for byte: status, headers (none added: no Content-Type unless
    given), and a body, whole or as chunks made on the way (`Transfer-Encoding: chunked`, no
    length announced: a client learns the size only by reading it; or, with a
    `Content-Length` among the headers, that length announced and the chunks sent plain)."""

    status: int
    headers: dict[str, str]
    body: bytes | Callable[[], Iterator[bytes]] = b""


class KubeStandIn:
    """The API server stand-in: nodes, events, tokens, RBAC, faults, and what it was asked."""

    def __init__(self, directory: Path, rules: list[Rule]) -> None:
        self.pki: Pki = make_pki(directory)
        self.directory = directory
        self.rules = rules
        self.tokens: set[str] = {"agent-token"}
        # Who each token is, and what RBAC grants them (the agent's by default).
        self.users: dict[str, tuple[str, list[Rule]]] = {"agent-token": (SERVICE_ACCOUNT, rules)}
        # Objects of the other kinds (the cluster view's), by (group, plural), then by
        # (namespace, name) ("" for cluster-scoped); and the API groups served beside core.
        self.objects: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = {}
        self.groups: dict[str, list[str]] = dict(BUILT_IN_GROUPS)
        self.nodes: dict[str, dict[str, Any]] = {}
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}  # by (namespace, name)
        self.faults = Faults()
        self.requests: list[tuple[float, str, str, int]] = []  # (arrival, method, path, code)
        self.writes: list[tuple[str, str, str]] = []  # (token, resource, name) of node writes
        self.raw_sent = 0  # body bytes of chunked raw answers sent (a client stops reading)
        self._version = 100
        self._sorted: tuple[tuple[int, int, int], list[tuple[str, str]]] | None = None
        self._connections: set[socket.socket] = set()
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(self.pki.server_cert, self.pki.server_key)

    # -- set-up ---------------------------------------------------------------------------
    def add_user(self, token: str, user: str, rules: list[Rule]) -> None:
        """Another identity: its bearer token, its user name, what RBAC grants it."""
        self.tokens.add(token)
        self.users[token] = (user, rules)

    def install(self, group: str, versions: list[str]) -> None:
        """Serve an API group (a CRD's, or resource.k8s.io): discovery lists it and its
        collections answer; a group not installed answers 404, as on a real cluster."""
        with self._lock:
            self.groups[group] = versions

    def add_object(self, obj: dict[str, Any]) -> None:
        """Store an object of a kind the cluster view reads (a DaemonSet, a StorageClass, a
        PodGroup, ...), as `kubectl get -o json` prints it. Built-in kinds are validated
        against Kubernetes' schemas, strictly; a custom resource must name a served group
        and version and carry a valid name."""
        obj = copy.deepcopy(obj)
        group, _, version = obj["apiVersion"].rpartition("/")
        plural = PLURALS.get(obj["kind"])
        if plural is None:
            raise ApiFailure(400, "BadRequest", f"the stand-in serves no {obj['kind']}")
        if group in CUSTOM_GROUPS or group == "resource.k8s.io":
            if version not in self.groups.get(group, []):
                raise ApiFailure(404, "NotFound", f"{obj['apiVersion']} is not served")
            name = obj.get("metadata", {}).get("name", "")
            if not DNS_SUBDOMAIN.fullmatch(name):
                raise ApiFailure(422, "Invalid", f"metadata.name: {name!r} is not a DNS subdomain")
        else:
            decode_times(obj)
            validate(obj)
        meta = obj["metadata"]
        with self._lock:
            self._version += 1
            meta["resourceVersion"] = str(self._version)
            self.objects.setdefault((group, plural), {})[
                (meta.get("namespace", ""), meta["name"])
            ] = obj

    def add_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        status: dict[str, Any] | None = None,
        annotations: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        """Register a node (extra: `taints=[...]` and the like, under spec; `status` merged
        into the status: capacity, allocatable, nodeInfo)."""
        obj = node(name, labels)
        obj["spec"].update(extra)
        obj["status"].update(status or {})
        if annotations:
            obj["metadata"]["annotations"] = annotations
        validate(obj)
        with self._lock:
            self._store_node(obj)

    def add_pod(self, pod: dict[str, Any]) -> None:
        """Store a Pod object (as `kubectl get pod -o json` prints it), validated strictly."""
        obj = copy.deepcopy(pod)
        obj.setdefault("apiVersion", "v1")
        obj.setdefault("kind", "Pod")
        decode_times(obj)
        validate(obj)
        meta = obj["metadata"]
        with self._lock:
            self._version += 1
            meta["resourceVersion"] = str(self._version)
            self.pods[(meta.get("namespace", "default"), meta["name"])] = obj

    def _store_node(self, obj: dict[str, Any]) -> None:
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)
        obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}")
        obj["metadata"].setdefault("creationTimestamp", "2026-12-01T00:00:00Z")
        self.nodes[obj["metadata"]["name"]] = obj

    def touch(self, name: str, taints: list[dict[str, Any]] | None = None) -> None:
        """Another writer changes the node (its resourceVersion moves; taints if given)."""
        with self._lock:
            obj = copy.deepcopy(self.nodes[name])
            if taints is not None:
                obj["spec"]["taints"] = taints
            self._store_node(obj)

    def kubeconfig(self, token: str = "agent-token") -> Path:
        """A kubeconfig file for this server (the agent's token, the stand-in's CA)."""
        path = self.directory / f"kubeconfig-{token}"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "standin",
                            "cluster": {
                                "server": f"https://127.0.0.1:{self.port}",
                                "certificate-authority": self.pki.ca,
                            },
                        }
                    ],
                    "users": [{"name": "agent", "user": {"token": token}}],
                    "contexts": [
                        {"name": "standin", "context": {"cluster": "standin", "user": "agent"}}
                    ],
                    "current-context": "standin",
                }
            )
        )
        return path

    def service_account_dir(self, token: str = "agent-token") -> Path:
        """A pod's service-account directory (token, ca.crt, namespace) for this server."""
        account = self.directory / "serviceaccount"
        account.mkdir(exist_ok=True)
        (account / "token").write_text(token)
        (account / "ca.crt").write_text(Path(self.pki.ca).read_text())
        (account / "namespace").write_text("gpuprobe")
        return account

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Listen on loopback (the same port again after `down`)."""
        stand_in = self

        class Handler(_Handler):
            server_state = stand_in

        server = _Server(("127.0.0.1", self.port), Handler, bind_and_activate=False)
        server.allow_reuse_address = True
        server.daemon_threads = True
        server.request_queue_size = 256
        server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.server_bind()
        server.server_activate()
        server.socket = self._context.wrap_socket(
            server.socket, server_side=True, do_handshake_on_connect=False
        )
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop listening: connections are refused until `start`."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:  # and the connections clients keep open: a dead server's die too
            for connection in list(self._connections):
                with suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
            self._connections.clear()

    @contextmanager
    def down(self) -> Iterator[None]:
        """The API server is unreachable for the block."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def per_second(self) -> dict[int, int]:
        """Requests answered per whole second since the first."""
        times = [t for t, *_ in self.requests]
        if not times:
            return {}
        first = min(times)
        counts: dict[int, int] = {}
        for t in times:
            counts[int(t - first)] = counts.get(int(t - first), 0) + 1
        return counts

    # -- the API ----------------------------------------------------------------------------
    def handle(
        self, method: str, path: str, query: dict[str, list[str]], headers: Any, body: bytes
    ) -> tuple[int, dict[str, Any]]:
        """One request: authenticate, authorize, fault, route."""
        auth = headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or auth[len("Bearer ") :] not in self.tokens:
            raise ApiFailure(401, "Unauthorized", "Unauthorized")
        token = auth[len("Bearer ") :]
        if method == "GET" and (key := served_key(path, query)) in self.faults.served:
            return 200, self.faults.served[key]
        user, rules = self.users.get(token, (SERVICE_ACCOUNT, self.rules))
        if method == "GET" and (found := self._discovery(path)) is not None:
            return 200, found  # system:discovery grants these to every authenticated user
        info = request_info(method, path)
        if not any(
            r.allows(info.group, info.rbac_resource, info.verb, info.name, info.namespace)
            for r in rules
        ):
            where = (
                f' in the namespace "{info.namespace}"'
                if info.namespace
                else " at the cluster scope"
            )
            # The API server names the object when there is one ("nodes \"n\" is
            # forbidden"), and leaves the name out for a list or a create; the resource is
            # qualified by its group (apierrors.NewForbidden: "jobs.batch is forbidden"), its
            # subresource only in the reason.
            named = f' "{info.name}"' if info.name else ""
            qualified = f"{info.resource}.{info.group}" if info.group else info.resource
            raise ApiFailure(
                403,
                "Forbidden",
                f'{qualified}{named} is forbidden: User "{user}" cannot {info.verb} '
                f'resource "{info.rbac_resource}" in API group "{info.group}"{where}',
            )
        if self.faults.delay:
            time.sleep(self.faults.delay)
        with self._lock:
            forced = self.faults.answers.pop(0) if self.faults.answers else None
        if forced is not None:
            reasons = {409: "Conflict", 429: "TooManyRequests", 500: "InternalError"}
            raise ApiFailure(forced, reasons.get(forced, "InternalError"), f"forced {forced}")
        payload = json.loads(body) if body else None
        content_type = headers.get("Content-Type", "").split(";")[0].strip()
        with self._lock:
            return self._route(info, query, payload, content_type, token)

    def _route(
        self,
        info: RequestInfo,
        query: dict[str, list[str]],
        payload: Any,
        content_type: str,
        token: str,
    ) -> tuple[int, dict[str, Any]]:
        key = (info.group, info.version, info.resource, info.verb, info.subresource)
        if key == ("", "v1", "nodes", "get", "") and info.namespace is None:
            return 200, copy.deepcopy(self._node(info.name))
        if key == ("", "v1", "nodes", "list", "") and info.namespace is None:
            return 200, self._list_nodes(query)
        if key[:4] == ("", "v1", "nodes", "patch") and info.subresource in ("", "status"):
            self.writes.append((token, info.rbac_resource, str(info.name)))
            interleave = self.faults.interleave if not info.subresource else None
            if interleave is not None:
                self.faults.interleave = None
                interleave()
            return 200, self._patch_node(str(info.name), info.subresource, payload, content_type)
        if key == ("", "v1", "pods", "list", ""):
            return 200, self._list_pods(info.namespace, query)
        if (info.group, info.resource) in SERVED and info.verb in ("list", "get"):
            return 200, self._read_object(info, query)
        if key == ("events.k8s.io", "v1", "events", "create", "") and info.namespace:
            return 201, self._create_event(info.namespace, payload)
        if key == ("events.k8s.io", "v1", "events", "patch", "") and info.namespace:
            return 200, self._patch_event(info.namespace, str(info.name), payload, content_type)
        raise ApiFailure(404, "NotFound", "the server could not find the requested resource")

    def _node(self, name: str | None) -> dict[str, Any]:
        if name not in self.nodes:
            raise ApiFailure(404, "NotFound", f'nodes "{name}" not found')
        return self.nodes[name]

    def _list_nodes(self, query: dict[str, list[str]]) -> dict[str, Any]:
        """A NodeList, in name order, a page of `limit` at a time."""
        store = {("", name): n for name, n in self.nodes.items()}
        return self._page(store, None, query, NODE_FIELDS, "NodeList", "", "v1")

    def _discovery(self, path: str) -> dict[str, Any] | None:
        """The discovery documents (/api, /apis, /apis/GROUP, /version); None for any other
        path."""
        path = path.rstrip("/")
        if path == "/version":
            return {"major": "1", "minor": KUBERNETES.split(".")[1], "gitVersion": f"v{KUBERNETES}"}
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if path == "/apis":
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [_group_document(g, v) for g, v in sorted(self.groups.items())],
            }
        parts = path.split("/")
        if len(parts) == 3 and parts[1] == "apis":
            if parts[2] not in self.groups:
                raise ApiFailure(
                    404, "NotFound", "the server could not find the requested resource"
                )
            return {"apiVersion": "v1", **_group_document(parts[2], self.groups[parts[2]])}
        return None

    def _read_object(self, info: RequestInfo, query: dict[str, list[str]]) -> dict[str, Any]:
        """A get or a list of a kind the cluster view reads: 404 when its group or version
        is not served, as the API server answers for a resource it does not know."""
        served = self.groups.get(info.group, ["v1"]) if info.group else ["v1"]
        if info.version not in served or info.subresource:
            raise ApiFailure(404, "NotFound", "the server could not find the requested resource")
        store = self.objects.get((info.group, info.resource), {})
        kind = SERVED[(info.group, info.resource)]
        if info.verb == "get":
            found = store.get((info.namespace or "", str(info.name)))
            if found is None:
                what = f"{info.resource}.{info.group}" if info.group else info.resource
                raise ApiFailure(404, "NotFound", f'{what} "{info.name}" not found')
            return copy.deepcopy(found)
        fields = EVENT_FIELDS if kind == "Event" else META_FIELDS
        return self._page(
            store, info.namespace, query, fields, f"{kind}List", info.group, info.version
        )

    def _list_pods(self, namespace: str | None, query: dict[str, list[str]]) -> dict[str, Any]:
        """A PodList: the pods the namespace, label and field selectors pick, in key order,
        a page of `limit` at a time (`continue` names where the next page starts)."""
        return self._page(self.pods, namespace, query, POD_FIELDS, "PodList", "", "v1")

    def _sorted_keys(self, store: dict[tuple[str, str], dict[str, Any]]) -> list[tuple[str, str]]:
        """The store's keys in order, kept while nothing is added (a page of a big list
        would sort it again otherwise)."""
        mark = (id(store), len(store), self._version)
        if self._sorted is None or self._sorted[0] != mark:
            self._sorted = (mark, sorted(store))
        return self._sorted[1]

    def _page(
        self,
        store: dict[tuple[str, str], dict[str, Any]],
        namespace: str | None,
        query: dict[str, list[str]],
        selectable: dict[str, tuple[str, ...]],
        list_kind: str,
        group: str,
        version: str,
    ) -> dict[str, Any]:
        """A list: the objects the namespace, label and field selectors pick, in key order,
        a page of `limit` at a time (`continue` names where the next page starts)."""
        labels = query.get("labelSelector", [""])[0]
        selector = query.get("fieldSelector", [""])[0]
        terms = _field_terms(selector, labels, selectable, list_kind)
        limit_text = query.get("limit", ["0"])[0]
        if not limit_text.isdecimal():
            raise ApiFailure(400, "BadRequest", f"invalid limit {limit_text!r}")
        limit = int(limit_text)
        start = _continue_key(query.get("continue", [""])[0])
        keys = self._sorted_keys(store)
        at = bisect.bisect_right(keys, tuple(start)) if start is not None else 0
        chosen = []
        # In key order from where the page starts, until one more than the limit is found
        # (then there is a next page): a page costs what it scans, not the whole store.
        for key in keys[at:]:
            obj = store[key]
            if (
                (namespace is None or key[0] == namespace)
                and _selects(labels, obj)
                and all(_field_matches(obj, selectable, *t) for t in terms)
            ):
                chosen.append(obj)
                if limit and len(chosen) > limit:
                    break
        meta: dict[str, Any] = {"resourceVersion": str(self._version)}
        if limit and len(chosen) > limit:
            chosen = chosen[:limit]
            last = chosen[-1]["metadata"]
            key = [last.get("namespace", "default" if store is self.pods else ""), last["name"]]
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps({"v": "meta.k8s.io/v1", "rv": self._version, "start": key}).encode()
            ).decode()
        items = []
        for obj in chosen:
            item = copy.deepcopy(obj)
            if not group or group in BUILT_IN_GROUPS:  # a built-in list's items carry neither
                item.pop("kind", None), item.pop("apiVersion", None)
            items.append(item)
        api_version = f"{group}/{version}" if group else version
        return {"kind": list_kind, "apiVersion": api_version, "metadata": meta, "items": items}

    def _patch(self, old: dict[str, Any], payload: Any, content_type: str) -> dict[str, Any]:
        if not isinstance(payload, dict):
            raise ApiFailure(400, "BadRequest", "the patch is not a JSON object")
        if content_type == MERGE:
            new = merge_patch(old, payload)
        elif content_type == STRATEGIC:
            new = strategic_merge(old, payload)
        else:
            raise ApiFailure(415, "UnsupportedMediaType", f"the patch type {content_type!r}")
        wanted = payload.get("metadata", {}).get("resourceVersion")
        if wanted is not None and wanted != old["metadata"].get("resourceVersion"):
            raise ApiFailure(
                409,
                "Conflict",
                f"Operation cannot be fulfilled on {old['kind'].lower()}s "
                f'"{old["metadata"]["name"]}": the object has been modified; please apply your '
                "changes to the latest version and try again",
            )
        for immutable in ("name", "uid", "namespace", "creationTimestamp"):
            if new["metadata"].get(immutable) != old["metadata"].get(immutable):
                raise ApiFailure(422, "Invalid", f"metadata.{immutable}: field is immutable")
        new.setdefault("apiVersion", old["apiVersion"])
        new.setdefault("kind", old["kind"])
        if (new["apiVersion"], new["kind"]) != (old["apiVersion"], old["kind"]):
            raise ApiFailure(400, "BadRequest", "apiVersion and kind cannot change")
        return new

    def _patch_node(
        self, name: str, subresource: str, payload: Any, content_type: str
    ) -> dict[str, Any]:
        old = self._node(name)
        new = self._patch(old, payload, content_type)
        # The status subresource writes only the status; the node itself everything else.
        if subresource == "status":
            result = copy.deepcopy(old)
            result["status"] = new.get("status", {})
        else:
            result = new
            result["status"] = copy.deepcopy(old.get("status", {}))
        result["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        decode_times(result)
        validate(result)
        for condition in result.get("status", {}).get("conditions") or []:
            if condition.get("status") not in ("True", "False", "Unknown"):
                raise ApiFailure(422, "Invalid", f"condition status {condition.get('status')!r}")
        for taint in result.get("spec", {}).get("taints") or []:  # validateNodeTaints
            if taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                raise ApiFailure(422, "Invalid", f"taint effect {taint.get('effect')!r}")
            key, value = str(taint.get("key", "")), str(taint.get("value", ""))
            if not QUALIFIED.fullmatch(key) or len(key.rsplit("/", 1)[-1]) > 63:
                raise ApiFailure(422, "Invalid", f"taint key {key!r}: not a qualified name")
            if value and (not LABEL_VALUE.fullmatch(value) or len(value) > 63):
                raise ApiFailure(422, "Invalid", f"taint value {value!r}: not a label value")
        keys = [(t["key"], t["effect"]) for t in result.get("spec", {}).get("taints") or []]
        if len(keys) != len(set(keys)):
            raise ApiFailure(422, "Invalid", "spec.taints: Duplicate value")
        if result != old:
            self._store_node(result)
        return copy.deepcopy(self.nodes[name])

    def _create_event(self, namespace: str, payload: Any) -> dict[str, Any]:
        if not isinstance(payload, dict):
            raise ApiFailure(400, "BadRequest", "the body is not a JSON object")
        event = copy.deepcopy(payload)
        event.setdefault("metadata", {}).setdefault("namespace", namespace)
        if event["metadata"]["namespace"] != namespace:
            raise ApiFailure(400, "BadRequest", "the namespace of the object does not match")
        decode_times(event)
        validate(event)
        validate_event(event)
        key = (namespace, event["metadata"].get("name", ""))
        if key in self.events:
            raise ApiFailure(
                409, "AlreadyExists", f'events.events.k8s.io "{key[1]}" already exists'
            )
        self._version += 1
        event["metadata"]["resourceVersion"] = str(self._version)
        self.events[key] = event
        return copy.deepcopy(event)

    def _patch_event(
        self, namespace: str, name: str, payload: Any, content_type: str
    ) -> dict[str, Any]:
        old = self.events.get((namespace, name))
        if old is None:
            raise ApiFailure(404, "NotFound", f'events.events.k8s.io "{name}" not found')
        new = self._patch(old, payload, content_type)
        decode_times(new)
        validate(new)
        validate_event(new, old)
        self._version += 1
        new["metadata"]["resourceVersion"] = str(self._version)
        self.events[(namespace, name)] = new
        return copy.deepcopy(new)

    # -- what the tests read ----------------------------------------------------------------
    def conditions(self, name: str) -> dict[str, dict[str, Any]]:
        """The node's conditions by type."""
        with self._lock:
            return {c["type"]: dict(c) for c in self.nodes[name]["status"].get("conditions", [])}

    def taints(self, name: str) -> list[dict[str, Any]]:
        """The node's taints."""
        with self._lock:
            return copy.deepcopy(self.nodes[name]["spec"].get("taints") or [])

    def node_events(self, name: str) -> list[dict[str, Any]]:
        """The events about a node, first occurrence first."""
        with self._lock:
            found = [e for e in self.events.values() if e["regarding"]["name"] == name]
        return sorted(found, key=lambda e: str(e["eventTime"]))


def _selects(selector: str, obj: dict[str, Any]) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if term.startswith("!"):
            ok = term[1:] not in labels
        elif "!=" in term:
            k, v = term.split("!=", 1)
            ok = labels.get(k) != v
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            ok = labels.get(k) == v
        else:
            ok = term in labels
        if not ok:
            return False
    return True


def _field_terms(
    selector: str,
    labels: str,
    selectable: dict[str, tuple[str, ...]] = POD_FIELDS,
    list_kind: str = "PodList",
) -> list[tuple[str, bool, str]]:
    """A field selector's terms (field, equal?, value); 400 for a malformed one or a field
    the kind's registry does not make selectable, as the API server answers."""
    terms = []
    for term in filter(None, (t.strip() for t in selector.split(","))):
        match = re.fullmatch(r"([^=!]+?)(==|=|!=)(.*)", term)
        if match is None:
            raise ApiFailure(
                400, "BadRequest", f"invalid selector: '{selector}'; can't understand '{term}'"
            )
        name, op, value = match.groups()
        if name not in selectable:
            resource = list_kind.removesuffix("List").lower() + "s"
            raise ApiFailure(
                400,
                "BadRequest",
                f'Unable to find "/v1, Resource={resource}" that match label selector "{labels}", '
                f'field selector "{selector}": field label not supported: {name}',
            )
        terms.append((name, op != "!=", value))
    return terms


def _field_matches(
    obj: dict[str, Any], selectable: dict[str, tuple[str, ...]], name: str, equal: bool, value: str
) -> bool:
    where: Any = obj
    for part in selectable[name]:
        where = where.get(part) if isinstance(where, dict) else None
    if isinstance(where, bool):
        where = "true" if where else "false"
    actual = "" if where is None else str(where)
    return (actual == value) is equal


def _continue_key(token: str) -> list[str] | None:
    """Where a `continue` token says the next page starts; 400 for one the server did not
    write."""
    if not token:
        return None
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
        start = decoded["start"]
        if decoded.get("v") != "meta.k8s.io/v1" or not isinstance(start, list):
            raise ValueError(token)
        return [str(part) for part in start]
    except (ValueError, KeyError, TypeError):
        raise ApiFailure(
            400, "BadRequest", "continue key is not valid: incorrect encoded start resourceVersion"
        ) from None


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (timed out, closed) is no error of the server's."""
        import sys

        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server_state: KubeStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the tests read `requests`

    def setup(self) -> None:
        super().setup()
        with self.server_state._lock:
            self.server_state._connections.add(self.connection)

    def finish(self) -> None:
        with self.server_state._lock:
            self.server_state._connections.discard(self.connection)
        with suppress(OSError):
            super().finish()

    def _send(self, data: bytes) -> None:
        drip = self.server_state.faults.drip
        if not drip:
            self.wfile.write(data)
            return
        for i in range(len(data)):
            self.wfile.write(data[i : i + 1])
            self.wfile.flush()
            time.sleep(drip)

    def _send_raw(self, raw: RawAnswer) -> None:
        """A raw answer; a client that hangs up on a long one ends it."""
        state = self.server_state
        lines = [f"HTTP/1.1 {raw.status} {self.responses.get(raw.status, ('',))[0]}"]
        lines += [f"{name}: {value}" for name, value in raw.headers.items()]
        if isinstance(raw.body, bytes):
            lines.append(f"Content-Length: {len(raw.body)}")
            self._send(("\r\n".join(lines) + "\r\n\r\n").encode() + raw.body)
            return
        chunked = "Content-Length" not in raw.headers  # else the length given is announced
        if chunked:
            lines.append("Transfer-Encoding: chunked")
        try:
            self._send(("\r\n".join(lines) + "\r\n\r\n").encode())
            for chunk in raw.body():
                self._send(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
                with state._lock:
                    state.raw_sent += len(chunk)
            if chunked:
                self._send(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True

    def _serve(self) -> None:
        state = self.server_state
        arrived = time.monotonic()  # when the request came, not when its answer went
        url = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        auth = self.headers.get("Authorization", "")
        with state._lock:
            raw = state.faults.raw.pop(0) if state.faults.raw else None
        if raw is not None and auth.removeprefix("Bearer ") in state.tokens:
            with state._lock:
                state.requests.append((arrived, self.command, url.path, raw.status))
            self._send_raw(raw)
            return
        try:
            code, answer = state.handle(
                self.command, url.path, urllib.parse.parse_qs(url.query), self.headers, body
            )
        except ApiFailure as failure:
            code = failure.code
            answer = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": failure.message,
                "reason": failure.reason,
                "code": failure.code,
            }
            if failure.details is not None:
                answer["details"] = failure.details
        except json.JSONDecodeError as exc:
            code = 400
            answer = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"invalid JSON: {exc}",
                "reason": "BadRequest",
                "code": 400,
            }
        # A pod's log is plain text (pods/log); everything else JSON.
        text = isinstance(answer, PlainText)
        data = (
            answer.text.encode()
            if isinstance(answer, PlainText)
            else answer
            if isinstance(answer, bytes)  # a served document's bytes, as they are
            else json.dumps(answer).encode()
        )
        with state._lock:
            state.requests.append((arrived, self.command, url.path, code))
        head = [
            f"HTTP/1.1 {code} {self.responses.get(code, ('',))[0]}",
            f"Date: {self.date_time_string()}",
            f"Content-Type: {'text/plain' if text else 'application/json'}",
            f"Content-Length: {len(data)}",
        ]
        # A throttled request is told when to come back; the eviction registry's 429 (a
        # disruption budget, `details` without retryAfterSeconds) is not.
        details = answer.get("details") if isinstance(answer, dict) else None
        if code == 429 and (details is None or details.get("retryAfterSeconds")):
            head.append(f"Retry-After: {(details or {}).get('retryAfterSeconds', 1)}")
        with suppress(OSError):  # a client that gave up on a slow answer
            self._send(("\r\n".join(head) + "\r\n\r\n").encode() + data)

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve


def manifest_rules() -> list[Rule]:
    """The rules `kubectl kustomize daemonset/` grants the agent."""
    from deployment import objects

    return cluster_role_rules(objects(""))


def auditor_rules() -> list[Rule]:
    """The rules `kubectl kustomize daemonset/auditor` grants the auditor's account."""
    from deployment import objects

    return cluster_role_rules(objects("auditor"), AUDITOR)


@contextmanager
def running(directory: Path, rules: list[Rule] | None = None) -> Iterator[KubeStandIn]:
    """A started stand-in with the manifests' RBAC and one GPU node, `gpu-node-17`; stopped
    on every way out."""
    stand_in = KubeStandIn(directory, manifest_rules() if rules is None else rules)
    stand_in.add_node("gpu-node-17", {"nvidia.com/gpu.present": "true"})
    stand_in.start()
    try:
        yield stand_in
    finally:
        stand_in.stop()
