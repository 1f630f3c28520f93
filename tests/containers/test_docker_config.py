"""Docker's daemon.json as nvidia-ctk writes it, and what goes wrong in it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from gpuprobe.containers.docker import DAEMON_JSON, load_docker
from gpuprobe.containers.runtime import EngineConfig
from gpuprobe.host.fs import HostFS

NVIDIA_CTK = (ROOT / "tests/fixtures/toolkit/docker-daemon.json").read_text()


def load(tmp_path: Path, text: str | bytes) -> EngineConfig:
    path = tmp_path / "etc/docker/daemon.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return load_docker(HostFS(tmp_path))


def test_nvidia_ctk_runtime(tmp_path: Path) -> None:
    config = load(tmp_path, NVIDIA_CTK)
    assert {n: r.binary for n, r in config.runtimes.items()} == {
        "nvidia": "nvidia-container-runtime"
    }
    assert (config.effective_default, config.cdi_enabled, config.problems) == ("runc", None, [])


def test_default_runtime_and_cdi(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        '{"default-runtime": "nvidia", "features": {"cdi": true}, '
        '"runtimes": {"nvidia": {"args": [], "path": "/usr/bin/nvidia-container-runtime"}}}',
    )
    assert (config.effective_default, config.cdi_enabled) == ("nvidia", True)


def test_absent_file_is_dockers_defaults() -> None:
    config = load_docker(HostFS("/nonexistent-root"))
    assert (config.exists, config.runtimes, config.problems) == (False, {}, [])


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            '{"runtimes": {"nvidia": {"path": 1}}}',
            "is invalid: runtimes.nvidia.path must be a string",
        ),
        ('{"runtimes": []}', "is invalid: runtimes must be a table"),
        ('["runtimes"]', "is invalid: must hold a JSON object, not a list"),
        ('{"runtimes": {\n"nvidia": }', "is not valid JSON: line 2 column 11: Expecting value"),
        ('{"features": {"cdi": "yes"}}', "is invalid: features.cdi must be true or false"),
    ],
)
def test_mistakes_name_the_file(tmp_path: Path, text: str, problem: str) -> None:
    config = load(tmp_path, text)
    assert [(p.path, p.problem) for p in config.problems] == [(DAEMON_JSON, problem)]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda c: (
        st.lists(c, max_size=3)
        | st.dictionaries(
            st.sampled_from(["runtimes", "nvidia", "path", "default-runtime", "features", "cdi"]),
            c,
            max_size=3,
        )
    ),
    max_leaves=10,
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=st.binary(max_size=300) | JSON.map(lambda v: __import__("json").dumps(v).encode()))
def test_any_bytes_or_shape_give_a_config(tmp_path: Path, raw: bytes) -> None:
    config = load(tmp_path, raw)
    assert isinstance(config, EngineConfig)
    assert all(isinstance(r.binary, str | None) for r in config.runtimes.values())
