"""The Helm chart (daemonset/chart), rendered with Helm's own engine (helm-python-sdk, Helm
v4's Go SDK): its default render is daemonset/base object by object, its values do what the
overlays do, every object it can render is valid for every Kubernetes version from the chart's
kubeVersion (as low as the objects allow) to 1.35, lint and checkov find nothing unjustified,
and the schema refuses values of the wrong type, the agent's configuration included (its
schema is the agent's own configuration classes)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_manifests import justified_checks, kubernetes_validate, operator_schemas

from conftest import ROOT
from deployment import (
    CHART,
    DAEMONSET,
    chart_objects,
    chart_render,
    find,
    find_tool,
    helm,
    objects,
)
from gpuprobe.checks import storage
from gpuprobe.checks.registry import sections
from gpuprobe.checks.xid.settings import xid_settings
from gpuprobe.config import load_config

sys.path.insert(0, str(ROOT / "scripts"))
import build_deploy


def lowest_kubernetes() -> str:
    """The version in Chart.yaml's kubeVersion (`>=1.30.0-0` -> `1.30.0`)."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    found = re.fullmatch(r">=(\d+\.\d+\.\d+)-0", chart["kubeVersion"])
    assert found, chart["kubeVersion"]
    return found[1]


KUBERNETES_VERSIONS = [
    f"1.{minor}.0" for minor in range(int(lowest_kubernetes().split(".")[1]), 36)
]
CUSTOM = {"ServiceMonitor", "PrometheusRule"}
# Values that turn on what the overlays and the other options do, each a render to check.
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "rdma": {"rdma": {"enabled": True}},
    "tls": {"tls": {"enabled": True}},
    "mtls": {"tls": {"enabled": True, "clientCA": True}},
    "no-prometheus-operator": {
        "serviceMonitor": {"enabled": False},
        "prometheusRule": {"enabled": False},
    },
    "everything": {
        "rdma": {"enabled": True},
        "tls": {"enabled": True, "clientCA": True},
        "taint": {"enabled": True},
        "auditor": {"enabled": True},
        "config": {"storage": {"paths": ["/var/lib/gpuprobe/scratch"], "size_bytes": 268435456}},
        "image": {"repository": "registry.example.com/gpuprobe", "digest": "sha256:" + "a" * 64},
        "serviceMonitor": {"labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"labels": {"release": "kube-prometheus-stack"}},
        "networkPolicy": {"clientNamespaces": ["gpuprobe", "fleet-audit"]},
    },
}


