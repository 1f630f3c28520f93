"""`gpuprobe mesh`: run bandwidth tests between agents and print the link matrix and
verdicts (docs/mesh.md)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import TYPE_CHECKING

from gpuprobe.cli.flags import (
    Commands,
    add_cluster_flags,
    add_kubeconfig_flag,
    at_least_one,
    positive_float,
)
from gpuprobe.cli.terminal import terminal_width
from gpuprobe.report import exit_status

if TYPE_CHECKING:
    from gpuprobe.mesh.nccl.workload import Toleration
    from gpuprobe.mesh.run import MeshResult
    from gpuprobe.mesh.verdict import Thresholds


def add_parser(commands: Commands) -> None:
    """`mesh` and its flags, on the top-level parser's subcommands."""
    mesh = commands.add_parser(
        "mesh", help="run bandwidth tests between agents and print the link matrix and verdicts"
    )
    add_cluster_flags(
        mesh,
        deadline_seconds=10.0,
        targets_required=False,
        deadline_help="how long each agent (and each DNS lookup) may take to answer (default "
        f"10); nccl: how long each test may take from its creation to its result, its pods' "
        f"scheduling and image pulls included (default {NCCL_DEADLINE:g})",
    )
    mesh.add_argument(
        "--transport",
        choices=("tcp", "rdma", "nccl"),
        default="tcp",
        help="tcp (parallel streams), rdma (perftest ib_write_bw), or nccl (the all-reduce "
        "between nodes, run by Kubernetes: docs/mesh.md)",
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
    add_nccl_flags(mesh)
    mesh.set_defaults(func=run)


# --transport nccl: how long a test may take when --deadline is not given.
NCCL_DEADLINE = 600.0
NCCL_FLAGS = (
    "nodes",
    "nccl_image",
    "namespace",
    "nccl_runner",
    "toleration",
    "pod_resource",
    "nccl_binary",
    "nccl_max_bytes",
    "kubeconfig",
)


def add_nccl_flags(mesh: argparse.ArgumentParser) -> None:
    """The flags of `--transport nccl`."""
    add_kubeconfig_flag(mesh, "nccl: the cluster that runs the test")
    mesh.add_argument(
        "--nodes",
        type=node_names,
        metavar="A,B[,...]",
        help="nccl: the nodes to test (default: every GPU node with a gpuprobe agent)",
    )
    mesh.add_argument(
        "--nccl-image",
        metavar="IMAGE",
        help="nccl: the image the test runs: nccl-tests with mpirun and sshd (MPIJob), or "
        "PyTorch with CUDA (Indexed Job)",
    )
    mesh.add_argument(
        "--namespace",
        default="gpuprobe",
        metavar="NS",
        help="nccl: where the test's objects are made (default gpuprobe)",
    )
    mesh.add_argument(
        "--nccl-runner",
        choices=("auto", "mpijob", "job"),
        default="auto",
        help="nccl: an MPIJob (the MPI Operator) or an Indexed Job running gpuprobe's rank "
        "program (default auto: an MPIJob where the MPI Operator is installed)",
    )
    mesh.add_argument(
        "--toleration",
        action="append",
        type=toleration,
        default=[],
        metavar="KEY[=VALUE][:EFFECT]",
        help="nccl: a taint the test's pods tolerate (repeatable; none by default)",
    )
    mesh.add_argument(
        "--pod-resource",
        action="append",
        type=pod_resource,
        default=[],
        metavar="NAME=QUANTITY",
        help="nccl: one more limit of each GPU pod, e.g. an RDMA device plugin's resource "
        "(repeatable)",
    )
    mesh.add_argument(
        "--nccl-binary",
        default="all_reduce_perf",
        metavar="PATH",
        help="nccl, MPIJob: nccl-tests' all_reduce_perf in the image (default: on its PATH)",
    )
    mesh.add_argument(
        "--nccl-max-bytes",
        type=nccl_size,
        default="8G",
        metavar="SIZE",
        help="nccl: the largest size all-reduced, whose bus bandwidth is the link's (default "
        "8G; from 8M by factors of 2)",
    )


def node_names(text: str) -> tuple[str, ...]:
    """--nodes: comma-separated node names, each once."""
    names = tuple(n.strip() for n in text.split(","))
    if not all(_DNS_SUBDOMAIN.fullmatch(n) and len(n) <= 253 for n in names):
        raise argparse.ArgumentTypeError(f"not node names: {text!r}")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"a node named twice: {text!r}")
    return names


