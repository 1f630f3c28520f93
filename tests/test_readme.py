"""README's list of what the tests need holds everything a test skips without."""

from __future__ import annotations

import re

from conftest import ROOT
from deployment import TOOL_VENVS

README = (ROOT / "README.md").read_text()
NEEDS = README.split("The second runs the whole test suite", 1)[1].split("\n## ", 1)[0]
# A tool the README names by the package that brings it.
PACKAGE = {
    "ib_write_bw": "perftest",
    "fincore": "util-linux",
    "setpriv": "util-linux",
    "ip": "iproute2",
    "tc": "iproute2",
}


def required_tools() -> set[str]:
    """Every tool a test asks for by name (`require_tool("jq")`, `find_tool("checkov")`)."""
    call = re.compile(r'\b(?:require_tool|find_tool)\("([^"]+)"\)')
    return {
        name for path in (ROOT / "tests").rglob("*.py") for name in call.findall(path.read_text())
    }


def test_every_tool_a_test_requires_is_named() -> None:
    tools = required_tools()
    assert {"promtool", "checkov", "ib_write_bw"} <= tools  # the scan finds them
    unnamed = sorted(t for t in tools if not re.search(rf"\b{re.escape(t)}\b", NEEDS))
    assert unnamed == []
    packages = sorted(
        {PACKAGE[t] for t in tools if t in PACKAGE} - set(re.findall(r"`([\w-]+)`", NEEDS))
    )
    assert packages == []


def test_the_tool_environments_are_named_with_the_commands_ci_uses() -> None:
    """The virtual environments the deployment tests look in (checkov, the Prometheus
    Operator models): where, and the very commands `.ci/run` makes them with."""
    ci = (ROOT / ".ci/run").read_text().splitlines()
    for venv in TOOL_VENVS:
        commands = [
            line
            for line in ci
            if line.startswith("python3 -m venv " + str(venv))
            or line.startswith(f"{venv}/bin/pip install")
        ]
        assert len(commands) == 2, venv
        for command in commands:
            assert command in NEEDS
    assert "Prometheus Operator models" in NEEDS
