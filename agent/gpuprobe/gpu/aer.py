"""PCIe AER counters of the GPUs, the NVSwitches and every bridge above them up to the root port.

Source: the kernel's ABI document Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats.
Each PCIe device with AER has three files in its sysfs directory, counted since boot, one
`<error name> <count>` per line and a total last:

    aer_dev_correctable:  RxErr 0, BadTLP 0, BadDLLP 0, Rollover 0, Timeout 0, NonFatalErr 0,
                          CorrIntErr 0, HeaderOF 0, TOTAL_ERR_COR 0
    aer_dev_fatal:        Undefined 0, DLP 0, SDES 0, TLP 0, FCP 0, CmpltTO 0, CmpltAbrt 0,
                          UnxCmplt 0, RxOF 0, MalfTLP 0, ECRC 0, UnsupReq 0, ACSViol 0,
                          UncorrIntErr 0, BlockedTLP 0, AtomicOpBlocked 0, TLPBlockedErr 0,
                          PoisonTLPBlocked 0, TOTAL_ERR_FATAL 0
    aer_dev_nonfatal:     the same names, TOTAL_ERR_NONFATAL last

(one line each in the files). `/sys/bus/pci/devices/<address>` is a link into the device tree
(`../../../devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0`): the
addresses on that path are the bridges between the device and its root complex, the first
the root port. A link that went marginal shows as correctable errors rising (replays, bad
TLPs) on either end long before the GPU falls off the bus.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from gpuprobe.gpu.journal.record import LogRecord
from gpuprobe.host import Host
from gpuprobe.host.fs import HostFS

PCI_DEVICES = "/sys/bus/pci/devices"
KINDS = ("correctable", "nonfatal", "fatal")
_FILES = {
    "correctable": "aer_dev_correctable",
    "nonfatal": "aer_dev_nonfatal",
    "fatal": "aer_dev_fatal",
}
_TOTALS = {
    "correctable": "TOTAL_ERR_COR",
    "nonfatal": "TOTAL_ERR_NONFATAL",
    "fatal": "TOTAL_ERR_FATAL",
}
# The kernel's AER lines (`pcieport 0000:17:01.0: AER: ...`) tell that these counters moved:
# the kind of event they are (`gpu.kernel_events`).
EVENTS = {"aer": "AER:"}
# The cheap test: a line holding none of these is none this reads (`event_of` gives None).
PREFILTER = ("AER:",)
_BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
# The AER driver's line for an error a root port received (drivers/pci/pcie/aer.c,
# `aer_print_port_info`: "%s%s error received: %04x:%02x:%02x.%d", "Multiple " first when the
# port saw several; severity "Corrected", "Uncorrected (Non-Fatal)" or "Uncorrected (Fatal)"),
# after the reporting port's device name: `pcieport 0000:17:01.0: AER: Uncorrected (Fatal)
# error received: 0000:18:00.0`.
_RECEIVED = re.compile(
    r"(?P<port>[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]): AER: (?P<multiple>Multiple )?"
    r"(?P<severity>Corrected|Uncorrected \((?:Non-)?Fatal\)) error received: "
    r"(?P<source>[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])"
)


@dataclass(frozen=True)
class AerCounts:
    """One AER file: the total, and each error name's count (those above zero)."""

    total: int
    errors: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class AerDevice:
    """One PCIe device's AER counters (kinds whose file is absent are missing) and its place:
    the device gpuprobe asked about (`below`: None) or a bridge above it (`below`: that one's
    address; `root_port` for the topmost)."""

    address: str
    counts: dict[str, AerCounts]
    below: str | None = None
    root_port: bool = False


@dataclass(frozen=True, slots=True)
class AerEvent:
    """An AER error a PCIe port received, as the kernel logged it, parsed once: the port that
    reported it, the device it came from, its severity (`Corrected`, `Uncorrected
    (Non-Fatal)`, `Uncorrected (Fatal)`) and whether the port saw several."""

    record: LogRecord
    port: str
    source: str
    severity: str
    multiple: bool


def event_of(record: LogRecord) -> AerEvent | None:
    """The AER error a kernel record reports, or None (the counters say how many: `read`)."""
    if "AER:" not in record.text or not record.kernel:
        return None
    match = _RECEIVED.search(record.text)
    if match is None:
        return None
    return AerEvent(
        record,
        port=match.group("port"),
        source=match.group("source"),
        severity=match.group("severity"),
        multiple=match.group("multiple") is not None,
    )


def parse(text: str, kind: str) -> AerCounts | None:
    """One AER file's counts; None when it holds no `name count` line at all."""
    errors: dict[str, int] = {}
    total: int | None = None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            continue
        if parts[0] == _TOTALS[kind]:
            total = int(parts[1])
        elif parts[0].startswith("TOTAL_"):
            continue
        else:
            errors[parts[0]] = int(parts[1])
    if total is None and not errors:
        return None
    nonzero = {name: count for name, count in errors.items() if count}
    return AerCounts(total if total is not None else sum(errors.values()), nonzero)


def device_path(fs: HostFS, address: str) -> str:
    """Where a PCI device's directory lies in the device tree (its link resolved)."""
    link = fs.readlink(f"{PCI_DEVICES}/{address}")
    if link is None:
        return f"{PCI_DEVICES}/{address}"
    return posixpath.normpath(posixpath.join(PCI_DEVICES, link))


def chain(fs: HostFS, address: str) -> list[tuple[str, str]]:
    """The device and the bridges above it up to the root port, nearest first, as
    (address, sysfs directory)."""
    path = device_path(fs, address)
    found: list[tuple[str, str]] = []
    while True:
        name = posixpath.basename(path)
        if not _BDF.match(name):
            break
        found.append((name, path))
        path = posixpath.dirname(path)
    return found or [(address, path)]


def read_counts(fs: HostFS, directory: str) -> dict[str, AerCounts]:
    """The AER files present in one device directory."""
    counts: dict[str, AerCounts] = {}
    for kind in KINDS:
        text = fs.try_read_text(f"{directory}/{_FILES[kind]}")
        parsed = parse(text, kind) if text is not None else None
        if parsed is not None:
            counts[kind] = parsed
    return counts


def read(fs: HostFS, addresses: list[str]) -> list[AerDevice]:
    """The AER counters of each device in `addresses` and of every bridge above them, each
    device once (bridges shared by several GPUs are read once), devices without AER files
    left out."""
    seen: set[str] = set()
    devices: list[AerDevice] = []
    for address in addresses:
        path = chain(fs, address)
        for depth, (bdf, directory) in enumerate(path):
            if bdf in seen:
                continue
            seen.add(bdf)
            counts = read_counts(fs, directory)
            if not counts:
                continue
            below = path[depth - 1][0] if depth else None
            devices.append(
                AerDevice(bdf, counts, below, root_port=depth == len(path) - 1 and depth > 0)
            )
    return devices


def read_host(host: Host, addresses: list[str]) -> list[AerDevice]:
    """`read` on this host's sysfs: the AER counters of `addresses` and the bridges above
    them."""
    return read(host.fs, addresses)
