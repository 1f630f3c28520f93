"""The collector renders a report into exactly the metrics docs/metrics.md lists."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from conftest import require_tool
from gpuprobe import __version__
from gpuprobe.checks.runner import Ran
from gpuprobe.daemon.store import AgentState, LinkResult, ReportStore
from gpuprobe.report import Action, CheckResult, Finding, NodeReport, Severity, Status
from gpuprobe.serve.metrics import RENDERERS, ReportCollector

T = datetime(2026, 11, 29, 21, 0, 0, tzinfo=UTC)
UUID0 = "GPU-5f1c0000-8e2b-4c1d-9a7e-000000000000"
UUID1 = "GPU-5f1c0001-8e2b-4c1d-9a7e-000000000001"

GPU0: dict[str, Any] = {
    "index": 0,
    "uuid": UUID0,
    "name": "NVIDIA H100 80GB HBM3",
    "pci_bus_id": "0000:18:00.0",
    "temperature_celsius": 41,
    "temperature_slowdown_celsius": 87,
    "power_watts": 118.5,
    "power_limit_watts": 700.0,
    "utilization_gpu_percent": 35,
    "utilization_memory_percent": 12,
    "memory_used_bytes": 543096832,
    "memory_total_bytes": 85520809984,
    "ecc_uncorrected_volatile": 2,
    "ecc_uncorrected_aggregate": 5,
    "ecc_corrected_volatile": 10,
    "ecc_corrected_aggregate": 100,
    "remapped_rows_correctable": 1,
    "remapped_rows_uncorrectable": 2,
    "remapped_rows_pending": True,
    "remapped_rows_failure": False,
    "pcie_link_width": 8,
    "pcie_link_width_max": 16,
    "pcie_link_generation": 5,
    "mig_mode_current": 0,
    "idle": False,
}
# GPU 1 answers little: missing keys and a garbage value give no sample, never an error.
GPU1: dict[str, Any] = {
    "index": 1,
    "uuid": UUID1,
    "name": "NVIDIA H100 80GB HBM3",
    "temperature_celsius": "hot",
    "power_watts": None,
    "idle": True,
}

# The mig check's data: GPU 0 with two GPU instances (one compute instance each), GPU 1 with MIG
# off; broken entries give no sample.
MIG_GPUS: list[Any] = [
    {
        "index": 0,
        "uuid": UUID0,
        "mig_mode_current": 1,
        "gpu_instances": [
            {
                "id": 2,
                "profile": "3g.40gb",
                "compute_instances": [
                    {"id": 0, "uuid": "MIG-7b3d0000", "profile": "3g.40gb"},
                    {"id": "x", "uuid": "MIG-bad"},
                    "garbage",
                ],
            },
            {"id": 9, "profile": "1g.10gb", "compute_instances": [{"id": 0}]},
            {"profile": "1g.10gb", "compute_instances": [{"id": 0, "uuid": "MIG-no-gi"}]},
            "garbage",
        ],
    },
    {"index": 1, "uuid": UUID1, "mig_mode_current": 0},
    {"uuid": "no index", "gpu_instances": [{"id": 1, "compute_instances": [{"id": 0}]}]},
]


def report() -> NodeReport:
    return NodeReport(
        "gpu-node-17",
        T,
        [
            CheckResult(
                "driver",
                "driver 550.54.15",
                data={"driver_version": "550.54.15", "cuda_driver_version": "12.4"},
                duration_seconds=0.012,
            ),
            CheckResult(
                "gpus",
                "2 GPUs",
                [
                    Finding(
                        "ROW_REMAP_PENDING",
                        Severity.CRITICAL,
                        "GPU 0 has 2 uncorrectable rows remapped",
                        Action.RESET_GPU,
                        f"gpu:0:{UUID0}",
                    ),
                    Finding(  # the same series as above: rendered once
                        "ROW_REMAP_PENDING",
                        Severity.CRITICAL,
                        "GPU 0: another message",
                        Action.RESET_GPU,
                        f"gpu:0:{UUID0}",
                    ),
                    Finding(
                        "PCIE_LINK_DEGRADED",
                        Severity.WARNING,
                        "GPU 0 runs x8 of x16",
                        Action.HARDWARE_INSPECTION,
                        f"gpu:0:{UUID0}",
                    ),
                ],
                data={"gpus_seen_by_nvml": 2, "gpus": [GPU0, GPU1, "garbage"]},
                duration_seconds=0.25,
            ),
            CheckResult(
                "xid",
                "XID 79 on GPU 1",
                data={
                    "xids": [
                        {"gpu": 1, "uuid": UUID1, "xid": 79, "count": 3, "last": "…"},
                        {"gpu": 0, "uuid": UUID0, "xid": 13, "count": 1},
                        {"gpu": 0, "xid": "bad"},
                        "garbage",
                    ]
                },
            ),
            CheckResult(
                "storage",
                "2 paths",
                data={
                    "paths": [
                        {
                            "path": "/scratch",
                            "write_bytes_per_second": 1.9e9,
                            "read_bytes_per_second": 2.4e9,
                        },
                        {"path": "/data", "write_bytes_per_second": 5e8},
                        {"write_bytes_per_second": 1.0},
                    ]
                },
                floor=Status.UNKNOWN,
            ),
            CheckResult("mig", "MIG on 1 of 2 GPUs: 2 MIG devices", data={"gpus": MIG_GPUS}),
            CheckResult("workloads", "2 of 3 MIG devices and GPUs allocated", data=WORKLOADS),
        ],
    )


# The workloads check's data: GPU 0's MIG device held by a pod, GPU 1 time-sliced between two
# containers (twice the same one: one series), and the accounting's totals.
WORKLOADS = {
    "devices": [
        {"resource": "gpu:0:" + UUID0, "gpu": 0, "uuid": UUID0, "holders": []},
        {
            "resource": "mig:0:1:0",
            "gpu": 0,
            "uuid": UUID0,
            "mig": {"uuid": "MIG-1", "gi": 1, "ci": 0},
            "holders": [
                {
                    "namespace": "ml",
                    "pod": "a",
                    "container": "c",
                    "resource": "nvidia.com/mig-3g.40gb",
                }
            ],
        },
        {
            "resource": "gpu:1:" + UUID1,
            "gpu": 1,
            "uuid": UUID1,
            "holders": [
                {
                    "namespace": "dev",
                    "pod": "b",
                    "container": "j",
                    "resource": "nvidia.com/gpu.shared",
                },
                {
                    "namespace": "dev",
                    "pod": "b",
                    "container": "j",
                    "resource": "nvidia.com/gpu.shared",
                },
                {
                    "namespace": "dev",
                    "pod": "d",
                    "container": "j",
                    "resource": "nvidia.com/gpu.shared",
                },
            ],
        },
    ],
    "accounting": {
        "since": "2026-11-29T08:00:00Z",
        "gpus": [
            {
                "gpu": 0,
                "uuid": UUID0,
                "allocated_seconds": 1800.0,
                "busy_seconds": 1800.0,
                "idle_allocated_seconds": {"ml": 0.0},
                "unallocated_seconds": 1800.0,
            },
            {
                "gpu": 1,
                "uuid": UUID1,
                "allocated_seconds": 3600.0,
                "busy_seconds": 600.0,
                "idle_allocated_seconds": {"dev": 3000.0},
                "unallocated_seconds": 0.0,
            },
        ],
    },
}


def scrape(snapshot: AgentState, node: str = "gpu-node-17") -> str:
    registry = CollectorRegistry()
    collector = ReportCollector(node)
    registry.register(collector)
    collector.update(snapshot)
    return generate_latest(registry).decode()


def samples(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """name → {sorted labels → value}."""
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return found


def full_snapshot() -> AgentState:
    return AgentState(
        report=report(),
        check_times={"driver": T, "gpus": T, "xid": T, "storage": T},
        version=4,
        change=2,
        runs={"driver": 4, "gpus": 4, "xid": 4, "storage": 1},
        timeouts={"gpus": 1},
        links=(
            LinkResult("gpu-node-18", "tcp", 11.5e9, T),
            LinkResult("gpu-node-18", "rdma", 48.0e9, T),
        ),
    )


def g(gpu: str, uuid: str, **extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"gpu": gpu, "uuid": uuid, **extra}.items()))


def test_workload_metrics_join_holders_and_count_gpu_seconds() -> None:
    s = samples(scrape(full_snapshot()))
    holder = ("mig", "namespace", "pod", "container", "resource")
    assert s["gpuprobe_gpu_allocation_info"] == {
        g(
            "0",
            UUID0,
            **dict(zip(holder, ("MIG-1", "ml", "a", "c", "nvidia.com/mig-3g.40gb"), strict=True)),
        ): 1.0,
        g(
            "1",
            UUID1,
            **dict(zip(holder, ("", "dev", "b", "j", "nvidia.com/gpu.shared"), strict=True)),
        ): 1.0,
        g(
            "1",
            UUID1,
            **dict(zip(holder, ("", "dev", "d", "j", "nvidia.com/gpu.shared"), strict=True)),
        ): 1.0,
    }
    assert s["gpuprobe_gpu_allocated_seconds_total"] == {
        g("0", UUID0): 1800.0,
        g("1", UUID1): 3600.0,
    }
    assert s["gpuprobe_gpu_unallocated_seconds_total"] == {
        g("0", UUID0): 1800.0,
        g("1", UUID1): 0.0,
    }
    assert s["gpuprobe_gpu_idle_allocated_seconds_total"] == {
        g("0", UUID0, namespace="ml"): 0.0,
        g("1", UUID1, namespace="dev"): 3000.0,
    }


def test_report_metrics() -> None:
    s = samples(scrape(full_snapshot()))
    assert s["gpuprobe_agent_info"] == {(("node", "gpu-node-17"), ("version", __version__)): 1.0}
    assert s["gpuprobe_node_status"] == {(): 2.0}
    assert s["gpuprobe_report_timestamp_seconds"] == {(): T.timestamp()}
    assert s["gpuprobe_report_changes_total"] == {(): 2.0}
    assert s["gpuprobe_check_status"] == {
        (("check", "driver"),): 0.0,
        (("check", "gpus"),): 2.0,
        (("check", "xid"),): 0.0,
        (("check", "storage"),): 3.0,
        (("check", "mig"),): 0.0,
        (("check", "workloads"),): 0.0,
    }
    assert s["gpuprobe_check_duration_seconds"][(("check", "gpus"),)] == 0.25
    assert s["gpuprobe_check_timestamp_seconds"][(("check", "xid"),)] == T.timestamp()
    assert s["gpuprobe_check_runs_total"][(("check", "storage"),)] == 1.0
    assert s["gpuprobe_check_timeouts_total"] == {
        (("check", "driver"),): 0.0,
        (("check", "gpus"),): 1.0,
        (("check", "storage"),): 0.0,
        (("check", "xid"),): 0.0,
    }
    resource = f"gpu:0:{UUID0}"
    assert s["gpuprobe_finding"] == {
        (
            ("action", "RESET_GPU"),
            ("check", "gpus"),
            ("code", "ROW_REMAP_PENDING"),
            ("resource", resource),
            ("severity", "CRITICAL"),
        ): 1.0,
        (
            ("action", "HARDWARE_INSPECTION"),
            ("check", "gpus"),
            ("code", "PCIE_LINK_DEGRADED"),
            ("resource", resource),
            ("severity", "WARNING"),
        ): 1.0,
    }
    assert s["gpuprobe_driver_info"] == {
        (("cuda_driver_version", "12.4"), ("driver_version", "550.54.15")): 1.0
    }


def test_gpu_metrics_from_the_gpus_check_data() -> None:
    s = samples(scrape(full_snapshot()))
    assert s["gpuprobe_gpus"] == {(): 2.0}
    assert s["gpuprobe_gpu_info"] == {
        g("0", UUID0, name="NVIDIA H100 80GB HBM3", pci_bus_id="0000:18:00.0"): 1.0,
        g("1", UUID1, name="NVIDIA H100 80GB HBM3", pci_bus_id=""): 1.0,
    }
    gpu0 = g("0", UUID0)
    expected = {
        "gpuprobe_gpu_temperature_celsius": 41.0,
        "gpuprobe_gpu_temperature_slowdown_celsius": 87.0,
        "gpuprobe_gpu_power_watts": 118.5,
        "gpuprobe_gpu_power_limit_watts": 700.0,
        "gpuprobe_gpu_utilization_ratio": 0.35,
        "gpuprobe_gpu_memory_utilization_ratio": 0.12,
        "gpuprobe_gpu_memory_used_bytes": 543096832.0,
        "gpuprobe_gpu_memory_total_bytes": 85520809984.0,
        "gpuprobe_gpu_remapped_rows_pending": 1.0,
        "gpuprobe_gpu_remapped_rows_failure": 0.0,
        "gpuprobe_gpu_pcie_link_width": 8.0,
        "gpuprobe_gpu_pcie_link_width_max": 16.0,
        "gpuprobe_gpu_pcie_link_generation": 5.0,
        "gpuprobe_gpu_mig_mode": 0.0,
    }
    for name, value in expected.items():
        assert s[name] == {gpu0: value}, name  # GPU 1 lacks them all: no sample
    assert s["gpuprobe_gpu_idle"] == {gpu0: 0.0, g("1", UUID1): 1.0}
    assert s["gpuprobe_gpu_ecc_errors_total"] == {
        g("0", UUID0, error_type="uncorrected", counter="volatile"): 2.0,
        g("0", UUID0, error_type="uncorrected", counter="aggregate"): 5.0,
        g("0", UUID0, error_type="corrected", counter="volatile"): 10.0,
        g("0", UUID0, error_type="corrected", counter="aggregate"): 100.0,
    }
    assert s["gpuprobe_gpu_remapped_rows"] == {
        g("0", UUID0, cause="correctable"): 1.0,
        g("0", UUID0, cause="uncorrectable"): 2.0,
    }


def test_xid_and_storage_metrics() -> None:
    s = samples(scrape(full_snapshot()))
    assert s["gpuprobe_gpu_xid_errors_total"] == {
        g("1", UUID1, xid="79"): 3.0,
        g("0", UUID0, xid="13"): 1.0,
    }
    assert s["gpuprobe_storage_throughput_bytes_per_second"] == {
        (("op", "write"), ("path", "/scratch")): 1.9e9,
        (("op", "read"), ("path", "/scratch")): 2.4e9,
        (("op", "write"), ("path", "/data")): 5e8,
    }


def test_mig_device_metrics_from_the_mig_check_data() -> None:
    s = samples(scrape(full_snapshot()))
    assert s["gpuprobe_mig_device_info"] == {
        g(
            "0",
            UUID0,
            gpu_instance="2",
            compute_instance="0",
            profile="3g.40gb",
            mig_uuid="MIG-7b3d0000",
        ): 1.0,
        # no profile or UUID of its own: the GPU instance's profile, an empty UUID
        g("0", UUID0, gpu_instance="9", compute_instance="0", profile="1g.10gb", mig_uuid=""): 1.0,
    }


def test_before_the_first_report_only_the_agent_is_described() -> None:
    s = samples(scrape(AgentState(report=None)))
    assert list(s) == ["gpuprobe_agent_info"]


def test_a_report_without_gpus_driver_xid_storage_data_gives_no_such_samples() -> None:
    bare = NodeReport("n", T, [CheckResult("gpus", "no GPU", data={"gpus_seen_by_nvml": None})])
    s = samples(scrape(AgentState(report=bare, runs={"gpus": 1})))
    assert s["gpuprobe_gpus"] == {(): 0.0}  # NVML could not start: it sees none
    assert "gpuprobe_gpu_info" not in s
    assert not any(
        k.startswith(("gpuprobe_driver", "gpuprobe_storage", "gpuprobe_gpu_xid")) for k in s
    )
    assert "gpuprobe_finding" not in s


def test_the_store_renders_on_update_and_the_scrape_only_reads() -> None:
    store = ReportStore("gpu-node-17", ["driver", "gpus"])
    registry = CollectorRegistry()
    collector = ReportCollector("gpu-node-17")
    registry.register(collector)
    store.add_sink(collector.update)
    assert "gpuprobe_node_status" not in generate_latest(registry).decode()
    store.update([Ran(report().checks[1], T)])
    s = samples(generate_latest(registry).decode())
    assert s["gpuprobe_node_status"] == {(): 2.0}
    assert s["gpuprobe_check_runs_total"] == {(("check", "gpus"),): 1.0}


def test_peer_bandwidth_metrics_are_the_latest_measurement_per_peer_and_transport() -> None:
    s = samples(scrape(full_snapshot()))
    tcp = (("peer", "gpu-node-18"), ("transport", "tcp"))
    rdma = (("peer", "gpu-node-18"), ("transport", "rdma"))
    assert s["gpuprobe_peer_bandwidth_bytes_per_second"] == {tcp: 11.5e9, rdma: 48.0e9}
    assert s["gpuprobe_peer_bandwidth_timestamp_seconds"] == {
        tcp: T.timestamp(),
        rdma: T.timestamp(),
    }


def test_promtool_accepts_the_metrics(tmp_path: Any) -> None:
    promtool = require_tool("promtool")
    text = scrape(full_snapshot())
    out = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout + out.stderr == ""


def test_the_documented_metrics_and_queries_are_the_rendered_ones(tmp_path: Any) -> None:
    """docs/metrics.md names every metric the collector renders, and its PromQL parses."""
    from conftest import ROOT

    doc = (ROOT / "docs" / "metrics.md").read_text()
    snapshot = full_snapshot()
    assert snapshot.report is not None
    # The full snapshot feeds every renderer, so every family the exporter can emit is here.
    for render in RENDERERS:
        assert list(render(snapshot, snapshot.report)), render.__name__
    rendered = {family.name for family in text_string_to_metric_families(scrape(snapshot))}
    assert "gpuprobe_peer_bandwidth_timestamp_seconds" in rendered
    for name in rendered:
        suffix = "_total" if f"`{name}_total`" in doc else ""
        assert f"`{name}{suffix}`" in doc, name
    promtool = require_tool("promtool")
    block = doc.split("```promql\n", 1)[1].split("```", 1)[0]
    queries = [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]
    rules = tmp_path / "rules.yml"
    rules.write_text(
        "groups:\n  - name: docs\n    rules:\n"
        + "".join(
            f"      - record: docs:q{i}\n        expr: '{q}'\n" for i, q in enumerate(queries)
        )
    )
    out = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(queries)} rules found" in out.stdout
