"""Mesh schedules: the circle method covers every pair once; quick mode samples."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

from conftest import ROOT
from gpuprobe.mesh.schedule import circle_rounds, plan, random_matchings, retest_round


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 16, 33])
def test_circle_method_meets_every_pair_once_and_nobody_twice_a_round(n: int) -> None:
    nodes = [f"n{i}" for i in range(n)]
    rounds = circle_rounds(nodes)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    for pairs in rounds:
        members = [node for pair in pairs for node in pair]
        assert len(members) == len(set(members))
    met = sorted(tuple(sorted(p)) for pairs in rounds for p in pairs)
    assert met == sorted(tuple(sorted(p)) for p in itertools.combinations(nodes, 2))


def test_fewer_than_two_nodes_have_no_rounds() -> None:
    assert circle_rounds([]) == [] and circle_rounds(["a"]) == []


def test_random_matchings_are_perfect_and_repeatable() -> None:
    nodes = [f"n{i}" for i in range(7)]
    rounds = random_matchings(nodes, 3, seed=4)
    assert rounds == random_matchings(nodes, 3, seed=4)
    for pairs in rounds:
        members = [node for pair in pairs for node in pair]
        assert len(pairs) == 3 and len(set(members)) == 6


def test_retest_pairs_suspects_with_good_nodes() -> None:
    assert retest_round(["s1", "s2", "s3"], ["g1", "g2"]) == [("s1", "g1"), ("s2", "g2")]


def test_plan_counts_rounds_and_wall_time() -> None:
    full = plan("full", 8, 10)
    # Each round: two directions of 1 s warm-up + 10 s measured, and 2 s of set-up.
    assert (full.rounds, full.tests, full.wall_seconds) == (7, 56, 7 * 24)
    bare = plan("full", 8, 10, warmup_seconds=0)
    assert bare.wall_seconds == 7 * 22
    # RDMA tests have no warm-up, whatever --warmup says, and run whole seconds (at least 1).
    assert plan("full", 8, 10, warmup_seconds=5, transport="rdma").wall_seconds == 7 * 22
    assert plan("full", 8, 0.3, transport="rdma").wall_seconds == 7 * (2 * 1 + 2)
    assert plan("full", 8, 0.3).wall_seconds == pytest.approx(7 * (2 * 1.3 + 2))
    with pytest.raises(ValueError):
        plan("full", 8, 10, transport="carrier-pigeon")
    quick = plan("quick", 1024, 10, k=3)
    assert (quick.rounds, quick.tests) == (4, 2 * (3 * 512 + 1))
    with pytest.raises(ValueError):
        plan("slow", 8, 10)


def bench_table(*args: str) -> str:
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "mesh_schedule.py"), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


def test_the_documented_schedule_table_is_the_bench_output() -> None:
    table = bench_table()
    assert table.splitlines()[2] == "| 8 | 7 | 56 | 2.8 min | 4 | 26 | 96 s |"
    for doc in ("benchmarks.md", "mesh.md"):
        assert table in (ROOT / "docs" / doc).read_text(), doc
    rdma = bench_table("--transport", "rdma")
    assert rdma.splitlines()[2] == "| 8 | 7 | 56 | 2.6 min | 4 | 26 | 88 s |"
    assert rdma in (ROOT / "docs" / "benchmarks.md").read_text()
