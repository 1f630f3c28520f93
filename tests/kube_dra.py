"""The API stand-in's DRA and eviction side: resource.k8s.io and policy/v1, served strictly.

`DraStandIn` extends the stand-in (tests/kube_standin.py) with what device taints and pod
eviction reach, as the API server serves them:

- discovery of `resource.k8s.io` per release: at 1.37 `v1` serves DeviceTaintRules beside
  ResourceSlices (and `v1beta2` still does); at 1.36 DeviceTaintRules are `v1beta2` only, and
  only with the `DRADeviceTaintRules` feature gate (`device_taint_rules=False`: no version
  lists them, as on a 1.36 cluster without the gate); `dra=False`: the group is not served
  at all (a device-plugin cluster). `/apis/resource.k8s.io/<version>` lists the resources
  each version serves, as the API server's discovery does;
- ResourceSlices (cluster-scoped; list with the registry's selectable fields `spec.nodeName`,
  `spec.driver`, and label selectors) validated against Kubernetes' OpenAPI schema of the
  release (kubernetes-validate, strict) and the API server's own rules (one node selection,
  device names DNS labels, one value per attribute);
- DeviceTaintRules (cluster-scoped): create (201; 409 AlreadyExists for a name taken), get,
  list (label selectors, pages), delete (200 with the object); validated against the schema and
  `ValidateDeviceTaintRule`'s rules (driver a DNS subdomain, pool a pool name, device a DNS
  label, taint key a qualified name, value a label value, effect None | NoSchedule |
  NoExecute, ownerReferences complete); `timeAdded` set when the client left it unset;
- PodDisruptionBudgets (policy/v1) and the Eviction subresource (`POST
  /api/v1/namespaces/NS/pods/NAME/eviction`, RBAC `pods/eviction` `create`) with the eviction
  registry's semantics (pkg/registry/core/pod/storage/eviction.go): the PDBs of the pod's
  namespace whose selector picks it; more than one: 500; a PDB whose controller has not
  observed its generation, or that allows no disruption: 429 TooManyRequests with the
  `DisruptionBudget` cause; else its `disruptionsAllowed` goes down by one, the pod is named in
  `disruptedPods`, the pod is deleted, and the answer is 201 with a `Success` Status. A pod
  that has ended (Succeeded, Failed) is deleted without consulting a PDB.

The node's GPUs as NVIDIA's DRA driver publishes them (`nvidia_slice`) follow the driver's
own device builder (NVIDIA/k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin/deviceinfo.go:
`GpuInfo.GetDevice`, `MigDeviceInfo.GetDevice`): driver `gpu.nvidia.com`, pool the node's
name, devices `gpu-<minor>` and `gpu-<minor>-mig-<profile id>-<start>-<size>`, attributes
`type`, `uuid`, `parentUUID` (MIG), `productName`, `brand`, `architecture`,
`cudaComputeCapability`, `driverVersion`, `cudaDriverVersion`, `pcieBusID`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import kubernetes_validate as kv

from kube_standin import (
    META_FIELDS,
    ApiFailure,
    KubeStandIn,
    RequestInfo,
    Rule,
    _selects,
    decode_times,
)
from kube_validation import rule_problems, slice_problems

GROUP = "resource.k8s.io"
SLICE_FIELDS: dict[str, tuple[str, ...]] = {
    **META_FIELDS,
    "spec.nodeName": ("spec", "nodeName"),
    "spec.driver": ("spec", "driver"),
}
VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
PDB_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


def dra_versions(release: str, device_taint_rules: bool) -> dict[str, list[str]]:
    """The resources each served version of resource.k8s.io lists at a release."""
    base = ["resourceslices", "resourceclaims", "resourceclaimtemplates", "deviceclasses"]
    if release == "1.37":
        rules = ["devicetaintrules", "devicetaintrules/status"] if device_taint_rules else []
        return {"v1": base + rules, "v1beta2": base + rules, "v1beta1": base}
    if release == "1.36":
        rules = ["devicetaintrules", "devicetaintrules/status"] if device_taint_rules else []
        return {"v1": base, "v1beta2": base + rules, "v1beta1": base}
    raise ValueError(f"no DRA discovery written for {release}")


class DraStandIn(KubeStandIn):
    """The stand-in serving resource.k8s.io (ResourceSlices, DeviceTaintRules), PDBs and the
    Eviction subresource."""

    def __init__(
        self,
        directory: Path,
        rules: list[Rule],
        release: str = "1.37",
        dra: bool = True,
        device_taint_rules: bool = True,
    ) -> None:
        super().__init__(directory, rules)
        self.release = release
        self.schema_version = f"{release}.0"
        self.dra_resources = dra_versions(release, device_taint_rules) if dra else {}
        if dra:
            self.groups[GROUP] = list(self.dra_resources)
        self.groups["policy"] = ["v1"]
        self.slices: dict[str, dict[str, Any]] = {}
        self.taint_rules: dict[str, dict[str, Any]] = {}
        self.pdbs: dict[tuple[str, str], dict[str, Any]] = {}
        self.evictions: list[tuple[float, str, str, int]] = []  # (when, namespace, pod, code)
        self.deleted_pods: list[tuple[str, str]] = []
        self.rule_writes: list[tuple[str, str, str]] = []  # (verb, version, name)

    # -- set-up -------------------------------------------------------------------------------
    def add_slice(self, obj: dict[str, Any]) -> None:
        """Store a ResourceSlice as a DRA driver publishes it, validated."""
        obj = copy.deepcopy(obj)
        version = obj["apiVersion"].rpartition("/")[2]
        if "resourceslices" not in self.dra_resources.get(version, []):
            raise ApiFailure(404, "NotFound", f"{obj['apiVersion']} is not served")
        self._validate(obj)
        problems = slice_problems(obj)
        if problems:
            raise ApiFailure(422, "Invalid", "ResourceSlice is invalid: " + "; ".join(problems))
        with self._lock:
            self._version += 1
            obj["metadata"]["resourceVersion"] = str(self._version)
            obj["metadata"].setdefault("uid", f"uid-slice-{obj['metadata']['name']}")
            self.slices[obj["metadata"]["name"]] = obj

    def add_rule(self, obj: dict[str, Any]) -> None:
        """A DeviceTaintRule someone else wrote (an operator, another controller)."""
        version = obj["apiVersion"].rpartition("/")[2]
        with self._lock:
            self._create_rule(version, copy.deepcopy(obj))

    def add_pdb(self, obj: dict[str, Any]) -> None:
        """A PodDisruptionBudget with the status its controller wrote, validated."""
        obj = copy.deepcopy(obj)
        decode_times(obj)
        self._validate(obj)
        meta = obj["metadata"]
        meta.setdefault("generation", 1)
        with self._lock:
            self._version += 1
            meta["resourceVersion"] = str(self._version)
            self.pdbs[(meta["namespace"], meta["name"])] = obj

    def _validate(self, obj: dict[str, Any]) -> None:
        try:
            kv.validate(obj, self.schema_version, strict=True)
        except kv.ValidationError as exc:
            raise ApiFailure(
                422, "Invalid", f"{obj.get('kind')} is invalid: {exc.message}"
            ) from None
        except kv.utils.SchemaNotFoundError as exc:
            raise ApiFailure(400, "BadRequest", str(exc)) from None

    # -- discovery ----------------------------------------------------------------------------
    def _discovery(self, path: str) -> dict[str, Any] | None:
        parts = path.rstrip("/").split("/")
        if len(parts) == 4 and parts[1:3] == ["apis", GROUP]:
            resources = self.dra_resources.get(parts[3])
            if resources is None:
                raise ApiFailure(
                    404, "NotFound", "the server could not find the requested resource"
                )
            kinds = {
                "resourceslices": "ResourceSlice",
                "resourceclaims": "ResourceClaim",
                "resourceclaimtemplates": "ResourceClaimTemplate",
                "deviceclasses": "DeviceClass",
                "devicetaintrules": "DeviceTaintRule",
            }
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{GROUP}/{parts[3]}",
                "resources": [
                    {
                        "name": name,
                        "singularName": "" if "/" in name else kinds[name].lower(),
                        "namespaced": name.startswith("resourceclaim"),
                        "kind": kinds[name.split("/")[0]],
                        "verbs": ["get", "patch", "update"] if "/" in name else [*VERBS],
                    }
                    for name in resources
                ],
            }
        return super()._discovery(path)

    # -- routes -------------------------------------------------------------------------------
    def _route(
        self,
        info: RequestInfo,
        query: dict[str, list[str]],
        payload: Any,
        content_type: str,
        token: str,
    ) -> tuple[int, Any]:
        if info.group == GROUP and info.resource in ("resourceslices", "devicetaintrules"):
            if info.resource not in self.dra_resources.get(info.version, []) or info.namespace:
                raise ApiFailure(
                    404, "NotFound", "the server could not find the requested resource"
                )
            if info.resource == "resourceslices" and info.verb == "list":
                return 200, self._page(
                    {("", n): s for n, s in self.slices.items()},
                    None,
                    query,
                    SLICE_FIELDS,
                    "ResourceSliceList",
                    GROUP,
                    info.version,
                )
            if info.resource == "devicetaintrules" and not info.subresource:
                return self._rules(info, query, payload)
        eviction = (info.group, info.resource, info.subresource) == ("", "pods", "eviction")
        if eviction and info.verb == "create" and info.namespace and info.name:
            return 201, self._evict(info.namespace, info.name, payload)
        pdbs = (info.group, info.resource) == ("policy", "poddisruptionbudgets")
        if pdbs and info.verb == "list" and info.version == "v1":
            return 200, self._page(
                self.pdbs,
                info.namespace,
                query,
                META_FIELDS,
                "PodDisruptionBudgetList",
                "policy",
                "v1",
            )
        return super()._route(info, query, payload, content_type, token)

    def _rules(
        self, info: RequestInfo, query: dict[str, list[str]], payload: Any
    ) -> tuple[int, Any]:
        if info.verb == "create":
            if not isinstance(payload, dict):
                raise ApiFailure(400, "BadRequest", "the body is not a JSON object")
            if payload.get("apiVersion") != f"{GROUP}/{info.version}":
                raise ApiFailure(400, "BadRequest", "the object is not of the requested version")
            self.rule_writes.append(("create", info.version, str(payload["metadata"]["name"])))
            return 201, self._create_rule(info.version, copy.deepcopy(payload))
        if info.verb == "list":
            store = {
                ("", n): self._as_version(r, info.version) for n, r in self.taint_rules.items()
            }
            return 200, self._page(
                store, None, query, META_FIELDS, "DeviceTaintRuleList", GROUP, info.version
            )
        rule = self.taint_rules.get(str(info.name))
        if rule is None:
            raise ApiFailure(404, "NotFound", f'devicetaintrules.{GROUP} "{info.name}" not found')
        if info.verb == "get":
            return 200, self._as_version(rule, info.version)
        if info.verb == "delete":
            self.rule_writes.append(("delete", info.version, str(info.name)))
            del self.taint_rules[str(info.name)]
            return 200, self._as_version(rule, info.version)
        raise ApiFailure(405, "MethodNotAllowed", f"{info.verb} is not allowed here")

    def _as_version(self, rule: dict[str, Any], version: str) -> dict[str, Any]:
        """A stored rule as one version serves it (the fields read the same in v1beta2/v1)."""
        served = copy.deepcopy(rule)
        served["apiVersion"] = f"{GROUP}/{version}"
        return served

    def _create_rule(self, version: str, obj: dict[str, Any]) -> dict[str, Any]:
        if "devicetaintrules" not in self.dra_resources.get(version, []):
            raise ApiFailure(404, "NotFound", "the server could not find the requested resource")
        obj.pop("status", None)  # the status is the controller's, never set on create
        meta = obj.setdefault("metadata", {})
        name = meta.get("name", "")
        if name in self.taint_rules:
            raise ApiFailure(
                409, "AlreadyExists", f'devicetaintrules.{GROUP} "{name}" already exists'
            )
        decode_times(obj)
        self._validate(obj)
        problems = rule_problems(obj)
        if problems:
            raise ApiFailure(
                422,
                "Invalid",
                f'DeviceTaintRule.{GROUP} "{name}" is invalid: ' + "; ".join(problems),
            )
        taint = obj["spec"]["taint"]
        taint.setdefault("timeAdded", "2026-12-01T21:00:00Z")
        self._version += 1
        meta.update(
            uid=f"uid-rule-{name}",
            resourceVersion=str(self._version),
            generation=1,
            creationTimestamp="2026-12-01T21:00:00Z",
        )
        self.taint_rules[name] = obj
        return copy.deepcopy(obj)

    def _evict(self, namespace: str, name: str, payload: Any) -> dict[str, Any]:
        import time

        if not isinstance(payload, dict):
            raise ApiFailure(400, "BadRequest", "the body is not a JSON object")
        self._validate({**payload, "apiVersion": payload.get("apiVersion", "policy/v1")})
        if (payload.get("apiVersion"), payload.get("kind")) != ("policy/v1", "Eviction"):
            raise ApiFailure(400, "BadRequest", "the body is not a policy/v1 Eviction")
        if payload.get("metadata", {}).get("name") != name:
            raise ApiFailure(
                400, "BadRequest", "name in URL does not match name in Eviction object"
            )
        pod = self.pods.get((namespace, name))
        if pod is None:
            self.evictions.append((time.monotonic(), namespace, name, 404))
            raise ApiFailure(404, "NotFound", f'pods "{name}" not found')
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return self._evicted(namespace, name)
        labels = pod["metadata"].get("labels") or {}
        budgets = [
            b
            for (ns, _), b in sorted(self.pdbs.items())
            if ns == namespace and _label_selects(b["spec"].get("selector"), labels)
        ]
        if len(budgets) > 1:
            self.evictions.append((time.monotonic(), namespace, name, 500))
            raise ApiFailure(
                500,
                "InternalError",
                "This pod has more than one PodDisruptionBudget, which the eviction "
                "subresource does not support.",
            )
        if budgets:
            budget = budgets[0]
            status = budget.get("status") or {}
            observed = status.get("observedGeneration", 0)
            if observed < budget["metadata"].get("generation", 1) or not status.get(
                "disruptionsAllowed", 0
            ):
                self.evictions.append((time.monotonic(), namespace, name, 429))
                raise TooManyRequests(
                    PDB_MESSAGE,
                    [
                        {
                            "reason": "DisruptionBudget",
                            "message": f"The disruption budget {budget['metadata']['name']} "
                            f"needs {status.get('desiredHealthy', 0)} healthy pods and has "
                            f"{status.get('currentHealthy', 0)} currently",
                        }
                    ],
                )
            status["disruptionsAllowed"] -= 1
            status.setdefault("disruptedPods", {})[name] = "2026-12-01T21:00:00Z"
        return self._evicted(namespace, name)

    def _evicted(self, namespace: str, name: str) -> dict[str, Any]:
        import time

        del self.pods[(namespace, name)]
        self.deleted_pods.append((namespace, name))
        self.evictions.append((time.monotonic(), namespace, name, 201))
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}

    # -- what the tests read ------------------------------------------------------------------
    def rules_on(self, node: str) -> dict[str, dict[str, Any]]:
        """The DeviceTaintRules selecting devices of a pool (the node's), by name."""
        with self._lock:
            return {
                n: copy.deepcopy(r)
                for n, r in self.taint_rules.items()
                if (r["spec"].get("deviceSelector") or {}).get("pool") == node
            }


class TooManyRequests(ApiFailure):
    """The eviction registry's 429: `apierrors.NewTooManyRequests(message, 0)` with the PDB's
    cause in `details.causes` (no Retry-After: the registry passes 0 seconds)."""

    def __init__(self, message: str, causes: list[dict[str, str]]) -> None:
        super().__init__(429, "TooManyRequests", message)
        self.details = {"causes": causes}


def _label_selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels, matchExpressions) against labels; a PDB's empty selector
    picks every pod of its namespace (policy/v1), a null one none."""
    if selector is None:
        return False
    text = ",".join(f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items())
    if text and not _selects(text, {"metadata": {"labels": labels}}):
        return False
    for term in selector.get("matchExpressions") or []:
        key, op, values = term["key"], term["operator"], term.get("values") or []
        ok = {
            "In": labels.get(key) in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def nvidia_slice(
    node: str,
    gpus: list[tuple[int, str, str]],
    migs: list[tuple[int, str, str, tuple[int, int, int]]] = (),  # type: ignore[assignment]
    version: str = "v1",
) -> dict[str, Any]:
    """The ResourceSlice NVIDIA's DRA driver publishes for a node: `gpus` as (minor, uuid,
    PCI bus id), `migs` as (parent minor, MIG uuid, parent uuid, (profile id, start, size))."""

    def text(value: str) -> dict[str, str]:
        return {"string": value}

    def gpu(minor: int, uuid: str, bus: str) -> dict[str, Any]:
        return {
            "name": f"gpu-{minor}",
            "attributes": {
                "type": text("gpu"),
                "uuid": text(uuid),
                "productName": text("NVIDIA H100 80GB HBM3"),
                "brand": text("Nvidia"),
                "architecture": text("Hopper"),
                "cudaComputeCapability": {"version": "9.0.0"},
                "driverVersion": {"version": "550.54.15"},
                "cudaDriverVersion": {"version": "12.4.0"},
                "pcieBusID": text(bus),
            },
            "capacity": {"memory": {"value": "81559Mi"}},
        }

    def mig(minor: int, uuid: str, parent: str, place: tuple[int, int, int]) -> dict[str, Any]:
        return {
            "name": f"gpu-{minor}-mig-{place[0]}-{place[1]}-{place[2]}",
            "attributes": {
                "type": text("mig"),
                "uuid": text(uuid),
                "parentUUID": text(parent),
                "profile": text("1g.10gb"),
                "productName": text("NVIDIA H100 80GB HBM3"),
            },
            "capacity": {"multiprocessors": {"value": "16"}, "memory": {"value": "9856Mi"}},
        }

    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{node}-gpu.nvidia.com-x7k2p",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": f"uid-{node}"}
            ],
        },
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [gpu(*g) for g in gpus] + [mig(*m) for m in migs],
        },
    }


def _template() -> dict[str, Any]:
    """A running GPU pod as `kubectl get pod -o json` printed it (tests/fixtures/pods)."""
    path = Path(__file__).parent / "fixtures/pods/gpu-node-17.json"
    found: dict[str, Any] = json.loads(path.read_text())["items"][0]
    return found


def gpu_pod(
    namespace: str, name: str, owner: str | None, node: str = "gpu-node-17", **labels: str
) -> dict[str, Any]:
    """A running GPU pod as kubectl prints it (the fixture's shape), owned by `owner`."""
    made = copy.deepcopy(_template())
    made["metadata"].update(name=name, namespace=namespace, uid=f"uid-{namespace}-{name}")
    made["metadata"]["labels"] = dict(labels)
    made["spec"]["nodeName"] = node
    if owner is not None:
        made["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": owner,
                "name": f"{name}-owner",
                "uid": f"uid-{name}-owner",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return made
