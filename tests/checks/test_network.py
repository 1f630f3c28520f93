"""Check `network` on snapshots and on real interfaces in a network namespace."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import require_root, require_tool, snapshot
from gpuprobe.checks import network, rdma
from gpuprobe.checks.context import CheckContext
from gpuprobe.config import Config
from gpuprobe.host import snapshot_host
from helpers import codes, config, run_check


def test_healthy_fabric_raises_nothing() -> None:
    result = run_check("network", "synthetic-ndr-fabric-healthy")
    assert result.findings == []
    assert result.summary == "9 of 9 fabric NICs up"
    assert result.data["fabric"] == ["eno1", *[f"ibp{i}s0" for i in range(8)]]
    rail = next(i for i in result.data["interfaces"] if i["name"] == "ibp2s0")
    assert rail == {
        "name": "ibp2s0",
        "operstate": "UP",
        "admin_up": True,
        "mtu": 4092,
        "mac": "02:00:00:00:00:05",
        "kind": None,
        "link_type": "infiniband",
        "physical": True,
        "driver": "mlx5_core",
        "speed_mbps": 400000,
        "addresses": ["192.168.2.17/24"],
        "fabric": True,
        "rdma_device": "mlx5_2",
        "default_route": False,
    }


def test_a_rail_down_is_left_to_the_rdma_check() -> None:
    result = run_check("network", "synthetic-rdma-port-down")
    assert result.findings == []
    assert result.summary == "8 of 9 fabric NICs up"


def test_mtu_mismatch_names_only_the_odd_rail() -> None:
    result = run_check("network", "synthetic-roce-mtu-mismatch")
    assert codes(result) == [("NIC_MTU_MISMATCH", "WARNING", "FIX_CONFIG", "nic:eth3")]


def test_the_nics_a_configuration_names_are_one_fabric_for_the_mtu() -> None:
    # eth1, eth2, eth4 at 9000; eth3 (mlx5_core) and the management eno1 (ixgbe) at 1500.
    cfg = config(network={"fabric_interfaces": ["eth*", "eno1"]})
    result = run_check("network", "synthetic-roce-mtu-mismatch", cfg)
    assert codes(result) == [
        ("NIC_MTU_MISMATCH", "WARNING", "FIX_CONFIG", "nic:eno1"),
        ("NIC_MTU_MISMATCH", "WARNING", "FIX_CONFIG", "nic:eth3"),
    ]
    assert result.findings[0].message == (
        "fabric NIC eno1 has MTU 1500 while the other Ethernet fabric NICs have 9000: "
        "traffic between them fragments or stalls"
    )
    # Unnamed, the same NICs are compared kind by kind: eno1 is a management NIC.
    default = run_check("network", "synthetic-roce-mtu-mismatch")
    assert [f.message for f in default.findings] == [
        "fabric NIC eth3 has MTU 1500 while the other mlx5_core fabric NICs have 9000: traffic "
        "between them fragments or stalls"
    ]


def test_a_physical_nic_without_carrier() -> None:
    result = run_check("network", "synthetic-nic-no-carrier")
    assert codes(result) == [("NIC_DOWN", "WARNING", "CHECK_NETWORK", "nic:eno2")]


def test_configured_fabric_makes_down_critical_and_missing_nics_findings() -> None:
    cfg = config(network={"fabric_interfaces": ["eno*", "ib9"]})
    result = run_check("network", "synthetic-nic-no-carrier", cfg)
    assert codes(result) == [
        ("NIC_DOWN", "CRITICAL", "CHECK_NETWORK", "nic:eno2"),
        ("NIC_DOWN", "CRITICAL", "CHECK_NETWORK", "nic:ib9"),
    ]
    assert result.data["fabric"] == ["eno1", "eno2"]


def test_speed_below_the_expected() -> None:
    cfg = config(network={"min_speed_mbps": 25000})
    result = run_check("network", "synthetic-roce-mtu-mismatch", cfg)
    assert ("NIC_SPEED_LOW", "WARNING", "CHECK_NETWORK", "nic:eno1") in codes(result)


def test_a_snapshot_without_netlink_has_no_fabric() -> None:
    result = run_check("network", "synthetic-h100-8gpu-healthy")
    assert result.findings == []
    assert result.summary == "no fabric NIC (no physical NIC up)"


@pytest.fixture
def netns() -> Iterator[str]:
    """A network namespace with veth pair gpa/gpb (gpb down), removed on every way out."""
    require_root()
    require_tool("ip")
    name = f"gp-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        run = ["ip", "-n", name]
        subprocess.run(
            [*run, "link", "add", "gpa", "mtu", "9000", "type", "veth", "peer", "name", "gpb"],
            check=True,
        )
        subprocess.run([*run, "link", "set", "gpa", "up"], check=True)
        subprocess.run([*run, "addr", "add", "10.77.0.1/24", "dev", "gpa"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_live_interfaces_in_a_namespace(netns: str, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("network: {fabric_interfaces: ['gp*']}\n")
    out = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            netns,
            sys.executable,
            "-m",
            "gpuprobe",
            "check",
            "--json",
            "--only",
            "network",
            "--config",
            str(cfg),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    report = json.loads(out.stdout)
    network = report["checks"][0]
    by_name = {i["name"]: i for i in network["data"]["interfaces"]}
    assert by_name["gpa"]["mtu"] == 9000
    assert by_name["gpa"]["addresses"] == ["10.77.0.1/24"]
    assert by_name["gpa"]["kind"] == "veth"
    assert by_name["gpb"]["admin_up"] is False
    assert sorted((f["code"], f["severity"], f["resource"]) for f in network["findings"]) == [
        ("NIC_DOWN", "CRITICAL", "nic:gpa"),
        ("NIC_DOWN", "CRITICAL", "nic:gpb"),
    ]
    messages = sorted(f["message"] for f in network["findings"])
    assert messages == [
        "fabric NIC gpa has no link (state LOWERLAYERDOWN): check the cable, transceiver and "
        "switch port",
        "fabric NIC gpb is administratively down",
    ]
    assert out.returncode == 2


def test_an_ipoib_interface_set_down_on_an_active_rail_is_named_when_configured(
    tmp_path: Path,
) -> None:
    """ibp3s0 set administratively down while its InfiniBand port stays ACTIVE: the rdma check
    sees a healthy port, so the network check names the interface, if the fabric names it."""
    node = tmp_path / "ipoib-down"
    shutil.copytree(snapshot("synthetic-ndr-fabric-healthy"), node, symlinks=True)
    netlink = json.loads((node / "netlink.json").read_text())
    for link in netlink["links"]:
        if link["name"] == "ibp3s0":
            link.update(admin_up=False, operstate="DOWN")
    (node / "netlink.json").write_text(json.dumps(netlink))
    host = snapshot_host(str(node))
    ctx = CheckContext(host)  # one runner's context: its states
    configured = network.run(ctx, config(network={"fabric_interfaces": ["ibp*"]}))
    assert codes(configured) == [("NIC_DOWN", "CRITICAL", "CHECK_NETWORK", "nic:ibp3s0")]
    assert configured.findings[0].message == "fabric NIC ibp3s0 is administratively down"
    assert rdma.run(ctx, Config()).findings == []  # its port is ACTIVE
    assert network.run(ctx, Config()).findings == []  # not brought up: not the default fabric


def test_named_fabric_nics_of_another_link_type_keep_their_own_mtu() -> None:
    # eno1 (Ethernet, 1500) named beside the IPoIB rails (4092): each link type on its own.
    cfg = config(network={"fabric_interfaces": ["ibp*", "eno1"]})
    assert run_check("network", "synthetic-ndr-fabric-healthy", cfg).findings == []
