"""The Dockerfile: hadolint's rules, and the structure docs/deploy.md promises (it cannot be
built here: no container engine)."""

from __future__ import annotations

import re
import subprocess
import tomllib

from conftest import ROOT
from deployment import DOCKERFILE, find_tool


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def stages() -> list[list[tuple[str, str]]]:
    """The instructions of each stage."""
    found: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions():
        if keyword == "FROM":
            found.append([])
        assert found, "an instruction before the first FROM"
        found[-1].append((keyword, rest))
    return found


def test_hadolint_finds_nothing() -> None:
    hadolint = find_tool("hadolint")
    out = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout == ""


def test_two_stages_on_the_same_slim_python_311() -> None:
    build, final = stages()
    assert build[0] == ("FROM", "python:3.11-slim-bookworm AS build")
    assert final[0] == ("FROM", "python:3.11-slim-bookworm")


def test_the_final_stage_holds_only_the_environment_and_runs_unprivileged() -> None:
    _, final = stages()
    keywords = [k for k, _ in final]
    copies = [rest for k, rest in final if k == "COPY"]
    assert copies == ["--from=build /opt/gpuprobe /opt/gpuprobe"]
    runs = [rest for k, rest in final if k == "RUN"]
    assert len(runs) == 1 and runs[0].startswith("useradd --system --uid 10001")
    assert not any("pip" in r or "apt" in r for r in runs)  # nothing installed here
    assert ("USER", "10001") in final
    assert keywords.index("USER") > keywords.index("RUN")
    assert ("ENTRYPOINT", '["gpuprobe"]') in final
    assert ("CMD", '["serve"]') in final


def test_the_build_stage_installs_the_package_without_its_test_extra() -> None:
    build, _ = stages()
    (run,) = [rest for k, rest in build if k == "RUN"]
    assert "pip install --no-compile /src " in run + " "
    assert "[test]" not in run
    assert "pip uninstall --yes pip" in run
    copies = [rest for k, rest in build if k == "COPY"]
    assert copies == ["pyproject.toml README.md ./", "agent ./agent"]


def test_oci_labels_name_the_version_of_the_package() -> None:
    _, final = stages()
    labels = " ".join(rest for k, rest in final if k == "LABEL")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for key in ("title", "description", "version", "licenses", "base.name"):
        assert f"org.opencontainers.image.{key}=" in labels, key
    assert ("ARG", f"VERSION={version}") in final


def test_dockerignore_sends_only_what_the_build_copies() -> None:
    lines = [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert lines[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!agent/"} <= set(lines)
