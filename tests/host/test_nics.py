"""The node's interfaces as netlink and sysfs show them, and the default routes
(`host.nics`)."""

from __future__ import annotations

from pathlib import Path

from gpuprobe.host import nics, snapshot_host
from helpers import snapshot


def test_each_link_with_its_driver_speed_and_rdma_device() -> None:
    host = snapshot_host(snapshot("synthetic-ndr-fabric-healthy"))
    found = [
        (n.link.name, n.physical, n.driver, n.speed_mbps, n.rdma_device)
        for n in nics.read_nics(host)
    ]
    assert found[:4] == [
        ("lo", False, None, None, None),
        ("eno1", True, "ixgbe", 10000, None),
        ("ibp0s0", True, "mlx5_core", 400000, "mlx5_0"),
        ("ibp1s0", True, "mlx5_core", 400000, "mlx5_1"),
    ]
    assert nics.default_route_interfaces(host) is None  # the snapshot keeps no route table


def test_default_routes_of_both_families(tmp_path: Path) -> None:
    (tmp_path / "rootfs/proc/net").mkdir(parents=True)
    (tmp_path / "rootfs/proc/net/route").write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "ens5\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
        "ens5\t0000000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
    )
    (tmp_path / "rootfs/proc/net/ipv6_route").write_text(
        "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
        "fe800000000000000000000000000001 00000400 00000001 00000000 00000003 ens6\n"
        "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
        "00000000000000000000000000000000 ffffffff 00000001 00000000 00200200 lo\n"
    )
    assert nics.default_route_interfaces(snapshot_host(str(tmp_path))) == {"ens5", "ens6"}
