"""The Dockerfile: hadolint's rules, and the structure docs/deploy.md promises (it cannot be
built here: no container engine and no registry); its base pinned by digest; the same image
as scripts/build-image makes (layout, user, entrypoint, command, environment, ports: the
script's settings, which tests/image holds to a built image); and no comment that says the
DaemonSet runs it otherwise than it does."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import subprocess
import tomllib
from pathlib import Path
from types import ModuleType

from conftest import ROOT
from deployment import DAEMONSET, DOCKERFILE, find, find_tool, objects

BASE = r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}"


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


def test_two_stages_on_the_same_slim_python_311_pinned_by_digest() -> None:
    build, final = stages()
    assert re.fullmatch(BASE + " AS build", build[0][1])
    assert re.fullmatch(BASE, final[0][1])
    assert build[0][1] == final[0][1] + " AS build"  # one base for both
    labels = " ".join(rest for k, rest in final if k == "LABEL")
    digest = final[0][1].split("@", 1)[1]
    assert f'org.opencontainers.image.base.digest="{digest}"' in labels


def build_image_script() -> ModuleType:
    """scripts/build-image as a module (its settings)."""
    path = ROOT / "scripts" / "build-image"
    loader = importlib.machinery.SourceFileLoader("build_image", str(path))
    spec = importlib.util.spec_from_loader("build_image", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_the_same_image_as_the_recipe_makes() -> None:
    recipe = build_image_script()
    _, final = stages()
    assert ("USER", recipe.USER) in final
    assert ("ENTRYPOINT", '["gpuprobe"]') in final and ("CMD", '["serve"]') in final
    (expose,) = [rest for k, rest in final if k == "EXPOSE"]
    assert {f"{p}/tcp" for p in expose.split()} == set(recipe.PORTS)
    (env,) = [rest for k, rest in final if k == "ENV"]
    settings = dict(item.split("=", 1) for item in env.split())
    recipe_env = dict(item.split("=", 1) for item in recipe.ENV)
    assert settings.keys() == recipe_env.keys()
    assert settings["PATH"] == f"{recipe.VENV}/bin:$PATH"
    assert recipe_env["PATH"].startswith(f"{recipe.VENV}/bin:")
    for key in settings.keys() - {"PATH"}:
        assert settings[key] == recipe_env[key], key
    copies = [rest for k, rest in final if k == "COPY"]
    assert copies == [f"--from=build {recipe.VENV} {recipe.VENV}"]
    (run,) = [rest for k, rest in final if k == "RUN"]
    assert f"--uid {recipe.USER} " in run


def comments(path: Path) -> str:
    return "\n".join(
        line.strip().lstrip("#").strip()
        for line in path.read_text().splitlines()
        if line.strip().startswith("#")
    )


def test_no_comment_calls_the_privileged_container_unprivileged() -> None:
    """The DaemonSet's container is privileged (docs/deploy.md, "What needs root"): no comment
    in the Dockerfile or the manifests says it runs without capabilities."""
    container = find(objects("base"), "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["privileged"] is True
    sources = [DOCKERFILE, *sorted(DAEMONSET.rglob("*.yaml"))]
    wrong = re.compile(r"without\s+(any\s+)?capabilit|no\s+capabilities|unprivileged container")
    for path in sources:
        text = " ".join(comments(path).split())
        assert not wrong.search(text), f"{path.relative_to(ROOT)}: {wrong.search(text)}"


def test_the_final_stage_holds_only_the_environment_and_its_own_user() -> None:
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
    (run,) = [" ".join(rest.split()) for k, rest in build if k == "RUN"]
    # the recipe's locked dependencies (tests/image), then the package without its own
    lock = "pip install --no-compile --no-deps --require-hashes "
    lock += "--requirement scripts/image/requirements.txt "
    assert lock in run
    assert "pip install --no-compile --no-deps /src " in run + " "
    assert "pip check" in run
    assert "[test]" not in run
    assert "pip uninstall --yes pip" in run
    copies = [rest for k, rest in build if k == "COPY"]
    assert copies == [
        "pyproject.toml README.md ./",
        "scripts/image/requirements.txt ./scripts/image/",
        "agent ./agent",
    ]


def test_oci_labels_name_the_version_of_the_package() -> None:
    _, final = stages()
    labels = " ".join(rest for k, rest in final if k == "LABEL")
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for key in ("title", "description", "version", "licenses", "revision", "source", "base.name"):
        assert f"org.opencontainers.image.{key}=" in labels, key
    assert ("ARG", f"VERSION={version}") in final


def test_dockerignore_sends_only_what_the_build_copies() -> None:
    lines = [
        line
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert lines[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!agent/", "!scripts/image/requirements.txt"} <= set(
        lines
    )
