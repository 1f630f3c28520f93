"""The GPU interface's two boundaries (docs/architecture.md): NVML's functions are named only
in the NVIDIA package (`gpu/nvidia/`) and the transport (`host/`), and checks only judge:
no module under `checks/` reads the node through the host's transports (`host.fs`,
`host.nvml`, `host.podresources`, `host.processes()`, `host.memory`, `host.pod_statuses`,
`host.metadata`, `host.netlink`); its readers do.

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


# The host's transports, which only readers (and the host itself) use.
TRANSPORTS = (
    "fs",
    "nvml",
    "podresources",
    "processes",
    "list_processes",
    "memory",
    "pod_statuses",
    "metadata",
    "netlink",
)


def host_reads(path: Path, base: Path = PACKAGE) -> list[str]:
    """Each transport of the host a module reads: `host.<transport>` or `<x>.host.<transport>`
    (`ctx.host.processes()`), for the transports above."""
    tree = ast.parse(path.read_text())
    return [
        f"{path.relative_to(base)}:{node.lineno}: host.{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr in TRANSPORTS
        and (
            (isinstance(node.value, ast.Name) and node.value.id == "host")
            or (isinstance(node.value, ast.Attribute) and node.value.attr == "host")
        )
    ]


def test_nvml_functions_are_named_only_in_the_nvidia_package_and_the_transport() -> None:
    outside = [
        hit
        for path in _modules()
        if not str(path.relative_to(PACKAGE)).startswith(NVML_HOMES)
        for hit in nvml_names(path)
    ]
    assert outside == []


def test_no_check_reads_the_node_itself() -> None:
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


def test_the_rule_sees_a_check_that_asks_the_kubelet_or_lists_processes(tmp_path: Path) -> None:
    """The check-side rule finds the kubelet asked, the process table listed and the host's
    memory used, through `host` or `ctx.host`; what a reader returns, and a variable merely
    named like a transport, pass."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "def run(ctx, config):\n"
        "    host = ctx.host\n"
        "    answer = host.podresources.ask('/var/lib/kubelet/pod-resources/kubelet.sock', 2)\n"
        "    daemons = ctx.host.processes().named('nvidia-cuda-mps-control')\n"
        "    kept = ctx.host.memory.of('x')\n"
        "    listed = host.pod_statuses.ask(host.node_name)\n"
        "    processes = mps_control_daemons(host)\n"
        "    return answer.processes, processes, daemons, kept, listed\n"
    )
    assert sorted(host_reads(probe, tmp_path)) == [
        "probe.py:3: host.podresources",
        "probe.py:4: host.processes",
        "probe.py:5: host.memory",
        "probe.py:6: host.pod_statuses",
    ]
