"""IMEX on multi-node NVLink (GB200 NVL72 and kin): is this node in such a domain, and is its
IMEX daemon there to share GPU memory across the domain's nodes?

Sources: NVIDIA IMEX guide (https://docs.nvidia.com/multi-node-nvlink-systems/imex-guide/) and
NVML's `nvmlGpuFabricInfo_t`. A GPU belongs to a multi-node NVLink domain when its fabric info
names a cluster: `clusterUuid` not all zeros (`nvidia-smi -q` prints it as `ClusterUUID`, and
`CliqueId` beside it). A single-node NVLink system (an HGX board behind its own NVSwitches)
reports a zero cluster UUID and clique 0: IMEX does not concern it. On a domain member the
IMEX daemon `nvidia-imex` runs with its config (`-c`, default `/etc/nvidia-imex/config.cfg`),
whose `IMEX_NODE_CONFIG_FILE` (default `/etc/nvidia-imex/nodes_config.cfg`) lists the domain's
nodes' addresses one a line; workloads reach IMEX through channel devices
`/dev/nvidia-caps-imex-channels/channel<N>` (NCCL: "MNNVL is available but not working. Check
IMEX channel configuration" when none is there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuprobe.gpu.nvidia.device import Device, gpu_count
from gpuprobe.host import Host

DAEMON = "nvidia-imex"
DEFAULT_CONFIG = "/etc/nvidia-imex/config.cfg"
DEFAULT_NODES = "/etc/nvidia-imex/nodes_config.cfg"
CHANNELS = "/dev/nvidia-caps-imex-channels"
FABRIC_INFO = ("nvmlDeviceGetGpuFabricInfoV", "nvmlDeviceGetGpuFabricInfo")


@dataclass
class ImexFacts:
    """What the node says about IMEX: the GPUs in a multi-node NVLink domain (by index, with
    the cluster UUID and clique they name), the daemon, its nodes file, the channels."""

    domain_gpus: dict[int, tuple[str, int]] = field(default_factory=dict)
    daemon_pids: list[int] = field(default_factory=list)
    config_file: str | None = None
    nodes_file: str | None = None
    nodes: list[str] | None = None  # None: the nodes file is missing or unreadable
    channels: list[str] = field(default_factory=list)

    @property
    def in_domain(self) -> bool:
        """Whether any GPU here belongs to a multi-node NVLink domain."""
        return bool(self.domain_gpus)

    def to_data(self) -> dict[str, Any]:
        """The facts as the check's data keeps them."""
        return {
            "domain_gpus": {
                str(i): {"cluster_uuid": uuid, "clique_id": clique}
                for i, (uuid, clique) in sorted(self.domain_gpus.items())
            },
            "daemon_pids": self.daemon_pids,
            "config_file": self.config_file,
            "nodes_file": self.nodes_file,
            "nodes": self.nodes,
            "channels": self.channels,
        }


def cluster(info: Any) -> tuple[str, int] | None:
    """The (cluster UUID, clique) a fabric info struct names, or None for no cluster (all-zero
    UUID: a single-node NVLink system, or no fabric at all)."""
    if not isinstance(info, dict):
        return None
    raw = info.get("clusterUuid")
    if isinstance(raw, str):
        digits = raw.replace("-", "").lower()
        if not digits.strip("0"):
            return None
        uuid = digits
    elif isinstance(raw, list) and raw and all(isinstance(b, int) for b in raw):
        if not any(raw):
            return None
        uuid = "".join(f"{b & 0xFF:02x}" for b in raw)
    else:
        return None
    if len(uuid) == 32:
        uuid = f"{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:]}"
    clique = info.get("cliqueId")
    return uuid, clique if isinstance(clique, int) else 0


def read(host: Host) -> ImexFacts:
    """The IMEX facts of this node (daemon and files are read only for a domain member)."""
    facts = ImexFacts()
    for index in range(gpu_count(host.nvml) or 0):
        found = cluster(Device(host.nvml, index).get(*FABRIC_INFO))
        if found is not None:
            facts.domain_gpus[index] = found
    if not facts.in_domain:
        return facts
    daemons = host.processes().named(DAEMON)
    facts.daemon_pids = sorted(p.pid for p in daemons)
    config_file = next(
        (c for c in (_option(p.cmdline, "-c") for p in daemons) if c), DEFAULT_CONFIG
    )
    facts.config_file = config_file
    config = host.fs.try_read_text(config_file) or ""
    nodes_file = _setting(config, "IMEX_NODE_CONFIG_FILE") or DEFAULT_NODES
    facts.nodes_file = nodes_file
    nodes = host.fs.try_read_text(nodes_file) if nodes_file.startswith("/") else None
    if nodes is not None:
        facts.nodes = [
            line.strip()
            for line in nodes.splitlines()
            if line.strip() and not line.strip().startswith("#")
        ]
    facts.channels = [
        f"{CHANNELS}/{name}" for name in host.fs.listdir(CHANNELS) if name.startswith("channel")
    ]
    return facts


def _option(argv: tuple[str, ...], flag: str) -> str | None:
    """The value of `-c FILE` / `-cFILE` / `--config=FILE` style options in a command line."""
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag) and len(arg) > len(flag) and not arg.startswith("--"):
            return arg[len(flag) :]
    return None


def _setting(config: str, key: str) -> str | None:
    """A `KEY=value` setting of the IMEX config file (comments and blanks skipped)."""
    for line in config.splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name.strip() == key and value.strip():
            return value.strip()
    return None
