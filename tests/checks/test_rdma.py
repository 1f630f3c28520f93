"""Check `rdma` on sysfs trees of InfiniBand and RoCE nodes."""

from __future__ import annotations

from pathlib import Path

from conftest import snapshot
from gpuprobe.checks import rdma
from gpuprobe.checks.context import CheckContext
from gpuprobe.config import Config
from gpuprobe.host import snapshot_host
from helpers import codes, config, run_check


def test_no_rdma_devices_is_ok_and_says_so() -> None:
    result = run_check("rdma", "kvm-epyc-nogpu")
    assert result.findings == []
    assert result.summary == "no RDMA devices"


def test_healthy_ndr_rails() -> None:
    result = run_check(
        "rdma", "synthetic-ndr-fabric-healthy", config(rdma={"expected_rate_gbps": 400})
    )
    assert result.findings == []
    assert result.summary == "8 of 8 RDMA ports active"
    device = result.data["devices"][0]
    assert device["name"] == "mlx5_0" and device["netdevs"] == ["ibp0s0"]
    assert device["ports"][0] == {
        "port": 1,
        "state": 4,
        "state_text": "4: ACTIVE",
        "phys_state": 5,
        "phys_state_text": "5: LinkUp",
        "rate": "400 Gb/sec (4X NDR)",
        "rate_gbps": 400.0,
        "link_layer": "InfiniBand",
        "gids": [
            {
                "index": 0,
                "gid": "fe80:0000:0000:0000:a288:c203:0047:1a2c",
                "type": None,
                "netdev": None,
            }
        ],
        "counters": {"link_downed": 0, "symbol_error": 0},
    }
    assert result.data["verbs_devices"] == [f"uverbs{i}" for i in range(8)]


def test_port_down() -> None:
    result = run_check("rdma", "synthetic-rdma-port-down")
    assert codes(result) == [("RDMA_PORT_DOWN", "CRITICAL", "CHECK_NETWORK", "rdma:mlx5_3:1")]
    assert "physical state 3: Disabled" in result.findings[0].message


def test_rate_degraded_against_the_expected_rate() -> None:
    cfg = config(rdma={"expected_rate_gbps": 400})
    result = run_check("rdma", "synthetic-rdma-rate-degraded", cfg)
    assert codes(result) == [("RDMA_RATE_DEGRADED", "CRITICAL", "CHECK_NETWORK", "rdma:mlx5_5:1")]
    assert (
        "trained at 200 Gb/sec (4X HDR), below the expected 400 Gb/s" in result.findings[0].message
    )
    assert run_check("rdma", "synthetic-rdma-rate-degraded").findings == []


def test_roce_gids_carry_their_type_and_netdev() -> None:
    result = run_check("rdma", "synthetic-roce-mtu-mismatch")
    port = result.data["devices"][2]["ports"][0]
    assert port["link_layer"] == "Ethernet"
    assert port["gids"][0]["type"] == "RoCE v2" and port["gids"][0]["netdev"] == "eth3"


def test_missing_verbs_device_nodes() -> None:
    result = run_check("rdma", "synthetic-rdma-no-uverbs")
    assert codes(result) == [("RDMA_UVERBS_MISSING", "CRITICAL", "FIX_CONFIG", "node")]


def test_only_the_configured_devices() -> None:
    cfg = config(rdma={"devices": ["mlx5_0", "mlx5_1"]})
    result = run_check("rdma", "synthetic-rdma-port-down", cfg)
    assert result.findings == []
    assert result.summary == "2 of 2 RDMA ports active"


def test_error_counters_rising_between_runs(tmp_path: Path) -> None:
    import shutil

    snap = tmp_path / "snap"
    shutil.copytree(snapshot("synthetic-ndr-fabric-healthy"), snap, symlinks=True)
    host = snapshot_host(str(snap))
    ctx = CheckContext(host)  # one runner's context: its states
    assert rdma.run(ctx, Config()).findings == []
    counters = snap / "rootfs/sys/class/infiniband/mlx5_4/ports/1/counters"
    (counters / "symbol_error").write_text("17\n")
    (counters / "link_downed").write_text("1\n")
    second = rdma.run(ctx, Config())
    assert codes(second) == [("RDMA_ERRORS_RISING", "WARNING", "CHECK_NETWORK", "rdma:mlx5_4:1")]
    assert "(link_downed +1, symbol_error +17)" in second.findings[0].message
    assert rdma.run(ctx, Config()).findings == []
