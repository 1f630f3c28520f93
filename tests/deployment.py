"""Helpers for the deployment's tests: the rendered kustomizations, the rules and the dashboard,
and the tools that judge them (found on PATH, beside the test's Python, or in the separate
virtual environments .ci/run installs)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from conftest import ROOT, require

DAEMONSET = ROOT / "daemonset"
# "" is daemonset/ itself, the documented install (the base as is).
KUSTOMIZATIONS = [
    "",
    "base",
    "overlays/rdma",
    "overlays/no-prometheus-operator",
    "overlays/tls",
    "auditor",  # the audit's read-only ClusterRole, applied apart from the agents
    "mesh-nccl",  # the NCCL mesh's Role (and node-reading ClusterRole), apart from the agents
]
PROMETHEUS_RULE = DAEMONSET / "base" / "prometheusrule.yaml"
DASHBOARD = DAEMONSET / "base" / "dashboards" / "gpuprobe-node-health.json"
RULES_FILE = DAEMONSET / "overlays" / "no-prometheus-operator" / "gpuprobe.rules.yml"
SCRAPE_CONFIG = DAEMONSET / "overlays" / "no-prometheus-operator" / "prometheus-scrape-config.yml"
DOCKERFILE = ROOT / "Dockerfile"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
METRICS_DOC = ROOT / "docs" / "metrics.md"
# Separate virtual environments (.ci/run): heavy tools kept out of the test extra.
TOOL_VENVS = [Path("/opt/checkov"), Path("/opt/prometheus-operator-models")]


def find_tool(name: str) -> str:
    """A command-line tool: on PATH, beside this Python (the project's venv), or in a tool
    venv; skips (fails under GPUPROBE_REQUIRE_ALL=1) when it is nowhere."""
    candidates = [shutil.which(name), str(Path(sys.executable).parent / name)]
    candidates += [str(venv / "bin" / name) for venv in TOOL_VENVS]
    found = next((c for c in candidates if c and Path(c).is_file()), None)
    require(found is not None, f"{name} is not installed")
    assert found is not None
    return found


@cache
def render(kustomization: str) -> str:
    """`kubectl kustomize` of one kustomization, as YAML text."""
    kubectl = find_tool("kubectl")
    out = subprocess.run(
        [kubectl, "kustomize", str(DAEMONSET / kustomization)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def objects(kustomization: str) -> list[dict[str, Any]]:
    """The rendered objects of one kustomization."""
    return [doc for doc in yaml.safe_load_all(render(kustomization)) if doc]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The one object of a kind (and name)."""
    found = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def rule_groups() -> list[dict[str, Any]]:
    """The PrometheusRule's groups."""
    groups: list[dict[str, Any]] = yaml.safe_load(PROMETHEUS_RULE.read_text())["spec"]["groups"]
    return groups


def alerts() -> dict[str, dict[str, Any]]:
    """Every alerting rule by name."""
    return {r["alert"]: r for g in rule_groups() for r in g["rules"] if "alert" in r}


def dashboard() -> dict[str, Any]:
    """The dashboard's JSON model."""
    board: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return board


def dashboard_queries() -> dict[str, str]:
    """Every PromQL expression of the dashboard, keyed `panel title/refId`, and its template
    variables' queries keyed `variable:<name>` (label_values(SELECTOR, label) → SELECTOR)."""
    found: dict[str, str] = {}
    board = dashboard()
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            key = f"{panel['title']}/{target['refId']}"
            assert key not in found, f"two queries named {key}"
            found[key] = target["expr"]
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        text = (
            variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        )
        assert text.startswith("label_values(") and text.endswith(")"), text
        selector = text[len("label_values(") : -1].rsplit(",", 1)[0].strip()
        found[f"variable:{variable['name']}"] = selector
    return found


CHART = DAEMONSET / "chart"
# The chart's release in the comparisons: the base's namespace.
RELEASE, NAMESPACE = "gpuprobe", "gpuprobe"


def helm() -> Any:
    """helm-python-sdk (the test extra pins it): Helm v4's own engine, no helm binary."""
    try:
        import helm_python
    except ImportError:
        require(False, "helm-python-sdk is not installed")
    return helm_python


def chart_render(values: dict[str, Any] | None = None) -> str:
    """The chart rendered with Helm's engine (values over its defaults), as YAML text."""
    with helm().Chart.load(str(CHART)) as chart:
        manifests = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return "\n---\n".join(manifests[name] for name in sorted(manifests))


def chart_objects(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart's rendered objects."""
    return [doc for doc in yaml.safe_load_all(chart_render(values)) if doc]


def docs_url() -> str:
    """scripts/build_deploy.py's DOCS_URL: the base of every alert's runbook_url."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "build_deploy", ROOT / "scripts" / "build_deploy.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.DOCS_URL)
