"""The effects on the cluster and the daemon's wiring read what they know of the checks from
their records (docs/architecture.md, "The check record"): no module of `gpuprobe.effects`,
`gpuprobe.kube`, the daemon (`gpuprobe.daemon`) or its faces' wiring (`serve.agent`,
`serve.service`), nor attribution, names a check or a finding code of a check in a string of
its own. The agent's own result (`kubernetes`: TAINT_WITHHELD, KUBERNETES_UNREACHABLE,
DEVICE_TAINT_WITHHELD and EVICTION_WITHHELD) is the effects'."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import ROOT
from gpuprobe.checks import registry
from test_docs_codes import CHECKS_DOC, raised_codes

PACKAGE = ROOT / "agent" / "gpuprobe"
READERS = [
    *sorted((PACKAGE / "effects").glob("*.py")),
    *sorted((PACKAGE / "kube").glob("*.py")),
    *sorted((PACKAGE / "daemon").glob("*.py")),
    PACKAGE / "serve" / "agent.py",
    PACKAGE / "serve" / "service.py",
    PACKAGE / "checks" / "attribution.py",
]
# The effects' own findings (the `kubernetes` result).
OWN = {"TAINT_WITHHELD", "KUBERNETES_UNREACHABLE", "DEVICE_TAINT_WITHHELD", "EVICTION_WITHHELD"}
# Words that are a check's name and also a field's own word: the Kubernetes API's resource
# `pods` (kube/), a MIG device's resource prefix `mig:` and data key (attribution), a DRA
# ResourceSlice's and DeviceTaintRule selector's `driver` and the eviction record's per-GPU
# counts `gpus` (effects/).
FIELD_WORDS = {("kube", "pods"), ("checks", "mig"), ("effects", "driver"), ("effects", "gpus")}
DOCUMENTED = re.compile(r"^\| `([A-Z][A-Z0-9_]+)` \|", re.M)  # docs/checks.md's code tables


def strings(path: Path) -> set[str]:
    """The string constants of a module, its docstrings left out."""
    tree = ast.parse(path.read_text(), str(path))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    }


def named(path: Path) -> set[str]:
    """The checks and check codes a module names."""
    checks = set(registry.CHECKS)
    codes = (raised_codes() | set(DOCUMENTED.findall(CHECKS_DOC))) - OWN
    words = {(path.parent.name, s) for s in strings(path)}
    return {s for floor, s in words - FIELD_WORDS if s in checks or s in codes}


def test_the_effects_and_the_daemons_wiring_name_no_check_and_no_code() -> None:
    found = {str(p.relative_to(ROOT)): named(p) for p in READERS}
    assert {path: names for path, names in found.items() if names} == {}


def test_a_named_check_or_code_is_found(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text(
        '"""Mentions xid and GPU_LOST in words only."""\n'
        'WOKEN = ["xid"]\nCODES = {"NODE_PREEMPTION_NOTICE": "preemption"}\n'
    )
    assert named(module) == {"xid", "NODE_PREEMPTION_NOTICE"}
