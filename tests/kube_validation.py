"""The API server's validation beyond Kubernetes' OpenAPI schemas, and the MPI Operator's, for
the objects of `gpuprobe mesh --transport nccl` (tests/kube_workloads.py applies them).

- `validate_pod_spec`, `validate_job`, `validate_service`, `validate_config_map`: the rules of
  pkg/apis/core/validation and pkg/apis/batch/validation that gpuprobe's objects reach (a node
  field selector takes one value per term, an extended resource needs a limit equal to its
  request, a Job's pods restart Never or OnFailure, a Service's name is a DNS-1035 label, a
  ConfigMap holds at most 1 MiB, ...);
- `validate_mpijob`: the MPIJob CRD's structural schema (kubeflow/mpi-operator v0.8.2,
  manifests/base/kubeflow.org_mpijobs.yaml: its fields, types, enums and defaults; its pod
  templates as core/v1 PodTemplateSpecs), unknown fields refused;
- `operator_validation`: the MPI Operator's own ValidateMPIJob
  (pkg/apis/kubeflow/validation/validation.go);
- `slice_problems`, `rule_problems`: ValidateResourceSlice's and ValidateDeviceTaintRule's
  rules (pkg/apis/resource/validation) for the device taints' objects (tests/kube_dra.py
  applies them).
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema

from kube_standin import DNS_SUBDOMAIN, LABEL_VALUE, QUALIFIED, ApiFailure, validate

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")
TAINT_EFFECTS = ("None", "NoSchedule", "NoExecute")  # a device taint's (resource.k8s.io)
# The API's 1 MiB bound on a ConfigMap's data.
CONFIG_MAP_BYTES = 1024 * 1024


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


def _pool_name(name: str) -> bool:
    return 0 < len(name) <= 253 and all(DNS_SUBDOMAIN.fullmatch(p) for p in name.split("/"))


def slice_problems(obj: dict[str, Any]) -> list[str]:
    """ValidateResourceSlice's rules beyond the schema (pkg/apis/resource/validation)."""
    problems: list[str] = []
    spec = obj["spec"]
    if not DNS_SUBDOMAIN.fullmatch(spec.get("driver", "")) or len(spec["driver"]) > 63:
        problems.append("spec.driver: not a DNS subdomain of at most 63 characters")
    if not _pool_name(spec["pool"]["name"]):
        problems.append("spec.pool.name: not a pool name")
    chosen = [
        k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k)
    ]
    if len(chosen) != 1:
        problems.append("spec: exactly one of nodeName, nodeSelector, allNodes is required")
    devices = spec.get("devices") or []
    if len(devices) > 128:
        problems.append("spec.devices: must have at most 128 items")
    names = [d["name"] for d in devices]
    if len(names) != len(set(names)):
        problems.append("spec.devices: Duplicate value")
    for device in devices:
        if not DNS_LABEL.fullmatch(device["name"]) or len(device["name"]) > 63:
            problems.append(f"spec.devices[{device['name']}].name: not a DNS label")
        for key, value in (device.get("attributes") or {}).items():
            if not QUALIFIED.fullmatch(key):
                problems.append(f"attributes[{key}]: not a qualified name")
            if len([v for v in value.values() if v is not None]) != 1:
                problems.append(f"attributes[{key}]: exactly one value is required")
    return problems


def rule_problems(obj: dict[str, Any]) -> list[str]:
    """ValidateDeviceTaintRule's rules beyond the schema (pkg/apis/resource/validation)."""
    problems: list[str] = []
    meta = obj["metadata"]
    name = meta.get("name", "")
    if not DNS_SUBDOMAIN.fullmatch(name) or len(name) > 253:
        problems.append(f"metadata.name: {name!r} is not a DNS subdomain")
    for key, value in (meta.get("labels") or {}).items():
        if not QUALIFIED.fullmatch(key) or (value and not LABEL_VALUE.fullmatch(value)):
            problems.append(f"metadata.labels: {key}={value!r} is not a valid label")
        if len(value) > 63:
            problems.append(f"metadata.labels: {key}: must be no more than 63 characters")
    for owner in meta.get("ownerReferences") or []:
        for required in ("apiVersion", "kind", "name", "uid"):
            if not owner.get(required):
                problems.append(f"metadata.ownerReferences.{required}: Required value")
    spec = obj["spec"]
    selector = spec.get("deviceSelector") or {}
    driver = selector.get("driver")
    if driver is not None and (not DNS_SUBDOMAIN.fullmatch(driver) or len(driver) > 63):
        problems.append("spec.deviceSelector.driver: not a driver name")
    if selector.get("pool") is not None and not _pool_name(selector["pool"]):
        problems.append("spec.deviceSelector.pool: not a pool name")
    device = selector.get("device")
    if device is not None and (not DNS_LABEL.fullmatch(device) or len(device) > 63):
        problems.append("spec.deviceSelector.device: not a DNS label")
    taint = spec["taint"]
    key, value = taint.get("key", ""), taint.get("value", "")
    if not QUALIFIED.fullmatch(key) or len(key.rsplit("/", 1)[-1]) > 63:
        problems.append(f"spec.taint.key: {key!r} is not a qualified name")
    if value and (not LABEL_VALUE.fullmatch(value) or len(value) > 63):
        problems.append(f"spec.taint.value: {value!r} is not a label value")
    if taint.get("effect") not in TAINT_EFFECTS:
        problems.append(
            f"spec.taint.effect: Unsupported value: {taint.get('effect')!r}: supported values: "
            + ", ".join(f'"{e}"' for e in TAINT_EFFECTS)
        )
    return problems
