"""The kustomizations render, every object validates against the Kubernetes 1.31 schemas (and
the Prometheus Operator's for its resources), and the DaemonSet is what docs/deploy.md says."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from conftest import require
from deployment import (
    DASHBOARD,
    DEPLOY_DOC,
    DOCKERFILE,
    KUSTOMIZATIONS,
    RULES_FILE,
    SCRAPE_CONFIG,
    find,
    find_tool,
    objects,
    render,
)
from gpuprobe.audit.view.nodes import GPU_PRESENT_LABELS
from gpuprobe.checks.registry import sections
from gpuprobe.checks.xid.settings import xid_settings
from gpuprobe.config import Config, load_config

KUBERNETES = "1.31.0"
MODELS_VENV = Path("/opt/prometheus-operator-models")
CUSTOM = {"ServiceMonitor", "PrometheusRule"}
CLUSTER_SCOPED = {"Namespace", "PriorityClass", "ClusterRole", "ClusterRoleBinding"}


def kubernetes_validate() -> Any:
    """The kubernetes-validate package (the test extra installs it)."""
    try:
        import kubernetes_validate as kv
    except ImportError:
        require(False, "kubernetes-validate is not installed")
    return kv


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_object_validates_against_the_kubernetes_schemas(kustomization: str) -> None:
    kv = kubernetes_validate()
    docs = objects(kustomization)
    assert docs
    for doc in docs:
        if doc["kind"] in CUSTOM:
            continue  # not in Kubernetes' schemas: see the Prometheus Operator test below
        kv.validate(doc, KUBERNETES, strict=True)


def test_strict_validation_refuses_a_misspelt_field() -> None:
    """The validation above would catch a typo (strict: unknown fields are errors)."""
    kv = kubernetes_validate()
    daemonset = copy.deepcopy(find(objects("base"), "DaemonSet"))
    daemonset["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(kv.ValidationError):
        kv.validate(daemonset, KUBERNETES, strict=True)


def test_the_kustomizations_hold_the_expected_objects() -> None:
    def kinds(name: str) -> list[tuple[str, str]]:
        return sorted((d["kind"], d["metadata"]["name"]) for d in objects(name))

    base = [
        ("ClusterRole", "gpuprobe-node-agent"),
        ("ClusterRoleBinding", "gpuprobe-node-agent"),
        ("ConfigMap", "gpuprobe-dashboard"),
        ("DaemonSet", "gpuprobe"),
        ("Namespace", "gpuprobe"),
        ("NetworkPolicy", "gpuprobe"),
        ("PriorityClass", "gpuprobe-node-agent"),
        ("PrometheusRule", "gpuprobe"),
        ("Service", "gpuprobe"),
        ("Service", "gpuprobe-all"),
        ("ServiceAccount", "gpuprobe"),
        ("ServiceMonitor", "gpuprobe"),
    ]
    config = find(objects("base"), "DaemonSet")["spec"]["template"]["spec"]["volumes"]
    config_map = next(v["configMap"]["name"] for v in config if v["name"] == "config")
    assert config_map.startswith("gpuprobe-config-")  # named by a hash of its content
    assert kinds("base") == sorted([*base, ("ConfigMap", config_map)])
    assert render("") == render("base")  # daemonset/, the documented install
    assert kinds("overlays/rdma") == kinds("base")
    assert kinds("overlays/tls") == kinds("base")
    assert kinds("overlays/no-prometheus-operator") == sorted(
        [
            *(k for k in base if k[0] not in CUSTOM),
            ("ConfigMap", config_map),
            ("ConfigMap", "gpuprobe-prometheus-rules"),
        ]
    )
    for name in KUSTOMIZATIONS:
        for doc in objects(name):
            if doc["kind"] not in CLUSTER_SCOPED:
                assert doc["metadata"]["namespace"] == "gpuprobe", doc["kind"]


def pod(kustomization: str = "base") -> dict[str, Any]:
    spec: dict[str, Any] = find(objects(kustomization), "DaemonSet")["spec"]["template"]["spec"]
    return spec


def agent(kustomization: str = "base") -> dict[str, Any]:
    (container,) = pod(kustomization)["containers"]
    assert container["name"] == "gpuprobe"
    return container  # type: ignore[no-any-return]


def test_the_agent_runs_serve_as_agreed() -> None:
    container = agent()
    assert container["args"] == [
        "serve",
        "--root=/host",
        "--grpc-listen=[::]:50051",
        "--metrics-listen=[::]:9760",
        "--token-file=/etc/gpuprobe/token/token",
        "--config=/etc/gpuprobe/config/config.yaml",
    ]
    assert container["image"] == "gpuprobe:0.1.0"
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    # an NVIDIA runtime that is the node's default leaves the container alone
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "void"
    assert "NVIDIA_DRIVER_CAPABILITIES" not in env
    assert "nvidia.com/gpu" not in json.dumps(container["resources"])  # takes no GPU
    # Liveness off the gRPC pool that callers share (issue 17: reflection streams filled it).
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["grpc"] == {
        "port": 50051,
        "service": "gpuprobe.v1.NodeDiagnostics",
    }
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": 50051, "metrics": 9760}


def test_the_pod_is_placed_and_privileged_as_documented() -> None:
    spec = pod()
    # NVIDIA's and AMD's GPU nodes, by the labels that make the audit expect an agent there
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": k, "operator": "In", "values": [v]}]}
        if v is not None
        else {"matchExpressions": [{"key": k, "operator": "Exists"}]}
        for k, v in GPU_PRESENT_LABELS.items()
    ]
    assert "nodeSelector" not in spec
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in spec["tolerations"]
    assert "runtimeClassName" not in spec  # see test_the_pod_needs_no_gpu_runtime
    assert spec["hostPID"] is True
    assert "hostNetwork" not in spec
    assert spec["automountServiceAccountToken"] is False
    assert spec["priorityClassName"] == "gpuprobe-node-agent"
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = agent()["securityContext"]
    # the GPUs' device nodes without the NVIDIA runtime (docs/deploy.md, "What needs root")
    assert security == {"privileged": True, "readOnlyRootFilesystem": True}
    strategy = find(objects("base"), "DaemonSet")["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate"


def test_volumes_give_the_host_read_only_and_the_state_and_scratch_writable() -> None:
    volumes = {v["name"]: v for v in pod()["volumes"]}
    mounts = {m["name"]: m for m in agent()["volumeMounts"]}
    assert volumes["host"]["hostPath"] == {"path": "/", "type": "Directory"}
    assert mounts["host"]["mountPath"] == "/host" and mounts["host"]["readOnly"] is True
    # /host/sys & co. too where the node can; a plain read-only mount where it cannot (before
    # Kubernetes 1.33, containerd 2.0): the agent runs on the clusters people rent today, and
    # Enabled is one value away (docs/deploy.md, "Recursive read-only")
    assert mounts["host"]["recursiveReadOnly"] == "IfPossible"
    assert "mountPropagation" not in mounts["host"]  # recursive read-only needs None
    assert volumes["state"]["hostPath"]["path"] == "/var/lib/gpuprobe"
    assert mounts["state"]["mountPath"] == "/var/lib/gpuprobe" and "readOnly" not in mounts["state"]
    assert volumes["scratch"]["hostPath"]["path"] == "/var/lib/gpuprobe/scratch"
    # measured under --root: the host path /var/lib/gpuprobe/scratch is /host/... here
    assert mounts["scratch"]["mountPath"] == "/host/var/lib/gpuprobe/scratch"
    assert volumes["token"]["secret"] == {
        "secretName": "gpuprobe-token",
        "optional": True,  # the pods start without it: see tests/deploy/test_first_install.py
        "defaultMode": 0o400,
    }
    assert mounts["token"]["mountPath"] == "/etc/gpuprobe/token"


def test_the_api_token_is_projected_short_lived_and_bound_to_the_agents_role() -> None:
    """No automounted token: a projected one (the API server's audience, an hour, renewed by
    the kubelet) where client libraries look for it, and a ClusterRole bound to the agent's
    ServiceAccount (its rules are held to the code in tests/kube)."""
    docs = objects("base")
    volumes = {v["name"]: v for v in pod()["volumes"]}
    mounts = {m["name"]: m for m in agent()["volumeMounts"]}
    token, ca, namespace = volumes["kube-api-access"]["projected"]["sources"]
    assert token == {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}
    assert ca["configMap"]["name"] == "kube-root-ca.crt"
    assert namespace["downwardAPI"]["items"][0]["fieldRef"] == {"fieldPath": "metadata.namespace"}
    assert mounts["kube-api-access"] == {
        "name": "kube-api-access",
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
        "readOnly": True,
    }
    assert find(docs, "ServiceAccount")["automountServiceAccountToken"] is False
    binding = find(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": find(docs, "ClusterRole")["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": pod()["serviceAccountName"], "namespace": "gpuprobe"}
    ]
    # its own taint, NoExecute included, never evicts the agent that must see the recovery
    assert {"key": "gpuprobe.io/unhealthy", "operator": "Exists"} in pod()["tolerations"]


def test_the_shipped_configuration_is_valid_for_the_agent(tmp_path: Path) -> None:
    """The ConfigMap's config.yaml loads with gpuprobe's own configuration reader, and names
    the paths the DaemonSet mounts."""
    config_map = next(
        d for d in objects("base") if d["metadata"]["name"].startswith("gpuprobe-config-")
    )
    raw = yaml.safe_load(config_map["data"]["config.yaml"])
    assert raw["xid"]["state_dir"] == "/var/lib/gpuprobe"
    assert raw["storage"]["paths"] == []  # opt-in: tests/deploy/test_first_install.py
    if "storage" not in {f.name for f in dataclasses.fields(Config)}:
        # The storage check and its configuration section come with their own branch; until
        # they land, the rest of the file must still load.
        raw.pop("storage")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    config = load_config(str(path), sections())
    assert xid_settings(config).state_dir == "/var/lib/gpuprobe"


def test_the_rdma_overlay_adds_host_network_ipc_lock_and_the_rdma_resource() -> None:
    spec, container = pod("overlays/rdma"), agent("overlays/rdma")
    assert spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert container["securityContext"]["capabilities"] == {"add": ["IPC_LOCK"]}
    for kind in ("requests", "limits"):
        assert container["resources"][kind]["rdma/rdma_shared_device_a"] == "1"
    base = copy.deepcopy(find(objects("base"), "DaemonSet"))
    rdma = copy.deepcopy(find(objects("overlays/rdma"), "DaemonSet"))
    for d in (base, rdma):  # everything else is the base's
        s = d["spec"]["template"]["spec"]
        s.pop("hostNetwork", None), s.pop("dnsPolicy", None)
        c = s["containers"][0]
        c["securityContext"].pop("capabilities", None)
        for kind in ("requests", "limits"):
            c["resources"][kind].pop("rdma/rdma_shared_device_a", None)
    assert rdma == base


def test_the_no_operator_overlay_annotates_pods_and_ships_the_rules_file() -> None:
    docs = objects("overlays/no-prometheus-operator")
    annotations = find(docs, "DaemonSet")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "9760"
    assert annotations["prometheus.io/path"] == "/metrics"
    rules = find(docs, "ConfigMap", "gpuprobe-prometheus-rules")
    assert rules["data"] == {"gpuprobe.rules.yml": RULES_FILE.read_text()}


def test_the_example_scrape_job_matches_the_pods_and_labels_the_node() -> None:
    """Debian's Prometheus is built without Kubernetes service discovery, so promtool cannot
    load this job: its relabelling is checked here against the pods' labels and ports."""
    config = yaml.safe_load(SCRAPE_CONFIG.read_text())
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "gpuprobe"
    assert job["kubernetes_sd_configs"] == [{"role": "pod", "namespaces": {"names": ["gpuprobe"]}}]
    keep, node, *_ = job["relabel_configs"]
    labels = find(objects("base"), "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    port_names = [p["name"] for p in agent()["ports"]]
    assert keep["action"] == "keep"
    assert keep["source_labels"] == [
        "__meta_kubernetes_pod_label_app_kubernetes_io_name",
        "__meta_kubernetes_pod_container_port_name",
    ]
    assert keep["regex"] == f"{labels['app.kubernetes.io/name']};{port_names[1]}"
    assert node == {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"}
    assert config["rule_files"] == ["/etc/prometheus/gpuprobe/gpuprobe.rules.yml"]


def test_the_service_and_service_monitor_reach_the_agents() -> None:
    docs = objects("base")
    service = find(docs, "Service", "gpuprobe")
    assert service["spec"]["clusterIP"] == "None"  # headless: DNS names every agent
    assert service["spec"]["publishNotReadyAddresses"] is False  # mesh peers: ready ones only
    selector = service["spec"]["selector"]
    labels = find(docs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "grpc": 50051,
        "metrics": 9760,
    }
    monitor = find(docs, "ServiceMonitor")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    # job = the Service's app.kubernetes.io/name label: the GpuprobeAgentDown alert's job
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "gpuprobe"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    assert {
        "sourceLabels": ["__meta_kubernetes_pod_node_name"],
        "targetLabel": "node",
        "action": "replace",
    } in endpoint["relabelings"]


def test_the_audit_service_lists_agents_that_are_not_ready_and_is_not_scraped() -> None:
    """gpuprobe-all: a crash-looping or hung agent stays in the audit's dns: answer (and so
    shows as unreachable); the ServiceMonitor does not select it (no double scrape)."""
    docs = objects("")
    service = find(docs, "Service", "gpuprobe-all")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == find(docs, "Service", "gpuprobe")["spec"]["selector"]
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        ("grpc", 50051, "grpc")
    ]
    selector = find(docs, "ServiceMonitor")["spec"]["selector"]["matchLabels"]
    assert not selector.items() <= service["metadata"]["labels"].items()


def test_the_dashboard_config_map_is_labelled_for_grafanas_sidecar() -> None:
    config_map = find(objects("base"), "ConfigMap", "gpuprobe-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["data"] == {"gpuprobe-node-health.json": DASHBOARD.read_text()}


def operator_schemas() -> dict[str, Any]:
    """JSON Schemas of ServiceMonitor and PrometheusRule, from the Prometheus Operator's CRDs
    as the cloudcoil models (generated from them) carry them, made strict: an unknown field is
    an error, as `kubectl apply` with server-side field validation makes it."""
    interpreter = MODELS_VENV / "bin" / "python"
    require(interpreter.is_file(), "the Prometheus Operator models venv is not installed")
    script = (
        "import json\n"
        "from cloudcoil.models.prometheus_operator import v1\n"
        "print(json.dumps({k: getattr(v1, k).model_json_schema(by_alias=True)"
        " for k in ('ServiceMonitor', 'PrometheusRule')}))\n"
    )
    out = subprocess.run(
        [str(interpreter), "-c", script], capture_output=True, text=True, check=False, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return {kind: strict(schema) for kind, schema in json.loads(out.stdout).items()}


def strict(schema: Any) -> Any:
    """Every object schema with properties refuses other properties."""
    if isinstance(schema, dict):
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
        for value in schema.values():
            strict(value)
    elif isinstance(schema, list):
        for value in schema:
            strict(value)
    return schema


def test_service_monitor_and_prometheus_rule_validate_against_the_operators_schemas() -> None:
    schemas = operator_schemas()
    docs = objects("base")
    for kind in sorted(CUSTOM):
        doc = find(docs, kind)
        validator = jsonschema.Draft202012Validator(schemas[kind])
        assert [e.message for e in validator.iter_errors(doc)] == [], kind
        broken = copy.deepcopy(doc)
        broken["spec"]["typo"] = 1
        assert list(validator.iter_errors(broken)), f"{kind}: strict schema accepts a typo"


def test_checkov_finds_nothing_unjustified(tmp_path: Any) -> None:
    """checkov over every rendered kustomization and the Dockerfile: each failed check is
    justified by its id in docs/deploy.md's security table, and nothing is justified that no
    longer fails (the table stays true)."""
    checkov = find_tool("checkov")
    for name in KUSTOMIZATIONS:
        (tmp_path / f"{Path(name).name or 'daemonset'}.yaml").write_text(render(name))
    (tmp_path / "Dockerfile").write_text(DOCKERFILE.read_text())
    out = subprocess.run(
        [
            checkov,
            "--directory",
            str(tmp_path),
            "--framework",
            "kubernetes",
            "dockerfile",
            "--output",
            "json",
            "--quiet",
            "--compact",
            "--skip-download",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert out.stdout.strip(), out.stderr
    reports = json.loads(out.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed: dict[str, set[str]] = {}
    for report in reports:
        for check in report.get("results", {}).get("failed_checks", []):
            where = f"{check['file_path'].lstrip('/')}:{check['resource']}"
            failed.setdefault(check["check_id"], set()).add(where)
    justified = justified_checks()
    unjustified = {k: sorted(v) for k, v in failed.items() if k not in justified}
    assert unjustified == {}, unjustified
    assert sorted(set(justified) - set(failed)) == [], "justified but no longer failing"


def justified_checks() -> dict[str, str]:
    """The checkov ids docs/deploy.md justifies, with the justification."""
    text = DEPLOY_DOC.read_text()
    section = text.split("### Security scan (checkov)", 1)[1].split("\n## ", 1)[0]
    found = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`CKV"):
            found[cells[0].strip("`")] = cells[2]
    return found


def test_the_network_policy_admits_peers_clients_and_prometheus_only() -> None:
    policy = find(objects("base"), "NetworkPolicy")
    spec = policy["spec"]
    agents = {"app.kubernetes.io/name": "gpuprobe", "app.kubernetes.io/component": "node-agent"}
    assert spec["podSelector"] == {"matchLabels": agents}
    assert find(objects("base"), "DaemonSet")["spec"]["selector"]["matchLabels"] == agents
    assert spec["policyTypes"] == ["Ingress"]
    peers, clients, prometheus = spec["ingress"]
    assert peers == {"from": [{"podSelector": {"matchLabels": agents}}]}  # any port: sinks

    def namespaces(rule: dict[str, Any]) -> list[str]:
        (source,) = rule["from"]
        (expression,) = source["namespaceSelector"]["matchExpressions"]
        assert expression["key"] == "kubernetes.io/metadata.name"
        assert expression["operator"] == "In"
        return list(expression["values"])

    assert namespaces(clients) == ["gpuprobe"]
    assert clients["ports"] == [{"port": "grpc", "protocol": "TCP"}]
    assert namespaces(prometheus) == ["monitoring"]
    assert prometheus["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    ports = {p["name"] for p in agent()["ports"]}
    assert {"grpc", "metrics"} <= ports  # the named ports the policy admits exist


def test_the_tls_overlay_serves_grpc_over_tls_from_the_secret() -> None:
    container, spec = agent("overlays/tls"), pod("overlays/tls")
    assert container["args"] == [
        *agent()["args"],
        "--tls-cert=/etc/gpuprobe/tls/tls.crt",
        "--tls-key=/etc/gpuprobe/tls/tls.key",
    ]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["tls"] == {"name": "tls", "mountPath": "/etc/gpuprobe/tls", "readOnly": True}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["tls"]["secret"] == {"secretName": "gpuprobe-tls", "defaultMode": 0o400}
    # The kubelet's gRPC probe has no TLS: readiness comes from /readyz instead.
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"] == agent()["livenessProbe"]


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_each_kustomization_applied_alone_creates_its_namespace(kustomization: str) -> None:
    """`kubectl apply -k daemonset/auditor` (or mesh-nccl) on a cluster without the base:
    every namespace its objects live in is among its objects, and it is the one Namespace
    every kustomization renders (applying them in any order relabels nothing)."""
    docs = objects(kustomization)
    namespaces = {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
    used = {d["metadata"]["namespace"] for d in docs if "namespace" in d["metadata"]}
    assert used <= namespaces, f"{kustomization}: {sorted(used - namespaces)} not created"
    for doc in docs:
        if doc["kind"] == "Namespace":
            assert doc == find(objects("base"), "Namespace")
