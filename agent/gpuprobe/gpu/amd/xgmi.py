"""An AMD GPU's place in its XGMI hive, from the driver's sysfs files (amdgpu_xgmi.c).

- `xgmi_hive_info/xgmi_hive_id`: the hive's id (decimal); GPUs linked by XGMI share it.
- `xgmi_device_id`: this GPU's node id in the hive (decimal), `xgmi_physical_id` its slot.
- `xgmi_num_hops`, `xgmi_num_links`: one two-digit hex byte per node of the hive, in the
  hive's node order (this GPU's own entry included: 0 hops, 0 links). The low three bits of a
  hops byte are the hop count (1: a direct neighbour), the top two the link type.
- `xgmi_error`: the XGMI error count the driver read (and cleared) at this read.

The topology is the one the PSP firmware reported when the hive formed: a direct neighbour
with no link is an XGMI link that did not come up.
"""

from __future__ import annotations

from dataclasses import dataclass

HOP_COUNT_MASK = 0x7


class XgmiFormatError(ValueError):
    """An XGMI file whose text is not the driver's format."""


@dataclass(frozen=True)
class XgmiPeer:
    """One node of the hive as this GPU sees it: its position (1-based, as sysfs names the
    hive's `node<N>` entries), hops to it and XGMI links to it."""

    node: int
    hops: int
    links: int


@dataclass(frozen=True)
class Xgmi:
    """This GPU's XGMI facts: the hive, its own node and physical ids, the other nodes, and
    the error count (None where the driver offers none)."""

    hive_id: int
    device_id: int | None
    physical_id: int | None
    peers: tuple[XgmiPeer, ...]
    errors: int | None

    @property
    def links_down(self) -> tuple[XgmiPeer, ...]:
        """Direct neighbours this GPU has no XGMI link to."""
        return tuple(p for p in self.peers if p.hops == 1 and p.links == 0)


def parse_bytes(name: str, text: str) -> list[int]:
    """A `xgmi_num_hops` / `xgmi_num_links` line: its hex bytes in node order."""
    try:
        return [int(word, 16) for word in text.split()]
    except ValueError:
        raise XgmiFormatError(f"{name}: not hex bytes: {text.strip()[:60]!r}") from None


def peers(hops_text: str | None, links_text: str | None) -> tuple[XgmiPeer, ...]:
    """The hive's other nodes from the hops and links files (self, with 0 hops, left out);
    empty when either file is absent."""
    if hops_text is None or links_text is None:
        return ()
    hops = parse_bytes("xgmi_num_hops", hops_text)
    links = parse_bytes("xgmi_num_links", links_text)
    if len(hops) != len(links):
        raise XgmiFormatError(f"xgmi_num_hops lists {len(hops)} nodes, xgmi_num_links {len(links)}")
    found = []
    for position, (hop, link) in enumerate(zip(hops, links, strict=True), start=1):
        count = hop & HOP_COUNT_MASK
        if count == 0:
            continue  # this GPU itself
        found.append(XgmiPeer(position, count, link))
    return tuple(found)


def decimal(name: str, text: str | None) -> int | None:
    """A decimal id or count file's value; None when the file is absent."""
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        raise XgmiFormatError(f"{name}: not a number: {text.strip()[:40]!r}") from None