def toleration(text: str) -> Toleration:
    """--toleration KEY[=VALUE][:EFFECT] (no VALUE: any value; no EFFECT: every effect)."""
    from gpuprobe.mesh.nccl.workload import EFFECTS, Toleration

    body, _, effect = text.rpartition(":") if ":" in text else (text, "", "")
    key, equal, value = body.partition("=")
    if effect and effect not in EFFECTS:
        raise argparse.ArgumentTypeError(f"effect {effect!r}: one of {', '.join(EFFECTS)}")
    if not _QUALIFIED.fullmatch(key) or (equal and not _LABEL_VALUE.fullmatch(value)):
        raise argparse.ArgumentTypeError(f"not a taint KEY[=VALUE][:EFFECT]: {text!r}")
    return Toleration(key, value if equal else None, effect or None)


def pod_resource(text: str) -> tuple[str, str]:
    """--pod-resource NAME=QUANTITY (an extended resource and a whole number)."""
    name, _, quantity = text.partition("=")
    if not _QUALIFIED.fullmatch(name) or "/" not in name or not quantity.isdecimal():
        raise argparse.ArgumentTypeError(f"not an extended resource NAME=COUNT: {text!r}")
    return name, quantity


def nccl_size(text: str) -> str:
    """--nccl-max-bytes: a size as nccl-tests reads it (digits, then K, M or G), at least 8M."""
    from gpuprobe.mesh.nccl_rank import size_bytes

    value = size_bytes(text)
    if value < 8 * 1024**2:
        raise argparse.ArgumentTypeError(f"at least 8M: {text}")
    return text.strip()


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED = re.compile(
    r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


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
    from gpuprobe.errors import UsageError
    from gpuprobe.mesh.render import render_mesh
    from gpuprobe.mesh.verdict import Thresholds

    floor = args.floor_gbps * 1e9 / 8 if args.floor_gbps else None
    thresholds = Thresholds(floor, args.mad_k, args.min_drop)
    result: MeshResult
    if args.transport == "nccl":
        if args.targets:
            raise UsageError(
                "--targets: the nccl transport finds the nodes through the Kubernetes API "
                "(--nodes, --kubeconfig), not the agents"
            )
        result = run_nccl(args, thresholds)
    else:
        given = [f"--{f.replace('_', '-')}" for f in NCCL_FLAGS if _given(args, f)]
        if given:
            raise UsageError(f"{', '.join(given)}: only with --transport nccl")
        if not args.targets:
            raise UsageError(f"--transport {args.transport} needs --targets (the agents)")
        result = run_agents(args, thresholds)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render_mesh(result, width=terminal_width()))
    sys.stdout.flush()
    return exit_status(result.status)


def run_agents(args: argparse.Namespace, thresholds: Thresholds) -> MeshResult:
    """The mesh between gpuprobe agents (tcp, rdma)."""
    from gpuprobe.cli.credentials import credentials
    from gpuprobe.mesh.run import MeshOptions, mesh

    options = MeshOptions(
        transport=args.transport,
        mode=args.mode,
        seconds=args.seconds,
        warmup=args.warmup,
        streams=args.streams,
        matchings=args.matchings,
        rdma_devices=args.rdma_device,
        force=args.force,
        thresholds=thresholds,
    )
    return mesh(args.targets, credentials(args), options, args.deadline or 10.0)


def run_nccl(args: argparse.Namespace, thresholds: Thresholds) -> MeshResult:
    """The NCCL all-reduce between nodes, run by Kubernetes; what could not be deleted is
    said on stderr."""
    from gpuprobe.cli.kubernetes import kube_access
    from gpuprobe.errors import UsageError
    from gpuprobe.mesh.nccl.run import NcclOptions, nccl_mesh
    from gpuprobe.mesh.nccl.workload import Sweep

    if not args.nccl_image:
        raise UsageError("--transport nccl needs --nccl-image (the image the test runs)")
    if args.nodes is not None and len(args.nodes) < 2:
        raise UsageError("--nodes names 1 node: a mesh measures between two at least")
    options = NcclOptions(
        image=args.nccl_image,
        namespace=args.namespace,
        nodes=args.nodes or (),
        runner=args.nccl_runner,
        tolerations=tuple(args.toleration),
        resources=tuple(args.pod_resource),
        binary=args.nccl_binary,
        sweep=Sweep(max_bytes=args.nccl_max_bytes),
        deadline=args.deadline or NCCL_DEADLINE,
        mode=args.mode,
        matchings=args.matchings,
        thresholds=thresholds,
    )
    outcome = nccl_mesh(kube_access(args.kubeconfig), options)
    for left in outcome.left_behind:
        print(f"gpuprobe: not deleted (delete it by hand): {left}", file=sys.stderr)
    return outcome.result


def _given(args: argparse.Namespace, name: str) -> bool:
    """Whether an nccl flag was given (its value is not the default)."""
    defaults = {
        "namespace": "gpuprobe",
        "nccl_runner": "auto",
        "toleration": [],
        "pod_resource": [],
        "nccl_binary": "all_reduce_perf",
        "nccl_max_bytes": "8G",
    }
    return getattr(args, name) not in (None, defaults.get(name))
