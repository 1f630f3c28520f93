"""The generated dashboard and rules file are current; promtool accepts the rules; the
generator passes the house style."""

from __future__ import annotations

import subprocess
import sys

import yaml

from conftest import ROOT
from deployment import PROMETHEUS_RULE, RULES_FILE, find_tool, rule_groups

SCRIPT = ROOT / "scripts" / "build_deploy.py"


def test_generated_files_are_what_the_script_writes() -> None:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr


def test_the_rules_file_holds_the_prometheusrule_groups() -> None:
    assert yaml.safe_load(RULES_FILE.read_text()) == {"groups": rule_groups()}
    resource = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert (resource["apiVersion"], resource["kind"]) == (
        "monitoring.coreos.com/v1",
        "PrometheusRule",
    )


def test_promtool_checks_the_rules() -> None:
    promtool = find_tool("promtool")
    out = subprocess.run(
        [promtool, "check", "rules", str(RULES_FILE)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rules = sum(len(g["rules"]) for g in rule_groups())
    assert f"SUCCESS: {rules} rules found" in out.stdout


def test_every_alert_has_severity_summary_description_and_runbook() -> None:
    for group in rule_groups():
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            assert rule["labels"]["severity"] in ("critical", "warning", "info")
            assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}
            assert rule["alert"].startswith("Gpuprobe")


def test_the_generator_passes_ruff_and_strict_mypy() -> None:
    for args in (["ruff", "check"], ["ruff", "format", "--check"], ["mypy", "--strict"]):
        out = subprocess.run(
            [sys.executable, "-m", *args, str(SCRIPT)],
            capture_output=True,
            text=True,
            check=False,
            cwd=ROOT,
        )
        assert out.returncode == 0, out.stdout + out.stderr
