"""The summary view of GetReport: what a fleet audit reads, without per-GPU telemetry, and
the audit's figures from it the same as from the whole report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuprobe import report_view, wire
from gpuprobe.audit.cluster import audited
from gpuprobe.audit.facts import counts, skew_values
from gpuprobe.audit.keys import data_keys
from gpuprobe.checks.registry import summary_keys
from gpuprobe.client import Client, Credentials, Fetched, fetch_report
from gpuprobe.report_view import pick
from gpuprobe.targets import parse_targets
from gpuprobe.v1 import diagnostics_pb2 as pb
from helpers import node_report
from serving import in_process_agent

# What NVML reads per GPU every round: the telemetry a fleet audit never needs.
TELEMETRY = {
    "temperature_celsius",
    "power_watts",
    "utilization_gpu_percent",
    "utilization_memory_percent",
    "memory_used_bytes",
    "clock_event_reasons",
    "ecc_corrected_volatile",
    "nvlinks",
}


def keys_of(value: object) -> set[str]:
    """Every mapping key anywhere inside `value`."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys_of(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys_of(v)}
    return set()


def allowed(keys: object) -> set[str]:
    """Every key a DataKeys tree names."""
    if not isinstance(keys, dict):
        return set()
    return set(keys) | {k for v in keys.values() for k in allowed(v)}


@pytest.fixture(scope="module")
def views() -> tuple[pb.NodeReport, pb.NodeReport]:
    with (
        in_process_agent("synthetic-h100-8gpu-healthy") as agent,
        Client(f"127.0.0.1:{agent.grpc_port}") as client,
    ):
        whole = client.get_report_message(10)
        summary = client.get_report_message(10, pb.REPORT_VIEW_SUMMARY)
    return whole, summary


def test_the_summary_view_carries_no_per_gpu_telemetry(
    views: tuple[pb.NodeReport, pb.NodeReport],
) -> None:
    whole, summary = views
    full_data = wire.report_from_proto(whole).check("gpus")
    assert full_data is not None
    full_gpu_keys = keys_of(full_data.data["gpus"])
    assert TELEMETRY & full_gpu_keys, "the whole report should carry the GPUs' telemetry"
    for check in summary.checks:
        # both copies of the facts: the Struct (older audits read it) and the JSON text
        for data in (wire.struct_to_data(check.data), json.loads(check.data_json)):
            assert keys_of(data) <= allowed(summary_keys().get(check.name, {})), check.name
    gpus = wire.report_from_proto(summary).check("gpus")
    assert gpus is not None
    # `lost` is in a GPU's data only when it is lost
    assert [set(g) for g in gpus.data["gpus"]] == [{"index", "vendor", "name", "idle"}] * 8
    assert summary.ByteSize() * 4 < whole.ByteSize()


def test_the_summary_view_sends_each_checks_facts_as_a_struct_and_as_the_same_json(
    views: tuple[pb.NodeReport, pb.NodeReport],
) -> None:
    whole, summary = views
    with_facts = 0
    for check in summary.checks:
        assert check.data_json, check.name  # set for every check, "{}" for one without facts
        assert json.loads(check.data_json) == wire.struct_to_data(check.data), check.name
        with_facts += check.data_json != "{}"
    assert with_facts == 7  # driver, gpus, mig, toolkit, sharing, workloads, pods
    gpus = json.loads(next(c.data_json for c in summary.checks if c.name == "gpus"))
    assert gpus["gpus_on_pci_bus"] == 8 and isinstance(gpus["gpus_on_pci_bus"], int)
    assert [c.data_json for c in whole.checks] == [""] * len(whole.checks)


def test_the_summary_view_keeps_every_check_status_summary_and_finding(
    views: tuple[pb.NodeReport, pb.NodeReport],
) -> None:
    whole, summary = views
    assert summary.node == whole.node and summary.status == whole.status
    assert [(c.name, c.status, c.summary, list(c.findings)) for c in summary.checks] == [
        (c.name, c.status, c.summary, list(c.findings)) for c in whole.checks
    ]
    assert [c.time for c in summary.checks] == [c.time for c in whole.checks]


