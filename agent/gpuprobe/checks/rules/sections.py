"""The sections of the configuration that one check owns and another reads: the gpus check's
(the GPU count the driver check judges an AMD-only node by too), the workloads check's (the
kubelet the pods check also asks which pods hold which GPU) and the driver check's (the
versions NVIDIA's rules of it hold the driver against, `checks.nvidia.driver`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuprobe.config import MAX_INTEGER, brief
from gpuprobe.errors import ConfigError

# The sections' names: their checks' names.
GPUS = "gpus"
WORKLOADS = "workloads"
DRIVER = "driver"


@dataclass(frozen=True)
class GpusConfig:
    """What the `gpus` check expects."""

    # How many GPUs the node should have (`--expect-gpus`); None: as many as the PCI bus shows.
    expect: int | None = None
    # In the daemon, a GPU idle (no process, no utilization) for longer than this raises
    # GPU_IDLE; one-shot `check` has no history and never does.
    idle_window_seconds: float = 3600.0

    def __post_init__(self) -> None:
        if self.expect is not None and self.expect < 0:
            raise ConfigError(f"expect: {self.expect} is negative")
        if self.expect is not None and self.expect >= MAX_INTEGER:  # --expect-gpus too
            raise ConfigError(f"expect: {brief(self.expect)} is beyond any sensible count or size")
        if self.idle_window_seconds <= 0:
            raise ConfigError(f"idle_window_seconds: {self.idle_window_seconds:g} must be above 0")


@dataclass(frozen=True)
class WorkloadsConfig:
    """Where the `workloads` check asks the kubelet, and when an allocated GPU is idle."""

    # The kubelet's PodResources socket (a host path).
    socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    # Deadline of each PodResources call: a hung kubelet costs this, then ALLOCATION_UNKNOWN.
    timeout_seconds: float = 2.0
    # Whether the node must answer PodResources; None: where /var/lib/kubelet/pod-resources
    # exists (a kubelet's node). False: a missing socket is never a finding.
    expect_kubelet: bool | None = None
    # An allocated GPU (or MIG device) with no process and utilization at or below this, for
    # longer than the window, raises GPU_ALLOCATED_IDLE (in the daemon, which has history).
    idle_utilization_percent: float = 1.0
    idle_window_seconds: float = 1800.0
    # The agent's state directory, where the daemon keeps its allocated / idle / unallocated
    # seconds across restarts (workload-accounting.json), as `xid.state_dir` names it (the
    # two must agree); None: xid's, else the live default (`gpuprobe.checks.state`).
    state_dir: str | None = None

    def __post_init__(self) -> None:
        if not self.socket.startswith("/"):
            raise ConfigError(f"socket: {self.socket!r} is not an absolute host path")
        if not 0 < self.timeout_seconds <= 60:
            raise ConfigError(f"timeout_seconds: {self.timeout_seconds:g} must be in (0, 60]")
        if not 0 <= self.idle_utilization_percent <= 100:
            raise ConfigError(
                f"idle_utilization_percent: {self.idle_utilization_percent:g} must be 0 to 100"
            )
        if not self.idle_window_seconds > 0:  # NaN too
            raise ConfigError(f"idle_window_seconds: {self.idle_window_seconds:g} must be above 0")


@dataclass(frozen=True)
class DriverConfig:
    """What the `driver` check holds the node's driver against."""

    # The fleet's minimum driver version, e.g. "550.54.15" (below it: DRIVER_TOO_OLD, WARNING).
    min_version: str | None = None
    # CUDA toolkit versions that images on this node are built with, e.g. ["12.4", "12.8.1"].
    required_cuda: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for key, value in [("min_version", self.min_version)] + [
            ("required_cuda", v) for v in self.required_cuda
        ]:
            if value is not None and not re.fullmatch(r"\d+(\.\d+)*", value):
                raise ConfigError(f"{key}: {value!r} is not a version like 550.54.15")
