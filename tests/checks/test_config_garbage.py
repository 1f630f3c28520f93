"""Garbage in any configuration file these checks read gives findings, never an exception.

Each example writes bytes (random, or well-formed JSON/YAML of random shape, which is also
what a wrong-typed config looks like) into the files of a GPU node running containerd,
Docker and CRI-O under Kubernetes, then runs the checks themselves, outside the runner that
would otherwise turn an exception into CHECK_FAILED.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuprobe.checks import cdi, device_plugin, toolkit
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.nvidia import sharing
from gpuprobe.config import Config
from gpuprobe.host import snapshot_host
from gpuprobe.report import CheckResult
from helpers import config

CONFIG_FILES = (
    "/etc/containerd/config.toml",
    "/etc/containerd/conf.d/99-nvidia.toml",
    "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
    "/etc/docker/daemon.json",
    "/etc/crio/crio.conf",
    "/etc/crio/crio.conf.d/99-nvidia.conf",
    "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json",
    "/etc/nvidia-container-runtime/config.toml",
    "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime/config.toml",
    "/etc/cdi/nvidia.json",
    "/var/run/cdi/nvidia.yaml",
)
SOCKETS = (
    "/run/containerd/containerd.sock",
    "/run/k3s/containerd/containerd.sock",
    "/run/docker.sock",
    "/run/crio/crio.sock",
    "/run/cri-dockerd.sock",
    "/var/lib/kubelet/device-plugins/kubelet.sock",
    "/var/lib/kubelet/device-plugins/nvidia-gpu.sock",
    "/usr/bin/nvidia-container-runtime",
)
SHAPES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=10,
)
CONTENT = st.binary(max_size=300) | SHAPES.map(lambda v: json.dumps(v).encode())


def node(root: Path, files: dict[str, bytes]) -> Path:
    """A one-GPU Kubernetes node with every engine running and `files` in place."""
    (root / "snapshot.json").write_text('{"format": 1, "node": "garbage"}')
    processes = [
        {"pid": 10, "name": "containerd", "cmdline": ["containerd"]},
        {"pid": 11, "name": "dockerd", "cmdline": ["dockerd"]},
        {"pid": 12, "name": "crio", "cmdline": ["crio"]},
    ]
    (root / "processes.json").write_text(json.dumps(processes))
    pci = root / "rootfs/sys/bus/pci/devices/0000:18:00.0"
    pci.mkdir(parents=True)
    for name, value in (("vendor", "0x10de"), ("device", "0x2330"), ("class", "0x030200")):
        (pci / name).write_text(value + "\n")
    for path, raw in {**{s: b"" for s in SOCKETS}, **files}.items():
        dest = root / "rootfs" / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(raw)
    return root


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    contents=st.fixed_dictionaries({}, optional={p: CONTENT for p in CONFIG_FILES}),
    plugin_config=CONTENT,
)
def test_garbage_never_raises(
    tmp_path_factory: object, contents: dict[str, bytes], plugin_config: bytes
) -> None:
    root = Path(tmp_path_factory.mktemp("node"))  # type: ignore[attr-defined]
    host = snapshot_host(str(node(root, contents)))
    plugin = root / "plugin.yaml"
    plugin.write_bytes(plugin_config)
    for cfg in (Config(), config(device_plugin={"config_file": str(plugin)})):
        for check in (toolkit, cdi, device_plugin, sharing):
            result = check.run(CheckContext(host), cfg)
            assert isinstance(result, CheckResult) and result.name == check.NAME
            assert all("\n" not in f.message for f in result.findings)
            json.dumps(result.to_dict())  # the report can always be written


def test_garbage_is_named_file_by_file(tmp_path: Path) -> None:
    files = {p: b"\xff\xfe garbage" for p in CONFIG_FILES}
    host = snapshot_host(str(node(tmp_path, files)))
    ctx = CheckContext(host)  # one runner's context: its states
    invalid = sorted(
        f.resource for f in toolkit.run(ctx, Config()).findings if f.code == "CONFIG_INVALID"
    )
    # Every engine and toolkit file, except the containerd drop-in: the root file that would
    # import it cannot be read, and the OCI hook, which is only looked for.
    assert invalid == sorted(
        f"file:{p}"
        for p in CONFIG_FILES
        if "cdi" not in p and "hooks.d" not in p and p != "/etc/containerd/conf.d/99-nvidia.toml"
    )
    specs = sorted(f.resource for f in cdi.run(ctx, Config()).findings)
    assert specs == ["file:/etc/cdi/nvidia.json", "file:/var/run/cdi/nvidia.yaml"]
