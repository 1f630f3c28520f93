"""What a vendor's rules give a vendor-neutral check: `Part`, one vendor's share of a result,
and the hooks (`GpusRules`, `DriverRules`, `ToolkitRules`, `DevicePluginRules`, `CdiRules`,
`WorkloadsRules`) a vendor's folder (`checks/nvidia/`, `checks/amd/`) implements for the
checks it has rules in.

The neutral check (`driver`, `gpus`, `toolkit`, `workloads`) asks each registered vendor's
rules (`checks.rules.vendors`) in the GPU interface's vendor order and puts their parts
together; a vendor whose backend offers no rules is shown from the interface alone
(`gpu.backend.GpuBackend`: identity, driver, health, uses). The neutral check never names a
vendor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuprobe.checks.context import CheckContext
from gpuprobe.config import Config
from gpuprobe.containers.cdi import CdiSpec
from gpuprobe.containers.engines import Engine
from gpuprobe.gpu.backend import VendorUses
from gpuprobe.report import Finding, Status, worst


@dataclass
class Part:
    """One vendor's share of a neutral check's result: its summary, findings, the data keys it
    adds (a list under a key the check's data lists already, such as `gpus`, extends it), how
    many of its GPUs it judged and the status below which it cannot vouch (`floor`)."""

    summary: str
    findings: list[Finding] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    gpus: int = 0
    floor: Status = Status.OK


def merge_data(data: dict[str, Any], part: Part) -> None:
    """Add a later vendor's data keys to the check's: lists extend, other keys are set."""
    for key, value in part.data.items():
        if isinstance(value, list) and isinstance(data.get(key), list):
            data[key].extend(value)
        else:
            data[key] = value


def lower_floor(floor: Status, part: Part) -> Status:
    """The worse of the check's floor and a vendor part's."""
    return worst([floor, part.floor])


class GpusRules(Protocol):
    """A vendor's part of the `gpus` check."""

    def count(self, ctx: CheckContext) -> int:
        """How many of the vendor's GPUs the PCI bus shows (cheap: asks no library)."""
        ...

    def judge(
        self, ctx: CheckContext, config: Config, idle_since: dict[str, float], others: int
    ) -> Part | None:
        """The vendor's GPUs listed and judged (None: the node shows none and the vendor has
        nothing to say). `idle_since`: the check's kept idle clock, by GPU; `others`: how many
        GPUs of the other vendors the node has (an expected count is the node's)."""
        ...


class DriverReading(Protocol):
    """A vendor's driver as read once for one run of the `driver` check."""

    def facts(self, data: dict[str, Any]) -> None:
        """Add the vendor's driver facts to the check's data (whether or not it judges)."""
        ...

    def judge(self, config: Config, data: dict[str, Any], first: bool) -> Part:
        """Judge the vendor's driver. `first`: the vendor is the node's first, whose driver
        version is the check's `driver_version` (and the judge of a node with no GPU)."""
        ...


class DriverRules(Protocol):
    """A vendor's part of the `driver` check."""

    def read(self, ctx: CheckContext) -> DriverReading:
        """Read the vendor's driver once: its facts and judgement come from this reading."""
        ...


class DevicePluginReading(Protocol):
    """A vendor's device plugin sockets, read once for one run of the `device_plugin` check."""

    def facts(self, data: dict[str, Any]) -> None:
        """Add the vendor's GPUs and plugin sockets to the check's data."""
        ...

    def judge(self, socket_dir: str, kubelet_socket: bool) -> Part:
        """Whether the vendor's device plugin registered its GPUs with the kubelet."""
        ...


class DevicePluginRules(Protocol):
    """A vendor's part of the `device_plugin` check beyond NVIDIA's plugin (its subject)."""

    def read(self, ctx: CheckContext, socket_dir: str) -> DevicePluginReading | None:
        """The vendor's plugin sockets in `socket_dir` (None: the node has no GPU of it)."""
        ...


class CdiRules(Protocol):
    """A vendor's part of the `cdi` check beyond NVIDIA's specs (its subject)."""

    def judge(
        self, ctx: CheckContext, specs: list[tuple[CdiSpec, int]], data: dict[str, Any]
    ) -> Part | None:
        """The vendor's specs among `specs` (each with its directory's priority) held against
        the node, each one's entry in `data["specs"]` told what of it is gone (None: the node
        shows no GPU of the vendor). Its summary is the check's on a node without NVIDIA's
        GPUs."""
        ...


class ToolkitRules(Protocol):
    """A vendor's part of the `toolkit` check beyond the container runtimes' (NVIDIA's
    runtime is the check's own subject)."""

    def judge(self, ctx: CheckContext, engines: list[Engine]) -> Part | None:
        """Whether containers the engines start reach the vendor's GPUs (None: no GPUs)."""
        ...


class WorkloadsRules(Protocol):
    """A vendor's part of the GPUs as workloads get them, where it tells more than the
    backend's `uses()`."""

    def uses(self, ctx: CheckContext) -> VendorUses:
        """The vendor's GPUs with their processes, and its unplaced processes."""
        ...