def comparable(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Objects by (kind, name), with what may differ made equal: the configuration
    ConfigMap's generated name suffix (kustomize hashes its own way, the chart with sha256)
    and where the DaemonSet names it; the Namespace (Helm leaves it to --create-namespace);
    and whitespace inside rule expressions (kustomize's YAML library folds `>-` scalars with
    an extra blank line, which PromQL ignores)."""
    found = {}
    for doc in copy.deepcopy(docs):
        if doc["kind"] == "Namespace":
            continue
        if doc["metadata"]["name"].startswith("gpuprobe-config-"):
            doc["metadata"]["name"] = "gpuprobe-config-<hash>"
        if doc["kind"] == "DaemonSet":
            for volume in doc["spec"]["template"]["spec"]["volumes"]:
                if volume["name"] == "config":
                    volume["configMap"]["name"] = "gpuprobe-config-<hash>"
        if doc["kind"] == "PrometheusRule":
            for group in doc["spec"]["groups"]:
                for rule in group["rules"]:
                    rule["expr"] = " ".join(rule["expr"].split())
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in found, f"two {key}"
        found[key] = doc
    return found


def assert_same(chart: list[dict[str, Any]], kustomized: list[dict[str, Any]]) -> None:
    ours, theirs = comparable(chart), comparable(kustomized)
    assert sorted(ours) == sorted(theirs)
    for key in sorted(ours):
        assert ours[key] == theirs[key], key


def config_text(docs: list[dict[str, Any]]) -> str:
    (config_map,) = [
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("gpuprobe-config-")
    ]
    text: str = config_map["data"]["config.yaml"]
    return text


def test_the_default_render_is_the_kustomize_base_object_by_object() -> None:
    assert_same(chart_objects(), objects("base"))
    # not only equal once normalised: the configuration is the same text, comments and all
    assert config_text(chart_objects()) == config_text(objects("base"))


def test_a_changed_object_would_be_seen() -> None:
    """The comparison above fails on a one-field drift (it is no tautology)."""
    drifted = chart_objects()
    find(drifted, "DaemonSet")["spec"]["template"]["spec"]["hostPID"] = False
    with pytest.raises(AssertionError):
        assert_same(drifted, objects("base"))


@pytest.mark.parametrize(
    ("variant", "overlay"),
    [
        ("rdma", "overlays/rdma"),
        ("tls", "overlays/tls"),
        ("no-prometheus-operator", "overlays/no-prometheus-operator"),
    ],
)
def test_values_do_what_the_overlays_do(variant: str, overlay: str) -> None:
    assert_same(chart_objects(VARIANTS[variant]), objects(overlay))


def test_mtls_requires_client_certificates_from_the_secrets_ca() -> None:
    container = find(chart_objects(VARIANTS["mtls"]), "DaemonSet")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert container["args"][-3:] == [
        "--tls-cert=/etc/gpuprobe/tls/tls.crt",
        "--tls-key=/etc/gpuprobe/tls/tls.key",
        "--tls-client-ca=/etc/gpuprobe/tls/ca.crt",
    ]


def pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = find(docs, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def test_the_image_comes_from_image_values() -> None:
    def image(values: dict[str, Any]) -> str:
        return str(pod(chart_objects({"image": values}))["containers"][0]["image"])

    assert image({}) == "gpuprobe:0.1.0"
    assert image({"repository": "r.example.com/gpuprobe", "tag": "0.2.0"}) == (
        "r.example.com/gpuprobe:0.2.0"
    )
    digest = "sha256:" + "0" * 64
    assert image({"repository": "r.example.com/gpuprobe", "digest": digest}) == (
        f"r.example.com/gpuprobe@{digest}"
    )


def test_config_is_merged_into_the_agents_configmap_and_rolls_the_pods(tmp_path: Path) -> None:
    docs = chart_objects(VARIANTS["everything"])
    text = config_text(docs)
    (tmp_path / "config.yaml").write_text(text)
    config = load_config(str(tmp_path / "config.yaml"), sections())  # the agent's own reader
    scratch = config.section(storage.NAME, storage.StorageConfig)
    assert scratch.paths == ("/var/lib/gpuprobe/scratch",)
    assert scratch.size_bytes == 268435456
    assert xid_settings(config).state_dir == "/var/lib/gpuprobe"  # the shipped keys stay
    assert yaml.safe_load(text)["kubernetes"]["taint"]["enabled"] is True  # taint.enabled
    names = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    default_names = {d["metadata"]["name"] for d in chart_objects() if d["kind"] == "ConfigMap"}
    (mounted,) = [v for v in pod(docs)["volumes"] if v["name"] == "config"]
    assert mounted["configMap"]["name"] in names - default_names  # a new name: a rollout


def test_placement_resources_and_priority_come_from_values() -> None:
    values = {
        # Helm merges maps into the defaults; null removes a default (no CPU limit here)
        "resources": {
            "requests": {"cpu": "50m", "memory": "128Mi"},
            "limits": {"cpu": None, "memory": "1Gi"},
        },
        "nodeSelector": {"node-role.example.com/gpu": "true"},
        "affinity": None,
        "tolerations": [{"operator": "Exists"}],
        "priorityClassName": "system-node-critical",
        "priorityClass": {"create": False},
    }
    docs = chart_objects(values)
    spec = pod(docs)
    assert spec["containers"][0]["resources"] == {
        "requests": {"cpu": "50m", "memory": "128Mi"},
        "limits": {"memory": "1Gi"},
    }
    assert spec["nodeSelector"] == {"node-role.example.com/gpu": "true"}
    assert "affinity" not in spec
    assert spec["tolerations"] == values["tolerations"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert not [d for d in docs if d["kind"] == "PriorityClass"]


def test_the_auditors_clusterrole_is_the_one_in_daemonset_auditor() -> None:
    assert not [d for d in chart_objects() if d["metadata"]["name"] == "gpuprobe-auditor"]
    role = find(chart_objects({"auditor": {"enabled": True}}), "ClusterRole", "gpuprobe-auditor")
    assert role == yaml.safe_load((DAEMONSET / "auditor" / "clusterrole.yaml").read_text())
    for rule in role["rules"]:
        assert set(rule["verbs"]) <= {"get", "list", "watch"}  # read-only


def test_runbook_urls_are_absolute_and_follow_runbook_base_url() -> None:
    def urls(values: dict[str, Any]) -> set[str]:
        rule = find(chart_objects(values), "PrometheusRule")
        return {r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"]}

    default = urls({})
    assert default and all(u.startswith(build_deploy.DOCS_URL + "deploy.md#") for u in default)
    moved = urls({"prometheusRule": {"runbookBaseURL": "https://docs.example.org/gpuprobe/"}})
    assert moved == {
        u.replace(build_deploy.DOCS_URL, "https://docs.example.org/gpuprobe/") for u in default
    }
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["prometheusRule"]["runbookBaseURL"] == build_deploy.DOCS_URL


def test_versions_agree() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert chart["appVersion"] == version
    labels = find(objects("base"), "DaemonSet")["metadata"]["labels"]
    assert labels["app.kubernetes.io/version"] == version


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_lint_is_clean(variant: str) -> None:
    """`helm lint --strict` (warnings are errors), for Kubernetes 1.31 and 1.35; an info
    ("icon is recommended": the project has no icon) is all it may say."""
    for kube in ("v1.31.0", "v1.35.0"):
        report = helm().lint(str(CHART), VARIANTS[variant], strict=True, kube_version=kube)
        assert report["errors"] == [], report
        assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_rendered_object_is_valid_for_kubernetes_1_31_to_1_35(variant: str) -> None:
    kv = kubernetes_validate()
    docs = chart_objects(VARIANTS[variant])
    for version in KUBERNETES_VERSIONS:
        for doc in docs:
            if doc["kind"] not in CUSTOM:
                kv.validate(doc, version, strict=True)


def test_the_operators_objects_validate_against_the_operators_schemas() -> None:
    schemas = operator_schemas()
    import jsonschema

    docs = chart_objects(VARIANTS["everything"])
    for kind in sorted(CUSTOM):
        validator = jsonschema.Draft202012Validator(schemas[kind])
        assert [e.message for e in validator.iter_errors(find(docs, kind))] == [], kind


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"image": {"tag": 5}}, "at '/image/tag': got number, want string"),
        ({"rdma": {"enabled": "yes"}}, "at '/rdma/enabled': got string, want boolean"),
        ({"tolerations": {"key": "x"}}, "at '/tolerations': got object, want array"),
        ({"config": ["storage"]}, "at '/config': got array, want object"),
        (
            {"priorityClass": {"value": "high"}},
            "at '/priorityClass/value': got string, want integer",
        ),
        ({"image": {"digest": "latest"}}, "at '/image/digest'"),
        ({"rdma": {"enable": True}}, "additional properties 'enable' not allowed"),
        # the agent's configuration, key by key as its loader reads it
        ({"config": {"storag": {}}}, "at '/config': additional properties 'storag' not allowed"),
        (
            {"config": {"storage": {"path": ["/scratch"]}}},
            "at '/config/storage': additional properties 'path' not allowed",
        ),
        (
            {"config": {"serve": {"interval_seconds": "fast"}}},
            "at '/config/serve/interval_seconds': got string, want number",
        ),
        (
            {"config": {"kubernetes": {"taint": {"enabled": "yes"}}}},
            "at '/config/kubernetes/taint/enabled': got string, want boolean",
        ),
        (
            {"hostMount": {"recursiveReadOnly": "Always"}},
            "at '/hostMount/recursiveReadOnly'",
        ),
    ],
)
def test_values_of_the_wrong_type_are_refused_with_a_clear_message(
    values: dict[str, Any], message: str
) -> None:
    h = helm()
    with h.Chart.load(str(CHART)) as chart, pytest.raises(h.HelmValuesError) as err:
        chart.render(values, name="gpuprobe", namespace="gpuprobe")
    assert message in str(err.value)
    assert "gpuprobe:" in str(err.value)  # names the chart


def test_every_value_is_in_the_schema_with_a_description() -> None:
    """The README's table is generated from the schema (scripts/build_deploy.py; the test of
    the generated files holds it current): every value must be there to be documented."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(value: Any, node: dict[str, Any], key: str) -> None:
        if node.get("type") == "object" and "properties" in node:
            assert node.get("additionalProperties") is False, key
            for name, inner in value.items():
                assert name in node["properties"], f"{key}.{name} is not in the schema"
                walk(inner, node["properties"][name], f"{key}.{name}")
        else:
            assert node.get("description"), f"{key} has no description"

    walk(values, schema, "")
    readme = (CHART / "README.md").read_text()
    for key in re.findall(r"^\| `([\w.]+)` \|", readme, re.MULTILINE):
        node: Any = schema
        for part in key.split("."):
            node = node["properties"][part]
    assert '| `image.repository` | string | `"gpuprobe"` |' in readme