def test_the_audit_reads_the_same_figures_from_either_view(
    views: tuple[pb.NodeReport, pb.NodeReport],
) -> None:
    whole, summary = views
    from_whole = wire.report_from_proto(whole, data_keys())
    from_summary = wire.report_from_proto(summary, data_keys())
    assert skew_values(from_summary) == skew_values(from_whole)
    assert counts(from_summary) == counts(from_whole)
    assert audited(Fetched("t", from_summary)) == audited(Fetched("t", from_whole))
    # an agent of the version before data_json sends the Struct alone
    struct_only = pb.NodeReport.FromString(summary.SerializeToString())
    for check in struct_only.checks:
        check.ClearField("data_json")
    from_struct = wire.report_from_proto(struct_only, data_keys())
    assert audited(Fetched("t", from_struct)) == audited(Fetched("t", from_summary))


@pytest.mark.parametrize(
    "name",
    [
        "synthetic-h100-8gpu-healthy",
        "synthetic-gpu-lost",
        "synthetic-mig-mixed",
        "synthetic-k8s-mig-single",
        "synthetic-k8s-time-slicing",
        "synthetic-k8s-gpu-used-without-allocation",
        "synthetic-pods-cuda12.8-geforce-550",
        "synthetic-pods-log-signatures",
        "synthetic-containerd-no-nvidia-runtime",
    ],
)
def test_the_audit_digests_the_summary_view_as_it_digests_the_whole_report(name: str) -> None:
    """Against the whole report, not one filtered by the same keys: a fact the audit reads
    that the summary view drops changes the digest and fails this."""
    report = node_report(name)
    whole = audited(Fetched("t", report))
    assert audited(Fetched("t", report_view.summary(report, summary_keys()))) == whole
    through_the_wire = wire.report_from_proto(
        wire.report_to_proto(report_view.summary(report, summary_keys()))
    )
    assert audited(Fetched("t", through_the_wire)) == whole
    as_the_agent_sends_it = wire.report_from_proto(
        wire.summary_to_proto(report, keep=summary_keys()), data_keys()
    )
    assert audited(Fetched("t", as_the_agent_sends_it)) == whole


def test_an_agent_without_views_answers_the_whole_report_and_the_audit_reads_it(
    views: tuple[pb.NodeReport, pb.NodeReport],
) -> None:
    """An agent of the version before views ignores the field it does not know and sends
    the whole report; the audit picks the same facts out of it."""
    whole, _ = views
    picked = wire.report_from_proto(whole, data_keys())
    for check in picked.checks:
        keys = data_keys().get(check.name)
        full = wire.report_from_proto(whole).check(check.name)
        assert full is not None
        assert check.data == (pick(full.data, keys) if keys else {})


def test_fetch_report_asks_for_the_view_it_is_given() -> None:
    with in_process_agent("synthetic-h100-8gpu-healthy") as agent:
        target = f"127.0.0.1:{agent.grpc_port}"
        whole = fetch_report(target, Credentials(), 10)
        summary = fetch_report(target, Credentials(), 10, view=pb.REPORT_VIEW_SUMMARY)
    assert whole.report is not None and summary.report is not None
    gpus_whole, gpus_summary = whole.report.check("gpus"), summary.report.check("gpus")
    assert gpus_whole is not None and gpus_summary is not None
    assert TELEMETRY & keys_of(gpus_whole.data)
    assert not TELEMETRY & keys_of(gpus_summary.data)


def test_targets_can_be_read_from_a_file(tmp_path: Path) -> None:
    listing = tmp_path / "targets"
    listing.write_text("# the fleet\n10.0.0.7:50051, 10.0.0.8:50051\n\n[::1]:9 # local\n")
    specs = parse_targets(f"@{listing},dns:gpuprobe.gpuprobe.svc:50051")
    with_bom = tmp_path / "exported"
    with_bom.write_bytes("\ufeff10.0.0.9:50051\r\n".encode())
    assert [str(s) for s in parse_targets(f"@{with_bom}")] == ["10.0.0.9:50051"]
    assert [str(s) for s in specs] == [
        "10.0.0.7:50051",
        "10.0.0.8:50051",
        "[::1]:9",
        "dns:gpuprobe.gpuprobe.svc:50051",
    ]
