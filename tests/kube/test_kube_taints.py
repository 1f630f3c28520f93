"""The taint decision and the brake (pure)."""

from __future__ import annotations

from kube_reports import GPU_LOST, NO_RUNTIME, T0, XID_APP, report

from gpuprobe.config import TaintConfig
from gpuprobe.effects.brake import Brake, brake
from gpuprobe.effects.taints import TAINT_KEY, decide, due

CONFIG = TaintConfig(enabled=True)
FOREIGN = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
OURS = {"key": TAINT_KEY, "value": "GPU_LOST", "effect": "NoSchedule"}


def test_the_code_due_is_the_first_configured_one_that_is_critical() -> None:
    assert due(report(("gpus", GPU_LOST), ("toolkit", NO_RUNTIME)), CONFIG.codes) == "GPU_LOST"
    assert due(report(("toolkit", NO_RUNTIME)), CONFIG.codes) == "RUNTIME_NOT_CONFIGURED"
    assert due(report(("xid", XID_APP)), CONFIG.codes) is None  # XID 13 is a WARNING
    assert due(report(("gpus", GPU_LOST)), ("XID",)) is None


def test_a_due_code_adds_the_taint_after_the_others() -> None:
    assert decide([FOREIGN], "GPU_LOST", 0, CONFIG, T0) == [FOREIGN, OURS]
    assert decide([FOREIGN, OURS], "GPU_LOST", 0, CONFIG, T0) is None  # already there


def test_a_new_code_or_effect_replaces_the_taint_in_place() -> None:
    changed = decide([OURS, FOREIGN], "RUNTIME_NOT_CONFIGURED", 0, CONFIG, T0)
    assert changed == [{**OURS, "value": "RUNTIME_NOT_CONFIGURED"}, FOREIGN]
    evict = TaintConfig(enabled=True, effect="NoExecute")
    assert decide([OURS], "GPU_LOST", 0, evict, T0) == [
        {
            "key": TAINT_KEY,
            "value": "GPU_LOST",
            "effect": "NoExecute",
            "timeAdded": "2026-12-01T21:00:00Z",
        }
    ]


def test_the_taint_goes_only_after_the_clear_delay_and_foreign_taints_stay() -> None:
    assert decide([FOREIGN, OURS], None, 299.9, CONFIG, T0) is None
    assert decide([FOREIGN, OURS], None, 300, CONFIG, T0) == [FOREIGN]
    assert decide([FOREIGN], None, 10_000, CONFIG, T0) is None  # never a taint it did not add


def node(name: str, *taints: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"taints": list(taints)}}


def test_the_brake_holds_at_the_fraction() -> None:
    fleet = [node(f"gpu-{i}") for i in range(10)]
    fleet[1] = node("gpu-1", OURS)
    assert brake(fleet, "gpu-0", 0.2) == Brake(10, 1, 0.2)
    assert not brake(fleet, "gpu-0", 0.2).engaged
    fleet[2] = node("gpu-2", OURS, FOREIGN)
    held = brake(fleet, "gpu-0", 0.2)
    assert held.engaged and held.tainted == 2
    assert held.why() == (
        "2 of 10 GPU nodes already carry gpuprobe.io/unhealthy (the brake holds new taints at "
        "20% or more)"
    )
    fleet[3] = node("gpu-3", FOREIGN)  # other taints do not count
    assert brake(fleet, "gpu-0", 0.3).tainted == 2
    # the node itself counts among the nodes even when the selector missed it
    assert brake(fleet[1:], "gpu-0", 0.2).nodes == 10
