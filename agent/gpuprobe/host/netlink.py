"""The node's network links and addresses: live through pyroute2, or from netlink.json.

A `Link` is what the network check reads of an interface from netlink: its name, operational
and administrative state, MTU, MAC, kind (veth, bridge, ... or None for a plain device) and
addresses. Speeds and drivers are sysfs facts, read through HostFS by the check itself.

pyroute2 is imported only when live links are first asked for (it takes a quarter second).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

from gpuprobe.errors import SnapshotError
from gpuprobe.host.jsonfile import read_json

IFF_UP = 0x1
FAMILIES = {2: "inet", 10: "inet6"}
# ARPHRD_* link types (linux/if_arp.h) by name.
LINK_TYPES = {1: "ether", 32: "infiniband", 772: "loopback", 65534: "none"}


@dataclass(frozen=True)
class Address:
    """An IP address on a link."""

    family: str  # "inet" | "inet6"
    address: str
    prefixlen: int

    def to_dict(self) -> dict[str, Any]:
        """The address as netlink.json writes it."""
        return {"family": self.family, "address": self.address, "prefixlen": self.prefixlen}


@dataclass(frozen=True)
class Link:
    """A network interface as netlink reports it."""

    index: int
    name: str
    operstate: str  # UP, DOWN, LOWERLAYERDOWN, UNKNOWN, DORMANT, ...
    admin_up: bool
    mtu: int
    mac: str | None = None
    kind: str | None = None
    addresses: tuple[Address, ...] = ()
    link_type: str = "ether"  # ether, infiniband, loopback, ... (ARPHRD)

    def to_dict(self) -> dict[str, Any]:
        """The link as netlink.json writes it."""
        return {
            "index": self.index,
            "name": self.name,
            "operstate": self.operstate,
            "admin_up": self.admin_up,
            "mtu": self.mtu,
            "mac": self.mac,
            "kind": self.kind,
            "link_type": self.link_type,
            "addresses": [a.to_dict() for a in self.addresses],
        }


class Netlink(Protocol):
    """What checks may ask of netlink."""

    def links(self) -> list[Link]:
        """Every link of the node's network namespace, by index."""


class LiveNetlink:
    """This network namespace's links through pyroute2."""

    def links(self) -> list[Link]:
        """Read links and addresses now."""
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            addresses: dict[int, list[Address]] = {}
            for msg in ipr.get_addr():
                family = FAMILIES.get(msg["family"])
                value = msg.get_attr("IFA_ADDRESS")
                if family and value:
                    addresses.setdefault(msg["index"], []).append(
                        Address(family, value, int(msg["prefixlen"]))
                    )
            found = []
            for msg in ipr.get_links():
                info = msg.get_attr("IFLA_LINKINFO")
                found.append(
                    Link(
                        index=int(msg["index"]),
                        name=str(msg.get_attr("IFLA_IFNAME")),
                        operstate=str(msg.get_attr("IFLA_OPERSTATE") or "UNKNOWN"),
                        admin_up=bool(msg["flags"] & IFF_UP),
                        mtu=int(msg.get_attr("IFLA_MTU") or 0),
                        mac=msg.get_attr("IFLA_ADDRESS"),
                        kind=info.get_attr("IFLA_INFO_KIND") if info else None,
                        addresses=tuple(addresses.get(int(msg["index"]), ())),
                        link_type=LINK_TYPES.get(int(msg["ifi_type"]), str(msg["ifi_type"])),
                    )
                )
        return sorted(found, key=lambda link: link.index)


class RecordedNetlink:
    """Links replayed from a snapshot (or held while recording for capture)."""

    def __init__(self, links: list[Link]) -> None:
        self._links = list(links)

    def links(self) -> list[Link]:
        """The recorded links."""
        return list(self._links)

    def to_json(self) -> dict[str, Any]:
        """The netlink.json content."""
        return {"format": 1, "links": [link.to_dict() for link in self._links]}


class RecordingNetlink:
    """Live links, remembering the last answer for the snapshot."""

    def __init__(self, inner: Netlink) -> None:
        self._inner = inner
        self._last: list[Link] | None = None
        self._lock = threading.Lock()

    def links(self) -> list[Link]:
        """Read live and remember."""
        found = self._inner.links()
        with self._lock:
            self._last = found
        return found

    def recorded(self) -> RecordedNetlink | None:
        """What was read, if anything was."""
        with self._lock:
            return None if self._last is None else RecordedNetlink(self._last)


def load_netlink(path: str) -> RecordedNetlink:
    """Read netlink.json; absent means no links; raises SnapshotError on a bad shape."""
    try:
        doc = read_json(path)
    except FileNotFoundError:
        return RecordedNetlink([])
    if (
        not isinstance(doc, dict)
        or doc.get("format") != 1
        or not isinstance(doc.get("links"), list)
    ):
        raise SnapshotError(f'{path}: expected {{"format": 1, "links": [...]}}')
    return RecordedNetlink(
        [_link(entry, f"{path}: links[{i}]") for i, entry in enumerate(doc["links"])]
    )


def _link(entry: Any, where: str) -> Link:
    try:
        addresses = tuple(
            Address(str(a["family"]), str(a["address"]), int(a["prefixlen"]))
            for a in entry.get("addresses", [])
        )
        link = Link(
            index=int(entry["index"]),
            name=str(entry["name"]),
            operstate=str(entry.get("operstate", "UNKNOWN")),
            admin_up=bool(entry.get("admin_up", True)),
            mtu=int(entry.get("mtu", 0)),
            mac=entry.get("mac"),
            kind=entry.get("kind"),
            addresses=addresses,
            link_type=str(entry.get("link_type", "ether")),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        raise SnapshotError(f"{where}: needs index, name and well-formed addresses") from None
    return link
