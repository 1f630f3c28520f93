#!/usr/bin/env python3
"""The bandwidth mesh's schedule: rounds, tests and wall time for cluster sizes, both modes.

Computed by the scheduling code itself (`gpuprobe.mesh.schedule.plan`), not measured: full mode
is the circle method's rounds, quick mode k random perfect matchings plus one re-test round.
A round lasts, per direction, the warm-up plus the measured seconds (RDMA tests have no
warm-up), and a set-up overhead. Prints a Markdown table (the ones in docs/benchmarks.md).

Usage (from the repository root, after install):
  bench/mesh_schedule.py [--transport tcp|rdma] [--seconds S] [--warmup S] [--overhead S]
                         [--matchings K] [--nodes N ...]
"""

from __future__ import annotations

import argparse

from gpuprobe.mesh.schedule import plan

NODES = (8, 16, 32, 64, 128, 256, 512, 1024)


def duration(seconds: float) -> str:
    """A wall time as people read it: seconds, minutes or hours."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 3 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=("tcp", "rdma"), default="tcp")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per test")
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up seconds per TCP test")
    parser.add_argument("--overhead", type=float, default=2.0, help="set-up seconds per round")
    parser.add_argument("--matchings", type=int, default=3, help="quick mode's k")
    parser.add_argument("--nodes", type=int, nargs="+", default=list(NODES))
    args = parser.parse_args()
    print(
        "| nodes | full: rounds | full: tests | full: wall time "
        f"| quick (k={args.matchings}): rounds | quick: tests | quick: wall time |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n in args.nodes:
        full, quick = (
            plan(
                mode,
                n,
                args.seconds,
                k=args.matchings,
                overhead_seconds=args.overhead,
                warmup_seconds=args.warmup,
                transport=args.transport,
            )
            for mode in ("full", "quick")
        )
        print(
            f"| {n} | {full.rounds} | {full.tests} | {duration(full.wall_seconds)} "
            f"| {quick.rounds} | {quick.tests} | {duration(quick.wall_seconds)} |"
        )


if __name__ == "__main__":
    main()
