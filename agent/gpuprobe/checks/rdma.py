"""Check `rdma`: are the RDMA (InfiniBand / RoCE) ports active, at their rate, error-free?

The devices as `gpuprobe.host.infiniband` reads them (`/sys/class/infiniband/<dev>/ports/<n>/`:
state, phys_state, rate, link_layer, GIDs, error counters; the device's netdevs) and the verbs
device nodes under `/dev/infiniband` that RDMA applications open. Counters that rose since the
previous run (the daemon's runner keeps them: the check's state, `KEEPS`) are a warning; a
one-shot check has no previous run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check
from gpuprobe.checks.state import Keeps
from gpuprobe.config import Config
from gpuprobe.host import infiniband
from gpuprobe.host.infiniband import RdmaDevice, RdmaPort
from gpuprobe.measure.perftest import RdmaTestConfig
from gpuprobe.report import Action, CheckResult, Finding, Severity

NAME = "rdma"
ACTIVE = 4  # port state "4: ACTIVE" (ib_verbs: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE)
LINK_UP = 5  # physical state "5: LinkUp"


class RdmaData(TypedDict):
    """The check's data: the devices, and the uverbs device nodes (none without devices)."""

    devices: list[RdmaDevice]
    verbs_devices: NotRequired[list[str]]


@dataclass
class RdmaKept:
    """What the check keeps between runs: each port's error counters at the last run, by
    `<device>/<port>`."""

    counters: dict[str, dict[str, int]] = field(default_factory=dict)


KEEPS: Keeps[RdmaKept] = Keeps(RdmaKept)


def run(ctx: CheckContext, config: Config) -> CheckResult:
    """Judge every RDMA port in scope."""
    host = ctx.host
    settings = config.section(NAME, RdmaConfig)
    names = infiniband.device_names(host)
    if settings.devices:
        names = [n for n in names if n in settings.devices]
    if not names:
        return CheckResult(NAME, "no RDMA devices", data=RdmaData(devices=[]))
    devices = infiniband.read_devices(host, names)
    kept = ctx.kept(KEEPS)
    findings: list[Finding] = []
    for device in devices:
        for port in device["ports"]:
            findings += _port_findings(device["name"], port, settings.expected_rate_gbps)
            findings += _rising(device["name"], port, kept)
    verbs = infiniband.verbs_devices(host)
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


def _rising(device: str, port: RdmaPort, kept: RdmaKept) -> list[Finding]:
    key = f"{device}/{port['port']}"
    previous = kept.counters.get(key, {})
    kept.counters[key] = dict(port["counters"])
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


CHECK: Check[RdmaData] = Check(
    NAME, run, section=RdmaConfig, condition="GPUNetworkReady", keeps=KEEPS
)
