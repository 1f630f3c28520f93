"""The cluster report for people: nodes worst first with their findings, then skew, totals."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprobe.audit.cluster import build
from gpuprobe.audit.render import render_cluster
from gpuprobe.client import Fetched
from gpuprobe.targets import DnsFailure, TargetSpec
from gpuprobe.unreachable import Failure, Unreachable
from helpers import node_report


def test_the_cluster_as_text() -> None:
    cluster = build(
        [
            Fetched("10.0.0.1:50051", node_report("synthetic-h100-8gpu-healthy", "gpu-1")),
            Fetched("10.0.0.2:50051", node_report("synthetic-driver-too-old", "gpu-2")),
            Fetched("10.0.0.3:50051", node_report("synthetic-gpu-lost", "gpu-3")),
            Fetched(
                "10.0.0.4:50051",
                None,
                unreachable=Unreachable(Failure.REFUSED, "connection refused"),
            ),
        ],
        [DnsFailure(TargetSpec("gone.test", 50051, True), "gone.test has no address")],
    )
    assert render_cluster(cluster) == (
        "cluster CRITICAL  5 targets: 3 reachable, 2 unreachable, 2 healthy\n"
        "\n"
        "first\n"
        "CRITICAL  REBOOT_NODE for GPU_LOST (gpus) on gpu-3 (GPU 5)\n"
        "UNKNOWN   reach 2 unreachable targets: 10.0.0.4:50051 (refused), "
        "dns:gone.test:50051 (dns)\n"
        "\n"
        "STATUS    NODE   TARGET               FINDINGS\n"
        "CRITICAL  gpu-3  10.0.0.3:50051       1 finding\n"
        "          CRITICAL GPU_LOST on gpu:5:GPU-5f1c0005-8e2b-4c1d-9a7e-000000000005 (gpus), "
        "action REBOOT_NODE\n"
        "            GPU 5 is lost: NVML reports GpuIsLost (fallen off the bus or hung). Reboot "
        "the node; inspect the GPU if it happens again\n"
        "UNKNOWN   -      10.0.0.4:50051       unreachable (refused): connection refused\n"
        "UNKNOWN   -      dns:gone.test:50051  unreachable (dns): gone.test has no address\n"
        "OK        gpu-1  10.0.0.1:50051       -\n"
        "OK        gpu-2  10.0.0.2:50051       -\n"
        "\n"
        "skew (majority value, and the nodes that differ)\n"
        "  driver_version       550.54.15 on 2 of 3  OUTLIERS 535.104.05: gpu-2\n"
        "  cuda_driver_version  12.4 on 2 of 3  OUTLIERS 12.2: gpu-2\n"
        "  gpu_model            NVIDIA H100 80GB HBM3 on 3 of 3\n"
        "  gpu_count            8 on 2 of 3  OUTLIERS 7: gpu-3\n"
        "  mig_layout           disabled on 3 of 3\n"
        "  toolkit_mode         not installed on 3 of 3\n"
        "\n"
        "totals  5 nodes (3 reachable, 2 healthy), 24 GPUs (23 healthy, 0 idle), "
        "0 MIG slices, 0 time-slicing units\n"
    )


def test_colour_marks_the_statuses() -> None:
    cluster = build(
        [Fetched("10.0.0.1:50051", node_report("synthetic-h100-8gpu-healthy", "gpu-1"))]
    )
    text = render_cluster(cluster, colour=True)
    assert text.startswith("cluster \033[32mOK\033[0m  1 target: 1 reachable")
    assert "\033[32mOK      \033[0m  gpu-1" in text


def test_one_of_each_is_counted_in_the_singular() -> None:
    cluster = build(
        [Fetched("10.0.0.3:50051", node_report("synthetic-mig-single", "gpu-3"))],
    )
    lines = render_cluster(cluster).splitlines()
    assert lines[0] == "cluster OK  1 target: 1 reachable, 0 unreachable, 1 healthy"
    assert lines[-1].startswith("totals  1 node (1 reachable, 1 healthy), ")


def test_findings_wrap_to_the_width_given_with_a_hanging_indent() -> None:
    cluster = build([Fetched("10.0.0.3:50051", node_report("synthetic-xid-critical", "gpu-3"))])
    whole = render_cluster(cluster)
    wrapped = render_cluster(cluster, width=80)
    assert max(len(line) for line in whole.splitlines()) > 300
    assert max(len(line) for line in wrapped.splitlines()) <= 80
    assert wrapped.split() == whole.split()  # the same words, only the line breaks differ
    lines = wrapped.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(" " * 12 + "GPU 2 (0000"))
    assert lines[start + 1].startswith(" " * 12) and lines[start + 1][12] != " "


def test_the_first_things_to_do_name_a_cause_once_for_every_node_it_is_on() -> None:
    cluster = build(
        [
            Fetched("10.0.0.1:50051", node_report("synthetic-fabric-not-started", "gpu-1")),
            Fetched("10.0.0.2:50051", node_report("synthetic-fabric-not-started", "gpu-2")),
            Fetched("10.0.0.3:50051", node_report("synthetic-hw-slowdown", "gpu-3")),
            Fetched("10.0.0.4:50051", node_report("synthetic-h100-8gpu-healthy", "gpu-4")),
        ]
    )
    lines = render_cluster(cluster, width=80).splitlines()
    assert lines[:6] == [
        "cluster CRITICAL  4 targets: 4 reachable, 0 unreachable, 1 healthy",
        "",
        "first",
        "CRITICAL  FIX_CONFIG for FABRIC_NOT_READY (gpus) on 2 nodes: gpu-1 (GPUs 0-7),",
        "          gpu-2 (GPUs 0-7)",
        "WARNING   HARDWARE_INSPECTION for HW_SLOWDOWN (gpus) on gpu-3 (GPU 0)",
    ]
    # Each node's eight FABRIC_NOT_READY findings are one cause under its row.
    assert lines[8] == "CRITICAL  gpu-1  10.0.0.1:50051  8 findings (1 cause)"
    assert sum(1 for line in lines if "CRITICAL FABRIC_NOT_READY on GPUs 0-7 (gpus)" in line) == 2


def test_unreachable_rows_wrap_between_words_under_their_column() -> None:
    reason = "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.4:50051: "
    cluster = build(
        [
            Fetched("10.0.0.1:50051", node_report("synthetic-h100-8gpu-healthy", "gpu-1")),
            Fetched(
                "10.0.0.4:50051",
                None,
                unreachable=Unreachable(Failure.REFUSED, reason + "Connection refused"),
            ),
        ]
    )
    lines = render_cluster(cluster, width=80).splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("UNKNOWN   -  "))
    assert lines[row : row + 4] == [
        "UNKNOWN   -      10.0.0.4:50051  unreachable (refused): failed to connect to all",
        "                                 addresses; last error: UNKNOWN:",
        "                                 ipv4:10.0.0.4:50051: Connection refused",
        "OK        gpu-1  10.0.0.1:50051  -",
    ]


@settings(max_examples=40, deadline=None)
@given(width=st.integers(min_value=40, max_value=200))
def test_every_line_of_the_cluster_report_fits_the_width(width: int) -> None:
    whole = render_cluster(CLUSTER)
    wrapped = render_cluster(CLUSTER, width=width)
    assert max(len(line) for line in wrapped.splitlines()) <= width
    assert "".join(wrapped.split()) == "".join(whole.split())


CLUSTER = build(
    [
        Fetched("10.0.0.1:50051", node_report("synthetic-pods-log-signatures", "gpu-1")),
        Fetched("10.0.0.2:50051", node_report("synthetic-fabric-not-started", "gpu-node-" * 6)),
        Fetched(
            "10.0.0.4:50051",
            None,
            unreachable=Unreachable(Failure.REFUSED, "connection refused"),
        ),
    ],
    [DnsFailure(TargetSpec("gone.test", 50051, True), "gone.test has no address")],
)
