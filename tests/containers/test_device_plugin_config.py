"""The NVIDIA device plugin's configuration: parsed exactly, any bytes give a config or a problem
(which the `device_plugin` check reports as CONFIG_INVALID)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT
from gpuprobe.checks.device_plugin import config_invalid
from gpuprobe.config import Config
from gpuprobe.containers.configfile import FileProblem
from gpuprobe.containers.device_plugin import (
    DevicePluginConfig,
    PluginConfigFile,
    SharedResource,
    device_plugin_file,
    parse_device_plugin_config,
)
from gpuprobe.host import snapshot_host
from gpuprobe.report import Finding
from helpers import config


def finding(result: DevicePluginConfig | FileProblem) -> Finding:
    """The CONFIG_INVALID finding the check makes of what the reader gave (a problem)."""
    assert isinstance(result, FileProblem)
    return config_invalid(result)


TIME_SLICING = b"""version: v1
flags:
  migStrategy: mixed
  plugin:
    deviceListStrategy: [envvar, cdi-annotations]
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""


def test_a_full_config() -> None:
    config = parse_device_plugin_config("/etc/dp/config.yaml", TIME_SLICING)
    assert config == DevicePluginConfig(
        path="/etc/dp/config.yaml",
        mig_strategy="mixed",
        device_list_strategy=("envvar", "cdi-annotations"),
        time_slicing=(SharedResource("nvidia.com/gpu", 4),),
        mps=(),
    )


def test_an_empty_file_is_the_defaults() -> None:
    config = parse_device_plugin_config("/c", b"")
    assert config == DevicePluginConfig(path="/c")


def test_wrong_values_name_the_key_and_the_file() -> None:
    found = finding(parse_device_plugin_config("/c.yaml", b"flags: {migStrategy: all}\n"))
    assert (found.code, found.severity.value, found.action.value, found.resource) == (
        "CONFIG_INVALID",
        "WARNING",
        "FIX_CONFIG",
        "file:/c.yaml",
    )
    assert "flags.migStrategy is 'all'" in found.message
    replicas = finding(
        parse_device_plugin_config(
            "/c.yaml", b"sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 0}]}}"
        )
    )
    assert "sharing.mps.resources[0].replicas" in replicas.message


def test_yaml_errors_carry_line_and_column() -> None:
    found = finding(parse_device_plugin_config("/c.yaml", b"flags:\n  migStrategy: [\n"))
    assert "line 3 column 1" in found.message


def test_a_missing_file_is_a_finding(tmp_path: Path) -> None:
    host = snapshot_host(str(ROOT / "tests/snapshots/kvm-epyc-nogpu"))
    absent = config(device_plugin={"config_file": str(tmp_path / "absent.yaml")})
    file = device_plugin_file(host, absent)
    assert file is not None
    found = finding(file.result)
    assert "cannot be read" in found.message


def test_the_file_comes_with_what_it_gave(tmp_path: Path) -> None:
    snapshot = ROOT / "tests/snapshots/synthetic-mps-daemon-running"
    host = snapshot_host(str(snapshot))
    found = device_plugin_file(host, Config())  # the snapshot's own copy
    assert found is not None and found.path == "/etc/nvidia-device-plugin/config.yaml"
    assert isinstance(found.result, DevicePluginConfig)
    assert found.result.sharing_strategy == "mps"
    bad = tmp_path / "bad.yaml"
    bad.write_text("flags: {migStrategy: [single\n")
    host = snapshot_host(str(ROOT / "tests/snapshots/kvm-epyc-nogpu"))
    found = device_plugin_file(host, config(device_plugin={"config_file": str(bad)}))
    assert isinstance(found, PluginConfigFile) and found.path == str(bad)
    assert finding(found.result).resource == f"file:{bad}"
    assert device_plugin_file(host, Config()) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_give_a_config_or_a_problem(raw: bytes) -> None:
    result = parse_device_plugin_config("/c.yaml", raw)
    assert isinstance(result, DevicePluginConfig | FileProblem)


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "version",
                        "flags",
                        "migStrategy",
                        "plugin",
                        "sharing",
                        "mps",
                        "timeSlicing",
                        "resources",
                        "name",
                        "replicas",
                        "deviceListStrategy",
                    ]
                ),
                children,
                max_size=4,
            )
        ),
        max_leaves=12,
    )
)
def test_any_yaml_shape_gives_a_config_or_a_problem(doc: object) -> None:
    import yaml

    result = parse_device_plugin_config("/c.yaml", yaml.safe_dump(doc).encode())
    assert isinstance(result, DevicePluginConfig | FileProblem)
