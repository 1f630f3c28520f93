"""Check `network`: are the node's fabric NICs up, at one MTU, at their speed?

Interfaces come from netlink (state, MTU, addresses); speed and driver from sysfs
(`/sys/class/net/<if>/speed`, `.../device/driver`), as `gpuprobe.host.nics` reads them. The
fabric is what the configuration names, or else every physical NIC (one with a `device` in
sysfs) that is administratively up: an unused port that nobody brought up is not a fault. A
cloud VM's primary NIC is no fabric NIC: a paravirtual one (virtio_net, ena, gve, hv_netvsc,
vmxnet3, xen's vif) without an RDMA device that carries the default route (`/proc/net/route`,
`/proc/net/ipv6_route`), or, where the routes cannot be read, the VM's only such NIC. Its
siblings of the same driver (a GCE A3's GPUDirect-TCPX gve NICs) stay fabric NICs.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from dataclasses import dataclass
from typing import TypedDict

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check
from gpuprobe.config import Config
from gpuprobe.host.netlink import Link
from gpuprobe.host.nics import NicFacts, default_route_interfaces, read_nics
from gpuprobe.report import Action, CheckResult, Finding, Severity

NAME = "network"
# Operational states in which a link carries traffic (UNKNOWN: drivers that never report it).
RUNNING = frozenset({"UP", "UNKNOWN"})
LINK_TYPE_NAMES = {"ether": "Ethernet", "infiniband": "IPoIB"}
# Drivers of hypervisors' paravirtual NICs (KVM/QEMU, AWS, GCE, Hyper-V/Azure, VMware, Xen).
PARAVIRTUAL_DRIVERS = frozenset({"virtio_net", "ena", "gve", "hv_netvsc", "vmxnet3", "vif"})


class Nic(TypedDict):
    """One network interface in `data.interfaces` (docs/checks.md, check `network`)."""

    name: str
    operstate: str
    admin_up: bool
    mtu: int
    mac: str | None
    kind: str | None
    link_type: str
    physical: bool
    driver: str | None
    speed_mbps: int | None
    addresses: list[str]
    fabric: bool
    rdma_device: str | None
    default_route: bool


class NetworkData(TypedDict):
    """The check's data: every interface, and the names of the fabric's."""

    interfaces: list[Nic]
    fabric: list[str]


def run(ctx: CheckContext, config: Config) -> CheckResult:
    """Judge the fabric NICs."""
    host = ctx.host
    nics = read_nics(host)
    links = [nic.link for nic in nics]
    patterns = config.section(NAME, NetworkConfig).fabric_interfaces
    routed = default_route_interfaces(host)
    interfaces = [_facts(nic, patterns) for nic in nics]
    for nic in interfaces:
        nic["default_route"] = nic["name"] in (routed or ())
    primary = _primary(interfaces, routed) if not patterns else None
    if primary is not None:
        primary["fabric"] = False
    fabric = [i for i in interfaces if i["fabric"]]
    findings = _missing(patterns, links)
    # A NIC that backs an RDMA device is judged by the rdma check, port by port: one finding
    # per fault, not one per layer. Except an IPoIB interface set down: its InfiniBand port
    # stays ACTIVE, so only this check can see that IP over that rail is off.
    findings += [
        f
        for i in fabric
        if (not i["rdma_device"] or _ipoib_set_down(i))
        and (f := _down(i, configured=bool(patterns)))
    ]
    findings += _mtu_mismatch(
        [i for i in fabric if i["operstate"] in RUNNING], by_kind=not patterns
    )
    if speed := config.section(NAME, NetworkConfig).min_speed_mbps:
        findings += _slow(fabric, speed)
    data: NetworkData = {"interfaces": interfaces, "fabric": [i["name"] for i in fabric]}
    up = sum(i["operstate"] in RUNNING and i["admin_up"] for i in fabric)
    summary = (
        f"{up} of {len(fabric)} fabric NICs up" if fabric else "no fabric NIC (no physical NIC up)"
    )
    if primary is not None:
        vm = f"{primary['name']} is the VM's primary {primary['driver']} NIC"
        summary = f"{summary}; {vm}" if fabric else f"no fabric NIC ({vm})"
    return CheckResult(NAME, summary, findings, data)


def _primary(interfaces: list[Nic], routed: set[str] | None) -> Nic | None:
    """The cloud VM's primary NIC, which is no fabric NIC: a paravirtual NIC without an RDMA
    device that carries the default route; where the routes are unknown, the only such NIC."""
    candidates = [
        i
        for i in interfaces
        if i["fabric"] and i["driver"] in PARAVIRTUAL_DRIVERS and i["rdma_device"] is None
    ]
    if routed is not None:
        candidates = [i for i in candidates if i["name"] in routed]
    return candidates[0] if len(candidates) == 1 else None


def _facts(nic: NicFacts, patterns: tuple[str, ...]) -> Nic:
    link = nic.link
    fabric = (
        any(fnmatch.fnmatchcase(link.name, p) for p in patterns)
        if patterns
        else nic.physical and link.admin_up
    )
    return {
        "name": link.name,
        "operstate": link.operstate,
        "admin_up": link.admin_up,
        "mtu": link.mtu,
        "mac": link.mac,
        "kind": link.kind,
        "link_type": link.link_type,
        "physical": nic.physical,
        "driver": nic.driver,
        "speed_mbps": nic.speed_mbps,
        "addresses": [f"{a.address}/{a.prefixlen}" for a in link.addresses],
        "fabric": fabric,
        "rdma_device": nic.rdma_device,
        "default_route": False,  # set by `run` from the route tables
    }


def _missing(patterns: tuple[str, ...], links: list[Link]) -> list[Finding]:
    names = [link.name for link in links]
    return [
        Finding(
            "NIC_DOWN",
            Severity.CRITICAL,
            f"fabric interface {p} is configured but no interface matches it on this node",
            Action.CHECK_NETWORK,
            f"nic:{p}",
        )
        for p in patterns
        if not any(fnmatch.fnmatchcase(n, p) for n in names)
    ]


def _ipoib_set_down(nic: Nic) -> bool:
    return nic["link_type"] == "infiniband" and not nic["admin_up"]


def _down(nic: Nic, configured: bool) -> Finding | None:
    if nic["admin_up"] and nic["operstate"] in RUNNING:
        return None
    why = (
        "is administratively down"
        if not nic["admin_up"]
        else f"has no link (state {nic['operstate']}): check the cable, transceiver and switch port"
    )
    return Finding(
        "NIC_DOWN",
        Severity.CRITICAL if configured else Severity.WARNING,
        f"fabric NIC {nic['name']} {why}",
        Action.CHECK_NETWORK,
        f"nic:{nic['name']}",
    )


def _mtu_mismatch(fabric: list[Nic], by_kind: bool) -> list[Finding]:
    """NICs whose MTU differs from the other fabric NICs of their link type (`by_kind`: and
    of their driver).

    The default fabric (every physical NIC up) holds a management Ethernet NIC beside the
    InfiniBand or RoCE rails, which rightly differ, so it is compared kind by kind; the NICs
    a configuration names as the fabric are one fabric, compared per link type only (IPoIB
    runs at 2044, 4092 or 65520, never an Ethernet MTU).
    """
    groups: dict[tuple[str, str | None], list[Nic]] = {}
    for nic in fabric:
        kind = (nic["link_type"], nic["driver"] if by_kind else None)
        groups.setdefault(kind, []).append(nic)
    findings = []
    for group in groups.values():
        counts = Counter(i["mtu"] for i in group)
        if len(counts) <= 1:
            continue
        majority = max(counts, key=lambda mtu: (counts[mtu], mtu))
        findings += [
            Finding(
                "NIC_MTU_MISMATCH",
                Severity.WARNING,
                f"fabric NIC {i['name']} has MTU {i['mtu']} while the other "
                + (
                    f"{i['driver'] or i['link_type']} fabric NICs"
                    if by_kind
                    else f"{LINK_TYPE_NAMES.get(i['link_type'], i['link_type'])} fabric NICs"
                )
                + f" have {majority}: traffic between them fragments or stalls",
                Action.FIX_CONFIG,
                f"nic:{i['name']}",
            )
            for i in group
            if i["mtu"] != majority
        ]
    return findings


def _slow(fabric: list[Nic], floor: int) -> list[Finding]:
    return [
        Finding(
            "NIC_SPEED_LOW",
            Severity.WARNING,
            f"fabric NIC {i['name']} links at {i['speed_mbps']} Mb/s, below the expected "
            f"{floor} Mb/s: check the cable, transceiver and switch port",
            Action.CHECK_NETWORK,
            f"nic:{i['name']}",
        )
        for i in fabric
        if i["speed_mbps"] is not None and i["speed_mbps"] < floor
    ]


@dataclass(frozen=True)
class NetworkConfig:
    """Which interfaces are the node's fabric, and what they must do."""

    # Names or shell patterns ("ib*", "eth[1-8]"); empty: every physical NIC that is up.
    fabric_interfaces: tuple[str, ...] = ()
    # The speed each fabric NIC must link at, in Mb/s (e.g. 400000); below it: NIC_SPEED_LOW.
    min_speed_mbps: int | None = None


CHECK: Check[NetworkData] = Check(NAME, run, section=NetworkConfig, condition="GPUNetworkReady")
