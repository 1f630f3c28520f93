"""Which engines run, which configuration each reads, and which run GPU containers."""

from __future__ import annotations

import pytest

from conftest import snapshot
from gpuprobe.containers.engines import containerd_config_of, discover_engines
from gpuprobe.host import snapshot_host
from gpuprobe.host.processes import Process


@pytest.mark.parametrize(
    ("cmdline", "path"),
    [
        (("/usr/bin/containerd",), "/etc/containerd/config.toml"),
        (
            ("containerd", "-c", "/var/lib/rancher/k3s/agent/etc/containerd/config.toml"),
            "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
        ),
        (("containerd", "--config=/opt/c.toml", "--log-level", "info"), "/opt/c.toml"),
        (("containerd", "--config", "/opt/d.toml"), "/opt/d.toml"),
        ((), "/etc/containerd/config.toml"),
    ],
)
def test_containerd_config_from_its_command_line(cmdline: tuple[str, ...], path: str) -> None:
    assert containerd_config_of(Process(1, "containerd", cmdline)) == path


def test_docker_on_a_plain_host_runs_gpu_containers_its_containerd_does_not() -> None:
    engines = discover_engines(snapshot_host(snapshot("synthetic-docker-nvidia-runtime")), False)
    assert [(e.config.engine, e.in_use, e.judged) for e in engines] == [
        ("containerd", True, False),
        ("docker", True, True),
    ]


def test_on_kubernetes_docker_needs_cri_dockerd() -> None:
    engines = discover_engines(snapshot_host(snapshot("synthetic-docker-nvidia-runtime")), True)
    assert [(e.config.engine, e.judged) for e in engines] == [
        ("containerd", False),
        ("docker", False),
    ]


def test_k3s_is_found_by_its_process_and_socket() -> None:
    (engine,) = discover_engines(snapshot_host(snapshot("synthetic-k3s-no-nvidia-runtime")), True)
    assert (engine.config.flavor, engine.judged) == ("k3s", True)
    assert engine.evidence == [
        "process containerd (pid 2077)",
        "socket /run/k3s/containerd/containerd.sock",
    ]


def test_no_engine_on_a_bare_gpu_node() -> None:
    assert discover_engines(snapshot_host(snapshot("synthetic-h100-8gpu-healthy")), False) == []
