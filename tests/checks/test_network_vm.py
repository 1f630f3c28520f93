"""A cloud VM's primary NIC is no fabric NIC: a paravirtual NIC (virtio_net, gve, ena,
hv_netvsc, ...) without an RDMA device that carries the default route. The sysfs links and
route tables below are those of a real KVM guest (the one `kvm-epyc-nogpu` was recorded on)
and of a GCE A3's gve NICs, whose GPUDirect-TCPX siblings stay fabric NICs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from gpuprobe.checks import network
from gpuprobe.checks.context import CheckContext
from gpuprobe.config import Config
from gpuprobe.host import snapshot_host
from helpers import run_check, snapshot

# /proc/net/route and /proc/net/ipv6_route of the KVM guest, as the kernel prints them.
ROUTE = (
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"
    "                                                       \n"
    "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0"
    "                                                                               \n"
    "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0"
    "                                                                               \n"
)
ZERO = "0" * 32
IPV6_ROUTE = (
    f"fd000000000000000000000000000000 40 {ZERO} 00 {ZERO} 00000100 00000001 00000000 "
    "00000001     eth0\n"
    f"{ZERO} 00 {ZERO} 00 fd000000000000000000000000000001 00000400 00000002 00000000 "
    "00000003     eth0\n"
    f"{ZERO[:-1]}1 80 {ZERO} 00 {ZERO} 00000000 00000004 00000000 80200001       lo\n"
    f"{ZERO} 00 {ZERO} 00 {ZERO} ffffffff 00000001 00000000 00200200       lo\n"
)
# Without a default route of its own: only lo's unreachable one.
IPV6_NO_DEFAULT = f"{ZERO} 00 {ZERO} 00 {ZERO} ffffffff 00000001 00000000 00200200       lo\n"


def kvm_guest(tmp_path: Path) -> Path:
    dest = tmp_path / "kvm"
    shutil.copytree(snapshot("kvm-epyc-nogpu"), dest, symlinks=True)
    return dest


def test_a_recorded_kvm_guests_virtio_nic_is_not_a_fabric_nic() -> None:
    """The snapshot keeps no route table: its one paravirtual NIC is the primary one."""
    result = run_check("network", "kvm-epyc-nogpu")
    assert result.summary == "no fabric NIC (eth0 is the VM's primary virtio_net NIC)"
    assert result.data["fabric"] == []
    (eth0,) = [i for i in result.data["interfaces"] if i["name"] == "eth0"]
    assert (eth0["physical"], eth0["driver"], eth0["fabric"]) == (True, "virtio_net", False)
    assert result.findings == []


def test_the_default_route_names_the_primary_nic(tmp_path: Path) -> None:
    snap = kvm_guest(tmp_path)
    (snap / "rootfs/proc/net").mkdir(parents=True)
    (snap / "rootfs/proc/net/route").write_text(ROUTE)
    result = network.run(CheckContext(snapshot_host(str(snap))), Config())
    (eth0,) = [i for i in result.data["interfaces"] if i["name"] == "eth0"]
    assert (eth0["default_route"], eth0["fabric"]) == (True, False)
    (snap / "rootfs/proc/net/route").write_text(ROUTE.splitlines(keepends=True)[0])
    (snap / "rootfs/proc/net/ipv6_route").write_text(IPV6_ROUTE)  # IPv6's default alone
    result = network.run(CheckContext(snapshot_host(str(snap))), Config())
    assert result.summary == "no fabric NIC (eth0 is the VM's primary virtio_net NIC)"


def test_a_virtio_nic_without_the_default_route_stays_a_fabric_nic(tmp_path: Path) -> None:
    snap = kvm_guest(tmp_path)
    (snap / "rootfs/proc/net").mkdir(parents=True)
    (snap / "rootfs/proc/net/route").write_text(ROUTE.splitlines(keepends=True)[0])
    (snap / "rootfs/proc/net/ipv6_route").write_text(IPV6_NO_DEFAULT)
    result = network.run(CheckContext(snapshot_host(str(snap))), Config())
    assert result.summary == "1 of 1 fabric NICs up"


def test_the_nics_a_configuration_names_are_the_fabric_even_on_a_vm() -> None:
    result = network.run(
        CheckContext(snapshot_host(snapshot("kvm-epyc-nogpu"))),
        Config().with_section(network.NAME, network.NetworkConfig(fabric_interfaces=("eth0",))),
    )
    assert (result.summary, result.data["fabric"]) == ("1 of 1 fabric NICs up", ["eth0"])


def gce_a3(tmp_path: Path, routes: bool) -> Path:
    """A GCE A3 VM: the primary gve NIC ens4 and GPUDirect-TCPX gve NICs ens5-ens8, in
    sysfs as PCI NICs are (class link into the device tree, the device's driver link)."""
    snap = tmp_path / "a3"
    rootfs = snap / "rootfs"
    links: list[dict[str, Any]] = [
        {"index": 1, "name": "lo", "operstate": "UNKNOWN", "admin_up": True, "mtu": 65536,
         "mac": "00:00:00:00:00:00", "kind": None, "link_type": "loopback", "addresses": []},
    ]  # fmt: skip
    for n, name in enumerate(["ens4", "ens5", "ens6", "ens7", "ens8"]):
        slot = f"0000:00:{4 + n:02x}.0" if n == 0 else f"0000:{0x8B + n:02x}:00.0"
        device = rootfs / "sys/devices/pci0000:00" / slot
        (device / "net" / name).mkdir(parents=True)
        (device / "net" / name / "speed").write_text("200000\n")
        (device / "net" / name / "device").symlink_to("../../../" + slot)
        (device / "driver").symlink_to("../../../bus/pci/drivers/gve")
        (rootfs / "sys/bus/pci/drivers/gve").mkdir(parents=True, exist_ok=True)
        (rootfs / "sys/class/net").mkdir(parents=True, exist_ok=True)
        (rootfs / "sys/class/net" / name).symlink_to(f"../../devices/pci0000:00/{slot}/net/{name}")
        links.append(
            {"index": n + 2, "name": name, "operstate": "UP", "admin_up": True,
             "mtu": 1460 if n == 0 else 8244, "mac": f"42:01:0a:00:00:{n + 2:02x}",
             "kind": None, "link_type": "ether",
             "addresses": [{"family": "inet", "address": f"10.{n}.0.2", "prefixlen": 32}]}
        )  # fmt: skip
    (snap / "netlink.json").write_text(json.dumps({"format": 1, "links": links}))
    if routes:
        (rootfs / "proc/net").mkdir(parents=True)
        (rootfs / "proc/net/route").write_text(
            ROUTE.splitlines(keepends=True)[0]
            + "ens4\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
            + "ens5\t0000010A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
        )
    return snap


def test_a_gce_a3_keeps_its_tcpx_nics_in_the_fabric(tmp_path: Path) -> None:
    result = network.run(CheckContext(snapshot_host(str(gce_a3(tmp_path, routes=True)))), Config())
    assert result.data["fabric"] == ["ens5", "ens6", "ens7", "ens8"]
    assert result.summary == "4 of 4 fabric NICs up; ens4 is the VM's primary gve NIC"
    assert result.findings == []  # the primary's MTU 1460 is not the rails' 8244


def test_without_route_tables_several_paravirtual_nics_stay_fabric(tmp_path: Path) -> None:
    """Which of them is the primary one is unknown: none is taken out of the fabric."""
    result = network.run(CheckContext(snapshot_host(str(gce_a3(tmp_path, routes=False)))), Config())
    assert result.data["fabric"] == ["ens4", "ens5", "ens6", "ens7", "ens8"]
