"""Link verdicts and blame: the slow node is named, healthy links stay OK."""

from __future__ import annotations

from gpuprobe.mesh.render import render_mesh
from gpuprobe.mesh.run import MeshResult
from gpuprobe.mesh.verdict import FAILED, LOW, OK, Link, Thresholds, blame, judge

GB = 1e9


def links(values: dict[tuple[str, str], float | None]) -> list[Link]:
    return [Link(a, b, "tcp", v) for (a, b), v in values.items()]


def test_a_slow_node_is_low_with_every_partner_and_named_once() -> None:
    measured = links(
        {
            ("a", "b"): 2.9 * GB,
            ("b", "a"): 3.0 * GB,
            ("a", "c"): 2.95 * GB,
            ("c", "a"): 3.0 * GB,
            ("b", "c"): 3.05 * GB,
            ("c", "b"): 2.9 * GB,
            ("a", "d"): 1.0 * GB,
            ("d", "a"): 0.9 * GB,
            ("b", "d"): 1.1 * GB,
            ("d", "b"): 1.0 * GB,
            ("c", "d"): 0.95 * GB,
            ("d", "c"): 1.0 * GB,
        }
    )
    judged = judge(measured, Thresholds())
    assert {(link.source, link.target) for link in judged if link.verdict == LOW} == {
        ("a", "d"),
        ("d", "a"),
        ("b", "d"),
        ("d", "b"),
        ("c", "d"),
        ("d", "c"),
    }
    findings = blame(judged)
    assert [(f.code, f.severity.value, f.action.value, f.resource) for f in findings] == [
        ("LINK_BANDWIDTH_LOW", "WARNING", "CHECK_NETWORK", "peer:d")
    ]
    assert findings[0].message.startswith("d is low with 3 partners (a, b, c)")


def test_near_identical_links_do_not_flag_noise() -> None:
    measured = links(
        {("a", "b"): 3.00 * GB, ("b", "c"): 3.01 * GB, ("c", "a"): 2.99 * GB, ("a", "c"): 2.97 * GB}
    )
    assert all(link.verdict == OK for link in judge(measured, Thresholds()))


def test_one_low_link_points_at_the_path() -> None:
    measured = links(
        {
            ("a", "b"): 3.0 * GB,
            ("a", "c"): 3.0 * GB,
            ("b", "c"): 3.0 * GB,
            ("c", "d"): 3.0 * GB,
            ("a", "d"): 3.0 * GB,
            ("b", "d"): 1.0 * GB,
        }
    )
    findings = blame(judge(measured, Thresholds()))
    assert [(f.code, f.resource) for f in findings] == [("LINK_BANDWIDTH_LOW", "peer:b")]
    assert (
        "the link b → d (tcp) is low while both nodes are fine with others" in findings[0].message
    )


def test_floor_and_failures() -> None:
    measured = links({("a", "b"): 0.5 * GB, ("a", "c"): None})
    judged = judge(measured, Thresholds(floor_bytes_per_second=1 * GB))
    assert [link.verdict for link in judged] == [LOW, FAILED]
    findings = blame([*judged[:1], Link("a", "c", "tcp", None, FAILED, "connection refused")])
    assert [(f.code, f.severity.value, f.resource) for f in findings] == [
        ("LINK_BANDWIDTH_LOW", "WARNING", "peer:a"),
        ("PEER_UNREACHABLE", "CRITICAL", "peer:c"),
    ]
    assert findings[1].message == "c could not be tested: connection refused"


