"""`gpuprobe mesh`: run bandwidth tests between agents and print the link matrix and
verdicts (docs/mesh.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from gpuprobe.cli.flags import Commands, add_cluster_flags, at_least_one, positive_float
from gpuprobe.cli.terminal import terminal_width
from gpuprobe.report import exit_status


def add_parser(commands: Commands) -> None:
    """`mesh` and its flags, on the top-level parser's subcommands."""
    mesh = commands.add_parser(
        "mesh", help="run bandwidth tests between agents and print the link matrix and verdicts"
    )
    add_cluster_flags(mesh, deadline_seconds=10.0)
    mesh.add_argument(
        "--transport",
        choices=("tcp", "rdma"),
        default="tcp",
        help="tcp (parallel streams) or rdma (perftest ib_write_bw)",
    )
    mesh.add_argument(
        "--mode",
        choices=("full", "quick"),
        default="full",
        help="full: every pair (circle method); quick: random matchings, then re-test the suspects",
    )
    mesh.add_argument(
        "--seconds",
        type=positive_float,
        default=10.0,
        metavar="S",
        help="each test's duration after the warm-up (default 10)",
    )
    mesh.add_argument(
        "--warmup",
        type=positive_float,
        default=1.0,
        metavar="S",
        help="TCP: seconds sent before the measured window (default 1)",
    )
    mesh.add_argument(
        "--streams",
        type=streams,
        default=4,
        metavar="N",
        help="TCP: parallel streams per test, 1-64 (default 4)",
    )
    mesh.add_argument(
        "--matchings",
        type=at_least_one,
        default=3,
        metavar="K",
        help="quick mode: random perfect matchings before the re-test (default 3)",
    )
    mesh.add_argument(
        "--rdma-device",
        type=rdma_devices,
        default=(),
        metavar="DEV[,DEV...]",
        help="RDMA: the device on every node (e.g. mlx5_0), or several (mlx5_0,mlx5_1): "
        "one mesh per rail, in turn",
    )
    mesh.add_argument(
        "--floor-gbps",
        type=positive_float,
        metavar="GBIT",
        help="a link below this many Gbit/s is LOW whatever its peers do",
    )
    mesh.add_argument(
        "--mad-k",
        type=positive_float,
        default=3.0,
        metavar="K",
        help="LOW below the typical rate by more than K·MAD (default 3) ...",
    )
    mesh.add_argument(
        "--min-drop",
        type=fraction,
        default=0.10,
        metavar="F",
        help="... and by at least this fraction of it (default 0.10)",
    )
    mesh.add_argument(
        "--force", action="store_true", help="test even while GPU processes are active on a node"
    )
    mesh.set_defaults(func=run)


def streams(text: str) -> int:
    """--streams: 1 to the bandwidth test's most."""
    # Loaded when the flag is parsed: the measurement is no part of building the parser.
    from gpuprobe.measure.bandwidth import MAX_STREAMS

    value = at_least_one(text)
    if value > MAX_STREAMS:
        raise argparse.ArgumentTypeError(f"at most {MAX_STREAMS}: {text}")
    return value


def rdma_devices(text: str) -> tuple[str, ...]:
    """--rdma-device: comma-separated device names, each once."""
    devices = tuple(d.strip() for d in text.split(","))
    bad = [d for d in devices if not d or "/" in d or d in (".", "..")]
    if bad or not devices:
        raise argparse.ArgumentTypeError(f"not RDMA device names: {text!r}")
    if len(set(devices)) != len(devices):
        raise argparse.ArgumentTypeError(f"a device named twice: {text!r}")
    return devices


def fraction(text: str) -> float:
    """--min-drop: a number above 0 and below 1."""
    value = positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be below 1: {text}")
    return value


def run(args: argparse.Namespace) -> int:
    """Test the links, print; the mesh's exit status."""
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")

    # Loaded when the command runs, not to build the parser (see gpuprobe.cli); and after
    # GRPC_VERBOSITY is set, which gRPC core reads when it loads.
    from gpuprobe.cli.credentials import credentials
    from gpuprobe.mesh.render import render_mesh
    from gpuprobe.mesh.run import MeshOptions, mesh
    from gpuprobe.mesh.verdict import Thresholds

    floor = args.floor_gbps * 1e9 / 8 if args.floor_gbps else None
    options = MeshOptions(
        transport=args.transport,
        mode=args.mode,
        seconds=args.seconds,
        warmup=args.warmup,
        streams=args.streams,
        matchings=args.matchings,
        rdma_devices=args.rdma_device,
        force=args.force,
        thresholds=Thresholds(floor, args.mad_k, args.min_drop),
    )
    result = mesh(args.targets, credentials(args), options, args.deadline)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render_mesh(result, width=terminal_width()))
    sys.stdout.flush()
    return exit_status(result.status)
