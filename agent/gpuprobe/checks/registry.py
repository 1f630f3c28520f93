"""The checks gpuprobe runs, in report order. Adding a check means adding it here."""

from __future__ import annotations

from collections.abc import Callable

from gpuprobe.checks import (
    cdi,
    device_plugin,
    driver,
    gpus,
    mig,
    nccl,
    network,
    pods,
    rdma,
    sharing,
    storage,
    toolkit,
    workloads,
    xid,
)
from gpuprobe.config import Config
from gpuprobe.host import Host
from gpuprobe.report import CheckResult

CheckFn = Callable[[Host, Config], CheckResult]

CHECKS: dict[str, CheckFn] = {
    "driver": driver.run,
    "gpus": gpus.run,
    "mig": mig.run,
    "xid": xid.run,
    "toolkit": toolkit.run,
    "cdi": cdi.run,
    "device_plugin": device_plugin.run,
    "sharing": sharing.run,
    "workloads": workloads.run,
    "pods": pods.run,
    "network": network.run,
    "rdma": rdma.run,
    "nccl": nccl.run,
    "storage": storage.run,
}

# Active checks put load on the node (disk, network): the daemon runs them at their own,
# longer interval.
ACTIVE: frozenset[str] = frozenset({"storage", "nccl"})


def resolve(names: list[str] | None) -> list[str]:
    """The named checks in report order (all when None); raises KeyError for an unknown name."""
    if names is None:
        return list(CHECKS)
    for name in names:
        if name not in CHECKS:
            raise KeyError(name)
    return [name for name in CHECKS if name in names]
