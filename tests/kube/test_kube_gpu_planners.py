"""The pure planners of device taints and evictions (effects.dra, effects.evictions): names
that stay within the API's bounds, the version from discovery, the retry pace, the Node's
eviction record and the breaker's count."""

from __future__ import annotations

from datetime import timedelta

from kube_reports import T0

from gpuprobe.effects import dra, evictions

LONG_NODE = "ip-10-0-0-1." + "x" * 200 + ".compute.internal"


def test_rule_names_and_node_labels_stay_within_the_apis_bounds() -> None:
    assert dra.rule_name("gpu-node-17", "gpu-7", "ROW_REMAP_FAILURE") == (
        "gpuprobe-gpu-node-17-gpu-7-row-remap-failure"
    )
    long = dra.rule_name(LONG_NODE, "gpu-7-mig-19-0-1", "ECC_UNCORRECTABLE")
    assert len(long) <= 253 and long.startswith("gpuprobe-ip-10-0-0-1.")
    assert long != dra.rule_name(LONG_NODE, "gpu-6-mig-19-0-1", "ECC_UNCORRECTABLE")
    assert dra.node_label("gpu-node-17") == "gpu-node-17"
    label = dra.node_label(LONG_NODE)
    assert len(label) <= 63 and label.startswith("h-")


def test_the_version_is_v1_else_v1beta2_else_none() -> None:
    both = {"v1": ["resourceslices", "devicetaintrules"], "v1beta2": ["devicetaintrules"]}
    assert dra.rule_version(both) == "v1"
    assert dra.rule_version({"v1": ["resourceslices"], "v1beta2": ["devicetaintrules"]}) == (
        "v1beta2"
    )
    assert dra.rule_version({"v1": ["resourceslices"], "v1alpha3": ["devicetaintrules"]}) is None
    assert dra.rule_version({}) is None


def test_refused_evictions_are_retried_at_a_doubling_pace_capped_at_a_minute() -> None:
    assert [evictions.retry_after(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]


def test_the_nodes_eviction_record_keeps_the_window_and_the_breaker_counts_it() -> None:
    old, recent = T0 - timedelta(hours=2), T0 - timedelta(minutes=5)
    node = {
        "metadata": {
            "annotations": {
                evictions.EVICTIONS_ANNOTATION: f"{old:%Y-%m-%dT%H:%M:%SZ} garbage "
                f"{recent:%Y-%m-%dT%H:%M:%SZ}"
            }
        }
    }
    assert evictions.fleet_evictions([node, node], T0, 3600) == 2
    patch = evictions.record(node, T0, 3600, 10)
    assert patch == {
        "metadata": {
            "annotations": {
                evictions.EVICTIONS_ANNOTATION: "2026-12-01T20:55:00Z 2026-12-01T21:00:00Z"
            }
        }
    }
    assert evictions.FleetBreaker(10, 10, 3600).engaged
    assert not evictions.FleetBreaker(9, 10, 3600).engaged