def test_each_rdma_rail_is_judged_among_itself_and_its_culprit_named_with_the_rail() -> None:
    # mlx5_0 runs at 400G everywhere, mlx5_1 at 200G everywhere except node d's, at 100G.
    nodes = ("a", "b", "c", "d")
    pairs = [(x, y) for x in nodes for y in nodes if x != y]
    rail0 = [Link(x, y, "rdma", 50 * GB, device="mlx5_0") for x, y in pairs]
    rail1 = [
        Link(x, y, "rdma", (12.5 if "d" in (x, y) else 25) * GB, device="mlx5_1") for x, y in pairs
    ]
    judged = judge(rail0 + rail1, Thresholds())
    low = {(link.device, link.source, link.target) for link in judged if link.verdict == LOW}
    assert low == {("mlx5_1", x, y) for x, y in pairs if "d" in (x, y)}
    findings = blame(judged)
    assert [(f.code, f.resource, f.message) for f in findings] == [
        (
            "LINK_BANDWIDTH_LOW",
            "peer:d",
            "d is low with 3 partners (a, b, c) on mlx5_1: its NIC, cable or switch port is "
            "the likely cause",
        )
    ]
    assert judged[0].to_dict() == {
        "source": "a",
        "target": "b",
        "transport": "rdma",
        "bytes_per_second": 50 * GB,
        "verdict": "OK",
        "device": "mlx5_0",
    }


def test_an_unreachable_node_is_named_once_across_rails() -> None:
    failed = [
        Link("a", "b", "rdma", None, FAILED, why, "b", False, device)
        for device, why in (("mlx5_0", "connection refused"), ("mlx5_1", "no route to host"))
    ]
    assert [(f.code, f.resource) for f in blame(judge(failed, Thresholds()))] == [
        ("PEER_UNREACHABLE", "peer:b")
    ]


def test_two_nodes_both_ways_low_cannot_be_blamed() -> None:
    """Two agents, each direction below the floor: no third node says which end (or the
    path) is slow, so the finding says the pair is low and that blame cannot be assigned."""
    measured = links({("a", "b"): 0.5 * GB, ("b", "a"): 0.6 * GB})
    findings = blame(judge(measured, Thresholds(floor_bytes_per_second=1 * GB)))
    assert [(f.code, f.severity.value, f.resource) for f in findings] == [
        ("LINK_BANDWIDTH_LOW", "WARNING", "peer:a")
    ]
    assert findings[0].message == (
        "the pair a ↔ b (tcp) is low, with too few other peers to compare: blame cannot be "
        "assigned between the two nodes and the path; add a third agent to the mesh"
    )
    assert "fine with others" not in findings[0].message


def test_a_low_pair_whose_other_links_failed_cannot_be_blamed() -> None:
    """Three nodes, but c could not be tested: a and b have no good link elsewhere."""
    measured = [
        *judge(links({("a", "b"): 0.5 * GB}), Thresholds(floor_bytes_per_second=1 * GB)),
        Link("a", "c", "tcp", None, FAILED, "connection refused", "c"),
        Link("b", "c", "tcp", None, FAILED, "connection refused", "c"),
    ]
    findings = blame(measured)
    assert [(f.code, f.resource) for f in findings] == [
        ("LINK_BANDWIDTH_LOW", "peer:a"),
        ("PEER_UNREACHABLE", "peer:c"),
    ]
    assert findings[0].message.startswith("the pair a ↔ b (tcp) is low, with too few other")


def test_a_link_low_because_its_test_ran_out_of_cpu_is_not_called_low() -> None:
    """d's links look low, but d's CPU capped each of d's tests: the links stay OK, and d is
    named for its CPU, not its NIC."""
    measured = [
        Link(a, b, "tcp", rate, cpu_limited_by="d" if "d" in (a, b) else None)
        for (a, b), rate in {
            ("a", "b"): 3.0 * GB,
            ("b", "c"): 3.0 * GB,
            ("c", "a"): 3.0 * GB,
            ("a", "d"): 1.0 * GB,
            ("d", "b"): 1.1 * GB,
        }.items()
    ]
    judged = judge(measured, Thresholds())
    assert all(link.verdict == OK for link in judged)
    assert [(link.source, link.target) for link in judged if link.cpu_capped] == [
        ("a", "d"),
        ("d", "b"),
    ]
    findings = blame(judged)
    assert [(f.code, f.severity.value, f.action.value, f.resource) for f in findings] == [
        ("BANDWIDTH_TEST_CPU_LIMITED", "UNKNOWN", "NONE", "peer:d")
    ]
    assert findings[0].message.startswith(
        "d's CPU, not the link, capped the test of a → d at 8.0 Gbit/s, d → b at 8.8 Gbit/s (tcp)"
    )
    assert judged[3].to_dict()["cpu_limited_by"] == "d"


