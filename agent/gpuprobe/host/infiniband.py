"""RDMA devices as sysfs shows them: `/sys/class/infiniband/<dev>/` (its HCA type, firmware,
node GUID, netdevs) and each port's `ports/<n>/` (state, phys_state, rate, link_layer, GIDs,
error counters), and the verbs device nodes under `/dev/infiniband` that RDMA applications
open. Read through the host's files, so a snapshot's rootfs replays them.
"""

from __future__ import annotations

import re
from typing import TypedDict

from gpuprobe.host import Host
from gpuprobe.host.fs import HostFS

SYS_IB = "/sys/class/infiniband"
VERBS_DEVICES = "/dev/infiniband/uverbs*"
# Error counters that should stay still on a healthy link (InfiniBand PortCounters).
ERROR_COUNTERS = (
    "link_downed",
    "link_error_recovery",
    "symbol_error",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_xmit_discards",
)
_RATE = re.compile(r"([\d.]+)\s*Gb/sec")
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


class Gid(TypedDict):
    """One non-zero GID of a port."""

    index: int | str
    gid: str
    type: str | None
    netdev: str | None


class RdmaPort(TypedDict):
    """One port of an RDMA device (sysfs `ports/<n>/`)."""

    port: int
    state: int | None
    state_text: str | None
    phys_state: int | None
    phys_state_text: str | None
    rate: str | None
    rate_gbps: float | None
    link_layer: str | None
    gids: list[Gid]
    counters: dict[str, int]


class RdmaDevice(TypedDict):
    """One RDMA device in `data.devices` (docs/checks.md, check `rdma`)."""

    name: str
    hca_type: str | None
    fw_ver: str | None
    node_guid: str | None
    netdevs: list[str]
    ports: list[RdmaPort]


def device_names(host: Host) -> list[str]:
    """The RDMA devices (`mlx5_0`, ...), as sysfs lists them."""
    return host.fs.listdir(SYS_IB)


def read_devices(host: Host, names: list[str]) -> list[RdmaDevice]:
    """The devices `names` with their ports, in port order."""
    return [_device(host.fs, name) for name in names]


def verbs_devices(host: Host) -> list[str]:
    """The uverbs device nodes (`/dev/infiniband/uverbs0`, ...)."""
    return host.fs.glob(VERBS_DEVICES)


def netdev_devices(host: Host) -> dict[str, str]:
    """Each netdev that belongs to an RDMA device, with that device's name."""
    return {
        netdev: device
        for device in host.fs.listdir(SYS_IB)
        for netdev in host.fs.listdir(f"{SYS_IB}/{device}/device/net")
    }


def _device(fs: HostFS, name: str) -> RdmaDevice:
    base = f"{SYS_IB}/{name}"
    ports = [
        _port(fs, f"{base}/ports/{p}", int(p)) for p in fs.listdir(f"{base}/ports") if p.isdigit()
    ]
    return {
        "name": name,
        "hca_type": _text(fs, f"{base}/hca_type"),
        "fw_ver": _text(fs, f"{base}/fw_ver"),
        "node_guid": _text(fs, f"{base}/node_guid"),
        "netdevs": fs.listdir(f"{base}/device/net"),
        "ports": sorted(ports, key=lambda p: p["port"]),
    }


def _port(fs: HostFS, base: str, number: int) -> RdmaPort:
    state_text = _text(fs, f"{base}/state")
    phys_text = _text(fs, f"{base}/phys_state")
    rate_text = _text(fs, f"{base}/rate")
    rate = _RATE.search(rate_text or "")
    gids: list[Gid] = []
    for index in fs.listdir(f"{base}/gids")[:16]:
        gid = _text(fs, f"{base}/gids/{index}")
        if gid and gid != _ZERO_GID:
            gids.append(
                {
                    "index": int(index) if index.isdigit() else index,
                    "gid": gid,
                    "type": _text(fs, f"{base}/gid_attrs/types/{index}"),
                    "netdev": _text(fs, f"{base}/gid_attrs/ndevs/{index}"),
                }
            )
    counters = {}
    for counter in ERROR_COUNTERS:
        value = _text(fs, f"{base}/counters/{counter}")
        if value is not None and value.isdigit():
            counters[counter] = int(value)
    return {
        "port": number,
        "state": _leading_int(state_text),
        "state_text": state_text,
        "phys_state": _leading_int(phys_text),
        "phys_state_text": phys_text,
        "rate": rate_text,
        "rate_gbps": float(rate.group(1)) if rate else None,
        "link_layer": _text(fs, f"{base}/link_layer"),
        "gids": gids,
        "counters": counters,
    }


# A sysfs attribute is at most a page: more is no port's file (and the rate pattern
# backtracks over a long run of digits).
SYSFS_ATTRIBUTE_BYTES = 4096


def _text(fs: HostFS, path: str) -> str | None:
    try:
        return fs.read_text(path, SYSFS_ATTRIBUTE_BYTES).strip()
    except OSError:
        return None


def _leading_int(text: str | None) -> int | None:
    match = re.match(r"\s*(\d+)", text or "")
    return int(match.group(1)) if match else None
