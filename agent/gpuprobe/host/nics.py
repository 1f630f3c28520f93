"""The node's network interfaces as netlink and sysfs show them: each link (state, MTU,
addresses, from netlink), whether it is a physical NIC (a `device` in `/sys/class/net/<if>/`),
its driver and speed, the RDMA device it backs, and the interfaces default routes leave by
(`/proc/net/route`, `/proc/net/ipv6_route`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from gpuprobe.host import Host
from gpuprobe.host.infiniband import netdev_devices
from gpuprobe.host.netlink import Link

SYS_NET = "/sys/class/net"
ROUTES = "/proc/net/route"
IPV6_ROUTES = "/proc/net/ipv6_route"
RTF_REJECT = 0x0200  # an unreachable route (IPv6's default on lo where none is configured)


@dataclass(frozen=True)
class NicFacts:
    """One interface: its netlink link, whether it is a physical NIC, its driver and speed
    (physical NICs only; speed None without a link or on a virtual device), and the RDMA
    device whose netdev it is."""

    link: Link
    physical: bool
    driver: str | None
    speed_mbps: int | None
    rdma_device: str | None


def read_nics(host: Host) -> list[NicFacts]:
    """Every interface netlink lists, in its order."""
    links = host.netlink.links()
    rails = netdev_devices(host)
    return [_facts(host, link, rails.get(link.name)) for link in links]


def default_route_interfaces(host: Host) -> set[str] | None:
    """The interfaces default routes leave by (IPv4 and IPv6); None when neither route table
    can be read (an older snapshot keeps neither)."""
    v4, v6 = host.fs.try_read_text(ROUTES), host.fs.try_read_text(IPV6_ROUTES)
    if v4 is None and v6 is None:
        return None
    found: set[str] = set()
    for line in (v4 or "").splitlines()[1:]:  # Iface Destination Gateway Flags ... Mask ...
        fields = line.split()
        if len(fields) >= 8 and fields[1] == "00000000" and fields[7] == "00000000":
            found.add(fields[0])
    for line in (v6 or "").splitlines():  # dest plen src plen next-hop metric ref use flags dev
        fields = line.split()
        if len(fields) < 10 or fields[0].strip("0") or fields[1] != "00":
            continue
        try:
            rejected = int(fields[8], 16) & RTF_REJECT
        except ValueError:
            continue
        if not rejected and fields[9] != "lo":
            found.add(fields[9])
    return found


def _facts(host: Host, link: Link, rdma_device: str | None) -> NicFacts:
    base = f"{SYS_NET}/{link.name}"
    physical = host.fs.exists(f"{base}/device")
    driver_link = host.fs.readlink(f"{base}/device/driver") if physical else None
    driver = os.path.basename(driver_link) if driver_link else None
    speed = _speed(host, base) if physical else None
    return NicFacts(link, physical, driver, speed, rdma_device)


def _speed(host: Host, base: str) -> int | None:
    text = host.fs.try_read_text(f"{base}/speed")
    try:
        speed = int(text.strip()) if text else -1
    except ValueError:
        return None
    return speed if speed > 0 else None  # -1: no link or a virtual device