def test_cpu_bound_tests_that_look_fine_raise_nothing() -> None:
    """Between namespaces every test is CPU-bound; only the ones that look low are named."""
    measured = [
        Link(a, b, "tcp", 3.0 * GB, cpu_limited_by=a)
        for a, b in [("a", "b"), ("b", "c"), ("c", "a")]
    ]
    judged = judge(measured, Thresholds())
    assert all(link.verdict == OK and not link.cpu_capped for link in judged)
    assert blame(judged) == []


def test_a_link_below_the_floor_with_a_cpu_bound_test_is_not_blamed_on_the_link() -> None:
    measured = [Link("a", "b", "tcp", 1.0 * GB, cpu_limited_by="a")]
    judged = judge(measured, Thresholds(floor_bytes_per_second=2 * GB))
    assert judged[0].verdict == OK and judged[0].cpu_capped
    assert [f.code for f in blame(judged)] == ["BANDWIDTH_TEST_CPU_LIMITED"]


def test_the_mesh_findings_wrap_to_the_width_given() -> None:
    measured = links({("a", "b"): 0.5 * GB, ("b", "a"): 0.6 * GB})
    judged = judge(measured, Thresholds(floor_bytes_per_second=1 * GB))
    text = render_mesh(MeshResult(judged, blame(judged)), width=60)
    assert text.splitlines()[-5:] == [
        "  WARNING LINK_BANDWIDTH_LOW on peer:a",
        "    the pair a ↔ b (tcp) is low, with too few other peers to",
        "    compare: blame cannot be assigned between the two nodes",
        "    and the path; add a third agent to the mesh",
        "    action: CHECK_NETWORK",
    ]
    assert len(render_mesh(MeshResult(judged, blame(judged))).splitlines()) == 9


def test_a_node_whose_data_nic_is_dead_is_blamed_not_its_healthy_peers() -> None:
    """x can reach no sink and no sink on x can be reached; as a sender, x sees each peer's
    sink as unreachable and names the peer. a and b measured fine with each other: only x is
    at fault."""
    why = "the test toward the peer failed"
    measured = [
        Link("a", "b", "tcp", 3.0 * GB),
        Link("b", "a", "tcp", 3.0 * GB),
        Link("a", "x", "tcp", None, FAILED, why, blamed="x"),
        Link("b", "x", "tcp", None, FAILED, why, blamed="x"),
        Link("x", "a", "tcp", None, FAILED, why, blamed="a"),
        Link("x", "b", "tcp", None, FAILED, why, blamed="b"),
    ]
    findings = blame(judge(measured, Thresholds()))
    assert [(f.code, f.severity.value, f.resource) for f in findings] == [
        ("PEER_UNREACHABLE", "CRITICAL", "peer:x")
    ]


def test_a_peer_failing_with_one_partner_only_keeps_the_senders_word() -> None:
    """One failed test is no pattern: the side the sender named stays blamed."""
    why = "the test toward the peer failed"
    measured = [
        Link("a", "b", "tcp", 3.0 * GB),
        Link("b", "c", "tcp", 3.0 * GB),
        Link("c", "a", "tcp", None, FAILED, why, blamed="a"),
    ]
    findings = blame(judge(measured, Thresholds()))
    assert [(f.code, f.resource) for f in findings] == [("PEER_UNREACHABLE", "peer:a")]
