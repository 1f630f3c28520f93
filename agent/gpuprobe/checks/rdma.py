"""Check `rdma`: are the RDMA (InfiniBand / RoCE) ports active, at their rate, error-free?

Reads `/sys/class/infiniband/<dev>/ports/<n>/` (state, phys_state, rate, link_layer, GIDs,
error counters) and the device's netdevs, and `/dev/infiniband` for the verbs device nodes
that RDMA applications open. Counters that rose since the previous run (the daemon keeps them
in memory) are a warning; a one-shot check has no previous run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from gpuprobe.checks.record import Check
from gpuprobe.config import Config
from gpuprobe.host import Host
from gpuprobe.host.fs import HostFS
from gpuprobe.measure.perftest import RdmaTestConfig
from gpuprobe.report import Action, CheckResult, Finding, Severity

NAME = "rdma"
SYS_IB = "/sys/class/infiniband"
ACTIVE = 4  # port state "4: ACTIVE" (ib_verbs: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE)
LINK_UP = 5  # physical state "5: LinkUp"
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


class RdmaData(TypedDict):
    """The check's data: the devices, and the uverbs device nodes (none without devices)."""

    devices: list[RdmaDevice]
    verbs_devices: NotRequired[list[str]]


def run(host: Host, config: Config) -> CheckResult:
    """Judge every RDMA port in scope."""
    names = host.fs.listdir(SYS_IB)
    if config.section(NAME, RdmaConfig).devices:
        names = [n for n in names if n in config.section(NAME, RdmaConfig).devices]
    if not names:
        return CheckResult(NAME, "no RDMA devices", data=RdmaData(devices=[]))
    devices = [_device(host.fs, name) for name in names]
    memory = host.memory.of(NAME)
    findings: list[Finding] = []
    for device in devices:
        for port in device["ports"]:
            findings += _port_findings(
                device["name"], port, config.section(NAME, RdmaConfig).expected_rate_gbps
            )
            findings += _rising(device["name"], port, memory)
    verbs = host.fs.glob("/dev/infiniband/uverbs*")
    if not verbs:
        findings.append(
            Finding(
                "RDMA_UVERBS_MISSING",
                Severity.CRITICAL,
                f"{len(devices)} RDMA devices but no /dev/infiniband/uverbs* device nodes: "
                "load the ib_uverbs module (RDMA applications cannot open the devices)",
                Action.FIX_CONFIG,
            )
        )
    ports = [p for d in devices for p in d["ports"]]
    active = sum(p["state"] == ACTIVE for p in ports)
    data: RdmaData = {"devices": devices, "verbs_devices": [v.rsplit("/", 1)[1] for v in verbs]}
    return CheckResult(NAME, f"{active} of {len(ports)} RDMA ports active", findings, data)


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


def _port_findings(device: str, port: RdmaPort, expected: float | None) -> list[Finding]:
    resource = f"rdma:{device}:{port['port']}"
    name = f"RDMA port {device}/{port['port']}"
    if port["state"] != ACTIVE:
        if port["phys_state"] == LINK_UP:
            why = (
                f"is {port['state_text']}: the link is up but no subnet manager has "
                "activated it (check the subnet manager / switch)"
            )
        else:
            why = (
                f"is {port['state_text'] or 'unreadable'} (physical state "
                f"{port['phys_state_text'] or 'unknown'}): check the cable, transceiver and "
                "switch port"
            )
        return [
            Finding(
                "RDMA_PORT_DOWN", Severity.CRITICAL, f"{name} {why}", Action.CHECK_NETWORK, resource
            )
        ]
    if expected and port["rate_gbps"] is not None and port["rate_gbps"] < expected:
        return [
            Finding(
                "RDMA_RATE_DEGRADED",
                Severity.CRITICAL,
                f"{name} trained at {port['rate']}, below the expected {expected:g} Gb/s: "
                "reseat or replace the cable or transceiver, check the switch port",
                Action.CHECK_NETWORK,
                resource,
            )
        ]
    return []


def _rising(device: str, port: RdmaPort, memory: dict[str, Any]) -> list[Finding]:
    key = f"{device}/{port['port']}"
    previous: dict[str, int] = memory.get(key, {})
    memory[key] = dict(port["counters"])
    rose = {
        name: value - previous[name]
        for name, value in port["counters"].items()
        if name in previous and value > previous[name]
    }
    if not rose:
        return []
    what = ", ".join(f"{name} +{delta}" for name, delta in sorted(rose.items()))
    return [
        Finding(
            "RDMA_ERRORS_RISING",
            Severity.WARNING,
            f"RDMA port {device}/{port['port']} error counters rose since the last run ({what}): "
            "a marginal cable or transceiver",
            Action.CHECK_NETWORK,
            f"rdma:{device}:{port['port']}",
        )
    ]


@dataclass(frozen=True)
class RdmaConfig:
    """What the RDMA ports must do, and how RDMA bandwidth tests run."""

    # The rate each port must train at, in Gb/s (400 for NDR, 200 for HDR).
    expected_rate_gbps: float | None = None
    # Devices to check (e.g. ["mlx5_0", "mlx5_1"]); empty: all of them.
    devices: tuple[str, ...] = ()
    test: RdmaTestConfig = field(default_factory=RdmaTestConfig)


CHECK: Check[RdmaData] = Check(NAME, run, section=RdmaConfig, condition="GPUNetworkReady")
