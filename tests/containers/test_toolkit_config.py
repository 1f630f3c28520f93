"""The NVIDIA Container Toolkit's config.toml and binaries."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT
from gpuprobe.containers.configfile import FileProblem
from gpuprobe.containers.toolkit import (
    OPERATOR_CONFIG,
    PACKAGE_CONFIG,
    ToolkitConfig,
    ToolkitInstall,
    effective_toolkit_config,
    host_binary,
    is_nvidia_runtime_binary,
    load_toolkit_configs,
    parse_toolkit_config,
    read_toolkit,
    read_toolkit_config,
    resolve_binary,
    toolkit_binaries,
)
from gpuprobe.host import Host
from gpuprobe.host.fs import HostFS
from gpuprobe.host.nvml import ReplayNvml

DEFAULT = (ROOT / "tests/fixtures/toolkit/nvidia-container-runtime-config.toml").read_bytes()


def test_the_default_config_written_by_nvidia_ctk() -> None:
    assert parse_toolkit_config(PACKAGE_CONFIG, DEFAULT) == ToolkitConfig(
        path=PACKAGE_CONFIG,
        mode="auto",
        cdi_spec_dirs=("/etc/cdi", "/var/run/cdi"),
        cdi_default_kind="nvidia.com/gpu",
        driver_root="/",
        volume_mounts=False,
    )


def test_cdi_mode_driver_root_and_spec_dirs() -> None:
    raw = (
        b'[nvidia-container-cli]\nroot = "/run/nvidia/driver"\n'
        b'[nvidia-container-runtime]\nmode = "cdi"\n'
        b'[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["/var/run/cdi"]\n'
    )
    config = parse_toolkit_config("/c.toml", raw)
    assert isinstance(config, ToolkitConfig)
    assert (config.mode, config.cdi_spec_dirs, config.driver_root) == (
        "cdi",
        ("/var/run/cdi",),
        "/run/nvidia/driver",
    )


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (
            b'[nvidia-container-runtime]\nmode = "cdl"\n',
            "is invalid: nvidia-container-runtime.mode is 'cdl', not one of auto, legacy, cdi, "
            "csv, jit-cdi",
        ),
        (
            b"nvidia-container-runtime = 3\n",
            "is invalid: nvidia-container-runtime must be a table, not an integer",
        ),
        (
            b'[nvidia-container-runtime.modes.cdi]\nspec-dirs = "/etc/cdi"\n',
            "is invalid: nvidia-container-runtime.modes.cdi.spec-dirs must be a list of "
            "absolute paths",
        ),
        (
            b"[nvidia-container-runtime\n",
            "is not valid TOML: Expected ']' at the end of a table declaration "
            "(at line 1, column 26)",
        ),
    ],
)
def test_mistakes_name_the_key(raw: bytes, problem: str) -> None:
    assert parse_toolkit_config("/c.toml", raw) == FileProblem("/c.toml", problem)


def test_binaries_and_the_gpu_operator_config_win(tmp_path: Path) -> None:
    for path in ("usr/bin/nvidia-ctk", "usr/local/nvidia/toolkit/nvidia-container-runtime"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("#!/bin/sh\n")
        (tmp_path / path).chmod(0o755)
    for path in (PACKAGE_CONFIG, OPERATOR_CONFIG):
        (tmp_path / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path.lstrip("/")).write_bytes(DEFAULT)
    fs = HostFS(tmp_path)
    assert toolkit_binaries(fs) == {
        "nvidia-ctk": ["/usr/bin/nvidia-ctk"],
        "nvidia-container-runtime": ["/usr/local/nvidia/toolkit/nvidia-container-runtime"],
    }
    effective = effective_toolkit_config(load_toolkit_configs(fs))
    assert isinstance(effective, ToolkitConfig) and effective.path == OPERATOR_CONFIG
    assert resolve_binary(fs, "nvidia-ctk") == "/usr/bin/nvidia-ctk"
    assert resolve_binary(fs, "/usr/local/nvidia/toolkit/nvidia-container-runtime") is not None
    assert resolve_binary(fs, "nvidia-container-runtime") is None  # not in PATH's directories
    assert resolve_binary(fs, "bin/nvidia-ctk") is None
    host = Host(fs=fs, nvml=ReplayNvml({"format": 1, "calls": []}), node_name="gpu-node-17")
    configs = load_toolkit_configs(fs)
    assert read_toolkit(host) == ToolkitInstall(toolkit_binaries(fs), configs, effective)
    assert read_toolkit_config(host) == effective
    assert host_binary(host, "nvidia-ctk") == "/usr/bin/nvidia-ctk"
    assert host_binary(host, "nvidia-container-runtime") is None


def test_nvidia_runtime_binaries() -> None:
    assert is_nvidia_runtime_binary("/usr/local/nvidia/toolkit/nvidia-container-runtime.cdi")
    assert is_nvidia_runtime_binary("nvidia-container-runtime")
    assert not is_nvidia_runtime_binary("/usr/bin/runc")
    assert not is_nvidia_runtime_binary(None)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_give_a_config_or_a_problem(raw: bytes) -> None:
    assert isinstance(parse_toolkit_config("/c.toml", raw), ToolkitConfig | FileProblem)


@settings(max_examples=300, deadline=None)
@given(
    mode=st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=8)
    | st.lists(st.integers(), max_size=2),
    dirs=st.none() | st.integers() | st.lists(st.text(max_size=6) | st.integers(), max_size=3),
    root=st.none() | st.text(max_size=6) | st.booleans(),
)
def test_wrong_types_in_valid_toml_give_a_problem(mode: object, dirs: object, root: object) -> None:
    def value(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v.encode("unicode_escape").decode().replace('"', '\\"') + '"'
        if isinstance(v, list):
            return "[" + ", ".join(value(i) for i in v) + "]"
        return str(v)

    text = ""
    if root is not None:
        text += f"[nvidia-container-cli]\nroot = {value(root)}\n"
    if mode is not None:
        text += f"[nvidia-container-runtime]\nmode = {value(mode)}\n"
    if dirs is not None:
        text += f"[nvidia-container-runtime.modes.cdi]\nspec-dirs = {value(dirs)}\n"
    result = parse_toolkit_config("/c.toml", text.encode())
    assert isinstance(result, ToolkitConfig | FileProblem)
    if isinstance(result, ToolkitConfig):
        assert result.mode in ("auto", "legacy", "cdi", "csv", "jit-cdi")
        assert all(d.startswith("/") for d in result.cdi_spec_dirs)