def test_checkov_over_the_rendered_chart_finds_nothing_unjustified(tmp_path: Path) -> None:
    """The same justified checks as the kustomizations (docs/deploy.md's table), no more; the
    chart's renders together fail the same checks as the kustomize renders."""
    checkov = find_tool("checkov")
    for variant, values in VARIANTS.items():
        (tmp_path / f"{variant}.yaml").write_text(chart_render(values))
    out = subprocess.run(
        [
            checkov,
            "--directory",
            str(tmp_path),
            "--framework",
            "kubernetes",
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
    failed = {
        check["check_id"]
        for report in reports
        for check in report.get("results", {}).get("failed_checks", [])
    }
    justified = justified_checks()
    assert sorted(failed - set(justified)) == []
    assert sorted(set(justified) - failed) == [], "the chart no longer fails these"


def test_the_config_schema_is_every_key_the_agents_loader_reads() -> None:
    """values.schema.json's `config` is the agent's configuration classes (written by
    scripts/build_deploy.py, held current by tests/deploy/test_generated.py): every section,
    the checks' own included, and the shipped configuration passes it."""
    import jsonschema

    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["config"]
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {
        "checks",
        "serve",
        "kubernetes",
        "bandwidth",
        "remediation",
    } | set(sections())
    shipped = yaml.safe_load((ROOT / "daemonset" / "base" / "config.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(shipped)
    # what the agent loads, the chart renders; what the chart refuses, the agent refuses
    assert build_deploy.config_schema() == {k: v for k, v in schema.items() if k != "description"}


@pytest.mark.parametrize(
    "config",
    [
        {"storage": {"paths": ["/var/lib/gpuprobe/scratch"], "size_bytes": 268435456}},
        {"serve": {"interval_seconds": 30, "intervals": {"xid": 10}}},
        {"kubernetes": {"taint": {"enabled": True}}},
    ],
)
def test_a_valid_config_renders_and_the_agent_loads_it(
    config: dict[str, Any], tmp_path: Path
) -> None:
    text = config_text(chart_objects({"config": config}))
    (tmp_path / "config.yaml").write_text(text)
    load_config(str(tmp_path / "config.yaml"), sections())


def test_the_auditors_verbs_are_the_ones_its_description_names() -> None:
    """The chart's schema (and so its README) names the verbs the auditor's ClusterRole
    grants, no more and no fewer."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    description = schema["properties"]["auditor"]["properties"]["enabled"]["description"]
    verbs = r"\b(get|list|watch|create|update|patch|delete|deletecollection)\b"
    named = set(re.findall(verbs, description))
    role = yaml.safe_load((DAEMONSET / "auditor" / "clusterrole.yaml").read_text())
    granted = {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert named == granted
    readme = (CHART / "README.md").read_text()
    (row,) = [line for line in readme.splitlines() if line.startswith("| `auditor.enabled`")]
    assert set(re.findall(verbs, row)) == granted


def test_kube_version_is_as_low_as_the_objects_allow() -> None:
    """Every variant validates at the chart's lowest version; at the one before, some object
    does not (so the floor is the objects', not a guess)."""
    kv = kubernetes_validate()
    lowest = lowest_kubernetes()
    major, minor, _ = lowest.split(".")
    before = f"{major}.{int(minor) - 1}.0"
    refused = []
    for values in VARIANTS.values():
        for doc in chart_objects(values):
            if doc["kind"] in CUSTOM:
                continue
            kv.validate(doc, lowest, strict=True)
            try:
                kv.validate(doc, before, strict=True)
            except kv.ValidationError:
                refused.append(doc["kind"])
    assert refused
    # with the host mount's recursiveReadOnly off, the default objects go lower still
    for doc in chart_objects({"hostMount": {"recursiveReadOnly": "Disabled"}}):
        if doc["kind"] not in CUSTOM:
            kv.validate(doc, before, strict=True)
