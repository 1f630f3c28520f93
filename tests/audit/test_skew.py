"""Skew: the majority value of a field and the nodes that differ, with a fixed tie-break."""

from __future__ import annotations

from gpuprobe.audit.skew import Skew, find_all_skew, find_skew


def test_majority_and_outliers_with_their_nodes() -> None:
    skew = find_skew(
        "driver_version",
        [
            ("gpu-node-1", "550.54.15"),
            ("gpu-node-3", "550.90.07"),
            ("gpu-node-2", "550.54.15"),
            ("gpu-node-9", None),  # cannot tell: left out
            ("gpu-node-5", "535.104.05"),
            ("gpu-node-4", "550.90.07"),
            ("gpu-node-6", "550.54.15"),
        ],
    )
    assert skew == Skew(
        "driver_version",
        "550.54.15",
        6,
        # the most common outlier first, then by value; nodes sorted
        {"550.90.07": ["gpu-node-3", "gpu-node-4"], "535.104.05": ["gpu-node-5"]},
    )
    assert skew is not None
    assert skew.to_dict() == {
        "field": "driver_version",
        "majority": "550.54.15",
        "nodes": 6,
        "outliers": {"550.90.07": ["gpu-node-3", "gpu-node-4"], "535.104.05": ["gpu-node-5"]},
    }


def test_a_uniform_field_has_no_outliers() -> None:
    assert find_skew("gpu_count", [("a", "8"), ("b", "8")]) == Skew("gpu_count", "8", 2, {})


def test_a_tie_goes_to_the_value_of_the_earliest_node() -> None:
    assert find_skew("gpu_model", [("b", "A100"), ("a", "H100"), ("c", "H100"), ("d", "A100")]) == (
        Skew("gpu_model", "A100", 4, {"H100": ["a", "c"]})
    )
    assert find_skew("gpu_model", [("a", "H100"), ("b", "A100")]) == Skew(
        "gpu_model", "H100", 2, {"A100": ["b"]}
    )


def test_a_field_no_node_can_tell_is_left_out() -> None:
    assert find_skew("runtime_default", [("a", None), ("b", None)]) is None
    assert find_skew("runtime_default", []) is None
    skews = find_all_skew(
        ["driver_version", "runtime_default", "gpu_count"],
        [
            ("a", {"driver_version": "550.54.15", "runtime_default": None, "gpu_count": "8"}),
            ("b", {"driver_version": "550.54.15", "gpu_count": "7"}),
        ],
    )
    assert skews == [
        Skew("driver_version", "550.54.15", 2, {}),
        Skew("gpu_count", "8", 2, {"7": ["b"]}),
    ]
