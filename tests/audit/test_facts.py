"""The facts an audit reads from one node's report: each skew field and the counts, on the
committed snapshots, through the gRPC conversion with only the data keys the audit asks
for, and on garbage data."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, SNAPSHOTS
from gpuprobe import wire
from gpuprobe.audit.facts import SKEW_FIELDS, Counts, counts, skew_values
from gpuprobe.audit.keys import data_keys
from gpuprobe.config import Config
from gpuprobe.report import Action, CheckResult, Finding, NodeReport, Severity, now
from helpers import config, node_report

TIME_SLICING = config(
    device_plugin={"config_file": str(ROOT / "tests/fixtures/device_plugin/time-slicing.yaml")}
)
H100 = "NVIDIA H100 80GB HBM3"


def report(name: str, cfg: Config | None = None) -> NodeReport:
    return node_report(name, cfg=cfg)


def facts(
    driver: str | None = "550.54.15",
    cuda: str | None = "12.4",
    model: str | None = H100,
    count: str | None = "8",
    mig: str | None = "disabled",
    toolkit: str | None = "not installed",
    runtime: str | None = None,
) -> dict[str, str | None]:
    return {
        "driver_version": driver,
        "cuda_driver_version": cuda,
        "amdgpu_version": None,
        "rocm_version": None,
        "gpu_model": model,
        "gpu_count": count,
        "mig_layout": mig,
        "toolkit_mode": toolkit,
        "runtime_default": runtime,
    }


CASES: list[tuple[str, Config | None, dict[str, str | None], Counts]] = [
    ("synthetic-h100-8gpu-healthy", None, facts(), Counts(8, 8, 0, 0, 0)),
    ("synthetic-driver-too-old", None, facts("535.104.05", "12.2"), Counts(8, 8, 0, 0, 0)),
    ("synthetic-remap-pending", None, facts(), Counts(8, 7, 0, 0, 0)),
    # The lost GPU is counted among the GPUs, not among the healthy or the skew's count.
    ("synthetic-gpu-lost", None, facts(count="7"), Counts(8, 7, 0, 0, 0)),
    # NVML lists 7 of the 8 GPUs on the bus: the missing one counts, and not as healthy.
    ("synthetic-gpu-fallen-off-bus", None, facts(count="7"), Counts(8, 6, 0, 0, 0)),
    ("synthetic-gpus-idle", None, facts(), Counts(8, 8, 2, 0, 0)),
    # An application XID leaves the GPU healthy (RESTART_APP); a hardware XID does not.
    ("synthetic-xid-app", None, facts(), Counts(8, 8, 0, 0, 0)),
    ("synthetic-xid-critical", None, facts(), Counts(8, 6, 0, 0, 0)),
    (
        "synthetic-mig-mixed",
        None,
        facts(mig="0:1g.10gb×2+2g.20gb+3g.40gb 1:7g.80gb 2:3g.40gb+4g.40gb 3:1c.3g.40gb×3"),
        Counts(8, 8, 0, 10, 0),
    ),
    (
        "synthetic-mig-two-profiles",
        None,
        facts(mig=" ".join(f"{i}:1g.10gb×7" for i in range(7)) + " 7:3g.40gb×2"),
        Counts(8, 8, 0, 51, 0),
    ),
    ("synthetic-mig-no-instances", None, facts(mig="5:none"), Counts(8, 7, 0, 0, 0)),
    (
        "synthetic-h100-k8s-containerd-healthy",
        TIME_SLICING,
        facts(toolkit="auto", runtime="containerd:nvidia"),
        Counts(8, 8, 0, 0, 32),
    ),
    (
        "synthetic-time-slicing-exclusive-gpu",
        TIME_SLICING,
        facts(toolkit="auto", runtime="containerd:nvidia"),
        Counts(8, 6, 0, 0, 32),
    ),
    (
        "synthetic-cdi-spec-invalid",
        None,
        facts(toolkit="cdi", runtime="containerd:nvidia"),
        Counts(8, 8, 0, 0, 0),
    ),
    (
        "synthetic-k3s-no-nvidia-runtime",
        None,
        facts(toolkit="auto", runtime="k3s:runc"),
        Counts(8, 8, 0, 0, 0),
    ),
    # Docker's own containerd runs no GPU containers: only Docker's default counts.
    (
        "synthetic-docker-nvidia-runtime",
        None,
        facts(toolkit="auto", runtime="docker:runc"),
        Counts(8, 8, 0, 0, 0),
    ),
    (
        "synthetic-crio-nvidia-drop-in",
        None,
        facts(toolkit="auto", runtime="crio:nvidia"),
        Counts(8, 8, 0, 0, 0),
    ),
    # NVML down: versions, models, counts and layout unknown; the toolkit still a fact.
    (
        "synthetic-driver-not-loaded",
        None,
        facts(None, None, None, None, None),
        Counts(8, 0, 0, 0, 0),  # 8 GPUs on the bus, none usable
    ),
    # No GPU at all: a count of 0, nothing else applies.
    ("kvm-epyc-nogpu", None, facts(None, None, None, "0", None, None), Counts(0, 0, 0, 0, 0)),
]


@pytest.mark.parametrize(
    ("name", "cfg", "expected", "expected_counts"), CASES, ids=[c[0] for c in CASES]
)
def test_facts_of_a_snapshot(
    name: str, cfg: Config | None, expected: dict[str, str | None], expected_counts: Counts
) -> None:
    node = report(name, cfg)
    assert skew_values(node) == expected
    assert counts(node) == expected_counts


@pytest.mark.parametrize(
    "name",
    sorted(
        p.name
        for p in SNAPSHOTS.iterdir()
        # synthetic-nvml-hang: its NVML hangs by design, its report is CHECK_TIMEOUTs
        if (p / "snapshot.json").exists() and p.name != "synthetic-nvml-hang"
    ),
)
def test_the_audits_data_keys_hold_everything_the_facts_read(name: str) -> None:
    cfg = TIME_SLICING if "k8s" in name or "time-slicing" in name else None
    whole = report(name, cfg)
    through = wire.report_from_proto(wire.report_to_proto(whole), data_keys())
    assert skew_values(through) == skew_values(whole)
    assert counts(through) == counts(whole)
    assert through.findings() == whole.findings()


def test_an_unreadable_toolkit_config_leaves_the_mode_unknown() -> None:
    broken = NodeReport(
        "n",
        now(),
        [
            CheckResult(
                "toolkit",
                "",
                data={"gpus": 8, "toolkit_installed": True, "toolkit_config": None},
            )
        ],
    )
    assert skew_values(broken)["toolkit_mode"] == "auto"  # installed, no config file: default
    broken.checks[0].findings.append(
        Finding(
            "CONFIG_INVALID",
            Severity.CRITICAL,
            "bad",
            Action.FIX_CONFIG,
            "file:/etc/nvidia-container-runtime/config.toml",
        )
    )
    assert skew_values(broken)["toolkit_mode"] is None


def test_an_image_admitted_without_forward_compatibility_counts_as_too_new() -> None:
    from gpuprobe.audit.facts import images_too_new

    needs = images_too_new(report("synthetic-pods-cuda12.4-geforce-535"))
    assert {key: (n.containers, n.nodes, n.namespaces) for key, n in needs.items()} == {
        ("registry.example.com/art/sd-webui:1.9-cu124", "12.4"): (1, 1, frozenset({"art"}))
    }


def test_a_node_that_mixes_gpu_models() -> None:
    node = NodeReport(
        "n",
        now(),
        [
            CheckResult(
                "gpus",
                "",
                data={
                    "gpus_seen_by_nvml": 3,
                    "gpus": [
                        {"index": 0, "name": "NVIDIA H100 80GB HBM3"},
                        {"index": 1, "name": "NVIDIA A100-SXM4-80GB"},
                        {"index": 2, "name": "NVIDIA H100 80GB HBM3"},
                    ],
                },
            )
        ],
    )
    assert skew_values(node)["gpu_model"] == "NVIDIA A100-SXM4-80GB + NVIDIA H100 80GB HBM3"
    assert skew_values(node)["gpu_count"] == "3"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "gpus",
                    "index",
                    "name",
                    "lost",
                    "idle",
                    "mig_mode_current",
                    "gpu_instances",
                    "compute_instances",
                    "profile",
                    "toolkit_installed",
                    "toolkit_config",
                    "mode",
                    "engines",
                    "in_use",
                    "runs_gpu_containers",
                    "flavor",
                    "default_runtime",
                    "strategy",
                    "resources",
                    "schedulable_units",
                    "driver_version",
                    "cuda_driver_version",
                    "gpus_seen_by_nvml",
                    "gpus_on_pci_bus",
                ]
            ),
            inner,
            max_size=6,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(list(data_keys())), json_values, max_size=5))
def test_garbage_data_never_breaks_the_facts(data: dict[str, Any]) -> None:
    node = NodeReport(
        "n",
        now(),
        [
            CheckResult(name, "", data=value if isinstance(value, dict) else {"gpus": value})
            for name, value in data.items()
        ],
    )
    values = skew_values(node)
    assert set(values) == set(SKEW_FIELDS)
    assert all(v is None or isinstance(v, str) for v in values.values())
    counted = counts(node).to_dict()
    assert all(isinstance(v, int) and v >= 0 for v in counted.values())


def test_an_amd_nodes_facts() -> None:
    node = report("synthetic-amd-mi300x-8gpu-healthy", None)
    values = skew_values(node)
    assert {
        k: values[k] for k in ("driver_version", "amdgpu_version", "gpu_model", "gpu_count")
    } == {
        "driver_version": "6.10.5",
        "amdgpu_version": "6.10.5",
        "gpu_model": "AMD Instinct MI300X",
        "gpu_count": "8",
    }
    assert values["cuda_driver_version"] is None and values["rocm_version"] is None
    gone = skew_values(report("synthetic-amd-gpu-not-initialized", None))
    assert gone["gpu_count"] == "7"
