"""docs/deploy.md covers what a new user needs, each alert has its runbook there, and the
commands it gives name things that exist."""

from __future__ import annotations

import re

import yaml

from conftest import ROOT
from deployment import CHART, DEPLOY_DOC, KUSTOMIZATIONS, alerts, docs_url

SECTIONS = [
    "## Prerequisites",
    "## The image",
    "## Install",
    "## The RDMA overlay",
    "### With the Prometheus Operator",
    "### Without it",
    "## Grafana",
    "## Upgrade",
    "## Uninstall",
    "## Troubleshooting",
    "## Runbooks",
    "### What needs root",
    "### Resources",
    "### Security scan (checkov)",
]


def anchor(heading: str) -> str:
    """The anchor a Markdown renderer gives a heading (lower case, punctuation dropped)."""
    text = heading.lstrip("#").strip().lower()
    return re.sub(r"[^a-z0-9 _-]", "", text).replace(" ", "-")


def test_the_sections_a_new_user_needs_are_there() -> None:
    lines = DEPLOY_DOC.read_text().splitlines()
    for section in SECTIONS:
        assert section in lines, section


def test_every_alert_links_to_its_runbook_section() -> None:
    text = DEPLOY_DOC.read_text()
    runbooks = text.split("\n## Runbooks\n", 1)[1].split("\n## ", 1)[0]
    headings = [line for line in runbooks.splitlines() if line.startswith("### ")]
    assert [h[4:] for h in headings] == list(alerts())  # one each, in the rules' order
    anchors = {anchor(h) for h in text.splitlines() if h.startswith("#")}
    base = docs_url()
    assert base.startswith("https://") and base.endswith("/")  # absolute: clickable in alerts
    for name, rule in alerts().items():
        url, _, fragment = rule["annotations"]["runbook_url"].partition("#")
        assert url.startswith(base), name
        assert (ROOT / "docs" / url.removeprefix(base)).resolve() == DEPLOY_DOC.resolve(), name
        assert fragment in anchors, name


def test_the_commands_name_what_exists() -> None:
    text = DEPLOY_DOC.read_text()
    applied = set(re.findall(r"kubectl apply -k (daemonset/[\w/-]*)", text))
    # daemonset/ is the base as is: the docs apply it, never daemonset/base directly
    assert applied == {f"daemonset/{k}" for k in KUSTOMIZATIONS if k != "base"}
    assert "docker build -t registry.example.com/gpuprobe:0.1.0 ." in text
    assert "create secret generic gpuprobe-token" in text and "--from-literal=token=" in text
    for path in re.findall(r"`((?:daemonset|scripts|tests)/[\w./-]+)`", text):
        assert (ROOT / path).exists(), path


def test_the_audit_commands_ask_the_service_of_every_agent() -> None:
    """An audit of the ready-only Service would leave down agents out, unseen."""
    for doc in (DEPLOY_DOC, ROOT / "docs" / "audit.md"):
        audits = re.findall(r"gpuprobe audit --targets\s+(dns:[\w:.-]+)", doc.read_text())
        assert audits, doc
        assert set(audits) == {"dns:gpuprobe-all.gpuprobe.svc.cluster.local:50051"}, doc


def test_the_helm_values_the_docs_set_exist() -> None:
    """Every `--set key=` and `key=true` of a value in docs/deploy.md and the chart's README
    names a value of the chart (values.yaml)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    texts = DEPLOY_DOC.read_text() + (CHART / "README.md").read_text()
    keys = set(re.findall(r"--set ([\w.]+)=", texts))
    assert {"image.repository", "image.tag", "rdma.enabled", "tls.enabled"} <= keys
    for key in keys:
        node = values
        for part in key.split("."):
            assert isinstance(node, dict) and part in node, key
            node = node[part]
