"""Which container engines run on the node, which configuration each uses, and which run pods.

An engine is in use when its socket is there or its process runs. containerd's process names
its configuration (`containerd -c /var/lib/rancher/k3s/agent/etc/containerd/config.toml` under
k3s); without `-c` it reads /etc/containerd/config.toml. On a Kubernetes node the kubelet talks
to containerd's CRI plugin, to CRI-O, or to Docker through cri-dockerd; on other nodes Docker
(and any engine with a CRI) runs the GPU containers. Docker's own containerd has its CRI plugin
disabled (`disabled_plugins = ["cri"]`) and is not judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuprobe.containers.containerd import CONTAINERD_FLAVORS, load_containerd
from gpuprobe.containers.crio import CRIO_CONF, CRIO_DROP_INS, CRIO_SOCKETS, load_crio
from gpuprobe.containers.docker import DAEMON_JSON, DOCKER_SOCKETS, load_docker
from gpuprobe.containers.runtime import EngineConfig
from gpuprobe.host import Host
from gpuprobe.host.processes import Process

DEFAULT_CONTAINERD_CONFIG = CONTAINERD_FLAVORS["containerd"][0]
CRI_DOCKERD_SOCKETS = ("/run/cri-dockerd.sock", "/var/run/cri-dockerd.sock")


@dataclass
class Engine:
    """One engine: its configuration, whether it runs, and whether its runtimes must have GPUs."""

    config: EngineConfig
    evidence: list[str] = field(default_factory=list)  # why it is taken as running
    judged: bool = False  # whether GPU containers run through it, so it needs the nvidia runtime

    @property
    def in_use(self) -> bool:
        """Whether the engine runs (its socket is there or its process runs)."""
        return bool(self.evidence)

    def to_data(self) -> dict[str, Any]:
        """The engine as report data."""
        return {
            **self.config.to_data(),
            "in_use": self.in_use,
            "in_use_because": self.evidence,
            "runs_gpu_containers": self.judged,
        }


def containerd_config_of(process: Process) -> str:
    """The configuration file a containerd process reads (`-c`/`--config`, else the default)."""
    args = list(process.cmdline[1:])
    for i, arg in enumerate(args):
        if arg in ("-c", "--config") and i + 1 < len(args):
            return args[i + 1]
        for prefix in ("-c=", "--config="):
            if arg.startswith(prefix):
                return arg[len(prefix) :]
    return DEFAULT_CONTAINERD_CONFIG


def discover_engines(host: Host, kubernetes: bool) -> list[Engine]:
    """Every engine installed or running on the node, each marked judged or not."""
    fs = host.fs
    processes = host.processes()
    engines: list[Engine] = []
    by_config: dict[str, list[str]] = {}
    for p in processes.named("containerd"):
        by_config.setdefault(containerd_config_of(p), []).append(
            f"process containerd (pid {p.pid})"
        )
    for flavor, (path, socket, _) in CONTAINERD_FLAVORS.items():
        evidence = list(by_config.pop(path, []))
        # k3s and RKE2 share one socket: it is theirs only when their config is there.
        if fs.is_socket(socket) and (flavor == "containerd" or fs.exists(path)):
            evidence.append(f"socket {socket}")
        if evidence or fs.exists(path):
            engines.append(Engine(load_containerd(fs, flavor, path), evidence))
    for path, evidence in sorted(by_config.items()):  # a containerd with its own config path
        if path.startswith("/"):
            engines.append(Engine(load_containerd(fs, "containerd", path), evidence))
    docker = [f"socket {s}" for s in DOCKER_SOCKETS if fs.is_socket(s)][:1]
    docker += [f"process dockerd (pid {p.pid})" for p in processes.named("dockerd")]
    if docker or fs.exists(DAEMON_JSON):
        engines.append(Engine(load_docker(fs), docker))
    crio = [f"socket {s}" for s in CRIO_SOCKETS if fs.is_socket(s)][:1]
    crio += [f"process crio (pid {p.pid})" for p in processes.named("crio")]
    if crio or fs.exists(CRIO_CONF) or fs.is_dir(CRIO_DROP_INS):
        engines.append(Engine(load_crio(fs), crio))
    cri_dockerd = any(fs.is_socket(s) for s in CRI_DOCKERD_SOCKETS) or bool(
        processes.named("cri-dockerd")
    )
    for engine in engines:
        engine.judged = engine.in_use and _runs_gpu_containers(engine, kubernetes, cri_dockerd)
    return engines


def _runs_gpu_containers(engine: Engine, kubernetes: bool, cri_dockerd: bool) -> bool:
    if engine.config.engine == "containerd":
        return engine.config.cri_enabled
    if engine.config.engine == "docker":
        return cri_dockerd or not kubernetes
    return True
