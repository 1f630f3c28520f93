"""Pairing rounds for the mesh: every pair by the circle method, or a quick sample.

Full mode: the circle method (round-robin tournament) pairs N nodes in N−1 rounds (N for
odd N, one node sitting out each round) so that every pair meets exactly once and no node
is in two tests at once; the pairs of a round run in parallel. Quick mode: k random perfect
matchings, then one more round in which each suspect node is tested against a node already
known good.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from gpuprobe.measure import perftest

Pair = tuple[str, str]


def circle_rounds(nodes: Sequence[str]) -> list[list[Pair]]:
    """Rounds in which every pair of `nodes` meets once and each node at most once a round."""
    ring: list[str | None] = list(nodes)
    if len(ring) < 2:
        return []
    if len(ring) % 2:
        ring.append(None)  # the node drawn against None sits the round out
    n = len(ring)
    rounds = []
    for _ in range(n - 1):
        pairs = []
        for i in range(n // 2):
            a, b = ring[i], ring[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b))
        rounds.append(pairs)
        ring = [ring[0], ring[-1], *ring[1:-1]]  # keep the first fixed, rotate the rest
    return rounds


def random_matchings(nodes: Sequence[str], k: int, seed: int | None = None) -> list[list[Pair]]:
    """`k` random perfect matchings (one node sits out each when N is odd)."""
    rng = random.Random(seed)
    rounds = []
    for _ in range(k):
        order = list(nodes)
        rng.shuffle(order)
        rounds.append([(order[i], order[i + 1]) for i in range(0, len(order) - 1, 2)])
    return rounds


def retest_round(suspects: Sequence[str], good: Sequence[str]) -> list[Pair]:
    """Pair each suspect with a distinct known-good node, as far as good nodes last."""
    return list(zip(suspects, good, strict=False))


@dataclass(frozen=True)
class Plan:
    """How long a mesh takes: rounds and wall time."""

    mode: str
    nodes: int
    rounds: int
    tests: int
    wall_seconds: float


def plan(
    mode: str,
    nodes: int,
    test_seconds: float,
    k: int = 3,
    both_directions: bool = True,
    overhead_seconds: float = 2.0,
    warmup_seconds: float = 1.0,
    transport: str = "tcp",
) -> Plan:
    """The rounds and wall time of a mesh over `nodes` nodes, from the schedule itself.

    Each round's pairs run in parallel; a round lasts one test per direction plus the set-up
    overhead. A TCP test is its warm-up (`gpuprobe mesh --warmup`, default 1 s) plus its
    measured seconds; an RDMA test (perftest's `-D`) has no warm-up and whole seconds, at
    least one. Quick mode counts one re-test round.
    """
    names = [f"n{i}" for i in range(nodes)]
    if mode == "full":
        rounds = circle_rounds(names)
    elif mode == "quick":
        rounds = [*random_matchings(names, k, seed=0), retest_round(names[:1], names[1:2])]
    else:
        raise ValueError(f"unknown mesh mode {mode!r}")
    if transport == "tcp":
        per_test = warmup_seconds + test_seconds
    elif transport == "rdma":
        per_test = float(perftest.test_seconds(test_seconds))
    else:
        raise ValueError(f"unknown transport {transport!r}")
    directions = 2 if both_directions else 1
    per_round = directions * per_test + overhead_seconds
    tests = sum(len(r) for r in rounds) * directions
    return Plan(mode, nodes, len(rounds), tests, len(rounds) * per_round)
