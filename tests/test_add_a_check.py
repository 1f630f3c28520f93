"""docs/architecture.md's "How to add a check" holds: a throwaway check, one module and one
registry line, shows in `check --json`, on `/metrics`, in the config file's loading and its
docs test, in the default node conditions, in the summary view and in the audit."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

import throwaway_check
from conftest import ROOT, snapshot
from gpuprobe.audit.cluster import build as build_cluster
from gpuprobe.audit.keys import data_keys
from gpuprobe.checks import registry
from gpuprobe.checks.context import CheckContext
from gpuprobe.client import Credentials, fetch_report
from gpuprobe.config import Config, KubernetesConfig, build, load_config
from gpuprobe.effects.conditions import desired, groups
from gpuprobe.errors import ConfigError
from gpuprobe.host import snapshot_host
from gpuprobe.report import NodeReport, now
from gpuprobe.v1 import diagnostics_pb2 as pb
from serving import in_process_agent
from test_docs_config import accepted, documented, examples

ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()
# The guide's own section (up to the next one).
HOW_TO = ARCHITECTURE.split("## How to add a check", 1)[1].split("\n## ", 1)[0]
# The registry line, then the real command line, in a process of its own.
COMMAND = (
    "import sys, throwaway_check; throwaway_check.register(); "
    "from gpuprobe.cli import main; sys.exit(main(sys.argv[1:]))"
)


def config_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gpuprobe.yaml"
    path.write_text(text)
    return str(path)


def test_the_new_check_is_in_check_json(tmp_path: Path) -> None:
    args = ["check", "--json", "--only", "driver,throwaway"]
    args += ["--snapshot", snapshot("synthetic-h100-8gpu-healthy")]
    args += ["--config", config_file(tmp_path, "throwaway: {max_gpus: 4}\n")]
    out = subprocess.run(
        [sys.executable, "-c", COMMAND, *args],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(str(ROOT / d) for d in ("tests", "agent")),
        },
        timeout=60,
        check=False,
    )
    assert out.returncode == 1, out.stderr  # WARNING
    checks = json.loads(out.stdout)["checks"]
    assert [c["name"] for c in checks] == ["driver", "throwaway"]
    assert {k: v for k, v in checks[1].items() if k != "duration_seconds"} == {
        "name": "throwaway",
        "status": "WARNING",
        "summary": "8 GPUs",
        "findings": [
            {
                "code": "THROWAWAY_GPUS_OVER",
                "severity": "WARNING",
                "message": "8 GPUs, more than 4",
                "action": "NONE",
                "resource": "node",
            }
        ],
        "data": {"gpus": 8, "source": "nvidia"},
    }


def test_the_new_checks_section_is_read_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "throwaway: {max_gpus: 4}\n"
    with pytest.raises(ConfigError, match="unknown key 'throwaway'"):
        load_config(config_file(tmp_path, text), registry.sections())  # not registered yet
    monkeypatch.setitem(registry.CHECKS, "throwaway", throwaway_check.CHECK)
    config = load_config(config_file(tmp_path, text), registry.sections())
    assert config.section("throwaway", throwaway_check.ThrowawayConfig).max_gpus == 4
    assert (
        load_config(None, registry.sections())
        .section("throwaway", throwaway_check.ThrowawayConfig)
        .max_gpus
        is None
    )
    with pytest.raises(ConfigError, match=r"throwaway: unknown key 'max_gpu' \(known: max_gpus\)"):
        load_config(config_file(tmp_path, "throwaway: {max_gpu: 4}\n"), registry.sections())
    with pytest.raises(ConfigError, match="throwaway: max_gpus: expected an integer"):
        load_config(config_file(tmp_path, "throwaway: {max_gpus: many}\n"), registry.sections())


def test_the_new_check_is_on_the_metrics_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(registry.CHECKS, "throwaway", throwaway_check.CHECK)
    config = load_config(config_file(tmp_path, "throwaway: {max_gpus: 4}\n"), registry.sections())
    with in_process_agent(config=config, names=["driver", "throwaway"]) as agent:
        url = f"http://127.0.0.1:{agent.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            page = response.read().decode()
    assert "\ngpuprobe_throwaway_gpus 8.0\n" in page
    assert '\ngpuprobe_check_status{check="throwaway"} 1.0\n' in page
    assert (
        'gpuprobe_finding{action="NONE",check="throwaway",code="THROWAWAY_GPUS_OVER",'
        'resource="node",severity="WARNING"} 1.0\n'
    ) in page


def test_the_config_docs_test_holds_the_new_checks_section(monkeypatch: pytest.MonkeyPatch) -> None:
    shown = set().union(*(documented(e) for e in examples()))
    assert sorted(accepted() - shown) == []
    monkeypatch.setitem(registry.CHECKS, "throwaway", throwaway_check.CHECK)
    assert sorted(accepted() - shown) == ["throwaway.max_gpus"]  # undocumented: the test fails
    example = yaml.safe_load("throwaway:\n  max_gpus: 4\n")  # until the page shows it
    assert documented(example) == {"throwaway.max_gpus"}
    build(Config, example, "docs/configuration.md", registry.sections())


def test_the_new_check_decides_its_node_condition(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.CHECKS, "throwaway", throwaway_check.CHECK)
    default = groups(KubernetesConfig())
    assert default["GPUHardwareReady"] == ("driver", "gpus", "mig", "xid", "throwaway")
    config = Config().with_section("throwaway", throwaway_check.ThrowawayConfig(max_gpus=4))
    result = throwaway_check.run(
        CheckContext(snapshot_host(snapshot("synthetic-h100-8gpu-healthy"))), config
    )
    (hardware, *_) = desired(NodeReport("node-a", now(), [result]), default)
    assert (hardware.type, hardware.status, hardware.reason) == (
        "GPUHardwareReady",
        "True",
        "ThrowawayGpusOver",
    )


def test_the_new_check_is_in_the_summary_view_and_the_audit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(registry.CHECKS, "throwaway", throwaway_check.CHECK)
    assert registry.summary_keys()["throwaway"] == data_keys()["throwaway"] == {"gpus": None}
    config = load_config(config_file(tmp_path, "throwaway: {max_gpus: 4}\n"), registry.sections())
    with in_process_agent(config=config, names=["driver", "throwaway"]) as agent:
        target = f"127.0.0.1:{agent.grpc_port}"
        fetched = fetch_report(target, Credentials(), 10, data_keys(), pb.REPORT_VIEW_SUMMARY)
    assert fetched.report is not None
    throwaway = fetched.report.check("throwaway")
    assert throwaway is not None and throwaway.data == {"gpus": 8}  # its summary keys only
    (node,) = build_cluster([fetched]).to_dict()["nodes"]
    assert (node["status"], [f["code"] for f in node["findings"]]) == (
        "WARNING",
        ["THROWAWAY_GPUS_OVER"],
    )


def test_the_names_the_steps_give_are_the_codes() -> None:
    steps = re.findall(r"^(\d+)\. ", HOW_TO, re.M)
    assert steps == [str(n) for n in range(1, len(steps) + 1)] and len(steps) >= 5
    named = set(re.findall(r"`(gpuprobe(?:\.\w+)+|Config\.\w+)`", HOW_TO))
    assert {"gpuprobe.checks.registry.ORDER", "gpuprobe.checks.record.Check"} <= named
    for name in named:
        assert resolve(name.replace("Config.", "gpuprobe.config.Config.")) is not None, name


def resolve(dotted: str) -> object:
    """The module, or the attribute of the longest module prefix, that `dotted` names."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise AssertionError(f"{dotted} names nothing")
