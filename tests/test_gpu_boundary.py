"""The GPU interface's two boundaries (docs/architecture.md): NVML's functions are named only
in the NVIDIA package (`gpu/nvidia/`) and the transport (`host/`), and checks only judge:
no module under `checks/` reads the node's files or NVML through `host.fs` / `host.nvml`.

Both are read from the code (string literals and attribute reads), not from comments: a
docstring may say which NVML call a fact comes from, a string passed to a call may not.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "agent" / "gpuprobe"
NVML_NAME = re.compile(r"^nvml[A-Z]\w*$")
# Where NVML's functions may be named: the NVIDIA backend and the transport.
NVML_HOMES = ("gpu/nvidia/", "host/")


def _modules(under: str = "") -> list[Path]:
    return sorted((PACKAGE / under).rglob("*.py"))


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstring constants of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def nvml_names(path: Path, base: Path = PACKAGE) -> list[str]:
    """The NVML function names a module's code holds as strings (docstrings aside)."""
    tree = ast.parse(path.read_text())
    docs = _docstrings(tree)
    return [
        f"{path.relative_to(base)}:{node.lineno}: {node.value}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docs
        and NVML_NAME.match(node.value)
    ]


def host_reads(path: Path, base: Path = PACKAGE) -> list[str]:
    """Each `host.fs` / `host.nvml` (any `<name>.fs` where the name is `host`) a module reads."""
    tree = ast.parse(path.read_text())
    return [
        f"{path.relative_to(base)}:{node.lineno}: host.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr in ("fs", "nvml")
        and isinstance(node.value, ast.Name)
        and node.value.id == "host"
    ]


def test_nvml_functions_are_named_only_in_the_nvidia_package_and_the_transport() -> None:
    outside = [
        hit
        for path in _modules()
        if not str(path.relative_to(PACKAGE)).startswith(NVML_HOMES)
        for hit in nvml_names(path)
    ]
    assert outside == []


def test_no_check_reads_the_nodes_files_or_nvml_itself() -> None:
    assert [hit for path in _modules("checks") for hit in host_reads(path)] == []


def test_the_rules_see_what_they_forbid(tmp_path: Path) -> None:
    """The scans find a named NVML call and a file read, and pass over prose (so an empty
    answer above means there are none)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        '"""Asks nvmlDeviceGetName in prose."""\n'
        "def run(host):\n"
        '    """The name (nvmlDeviceGetName)."""\n'
        '    host.nvml.call("nvmlDeviceGetName", 0)\n'
        '    return host.fs.read_text("/proc/driver/nvidia/version")\n'
    )
    assert nvml_names(probe, tmp_path) == ["probe.py:4: nvmlDeviceGetName"]
    assert sorted(host_reads(probe, tmp_path)) == ["probe.py:4: host.nvml", "probe.py:5: host.fs"]
