"""RDMA devices, their ports and the verbs device nodes as sysfs shows them
(`host.infiniband`), on a replayed snapshot."""

from __future__ import annotations

from gpuprobe.host import infiniband, snapshot_host
from helpers import snapshot


def test_an_ndr_devices_port_gids_and_counters() -> None:
    host = snapshot_host(snapshot("synthetic-rdma-rate-degraded"))
    names = infiniband.device_names(host)
    assert names == [f"mlx5_{i}" for i in range(8)]
    assert infiniband.verbs_devices(host) == [f"/dev/infiniband/uverbs{i}" for i in range(8)]
    assert infiniband.netdev_devices(host) == {f"ibp{i}s0": f"mlx5_{i}" for i in range(8)}
    assert infiniband.read_devices(host, names[:1]) == [
        {
            "name": "mlx5_0",
            "hca_type": "MT4129",
            "fw_ver": "28.39.1002",
            "node_guid": "a088:c203:0047:1a2c",
            "netdevs": ["ibp0s0"],
            "ports": [
                {
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
            ],
        }
    ]


def test_a_node_without_rdma_has_no_devices() -> None:
    host = snapshot_host(snapshot("kvm-epyc-nogpu"))
    assert infiniband.device_names(host) == []
    assert infiniband.netdev_devices(host) == {}
