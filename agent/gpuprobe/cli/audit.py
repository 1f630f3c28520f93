"""`gpuprobe audit`: ask many agents for their reports (and, with API access, read the
cluster view and the nodes' gpuprobe conditions and taints) and print the cluster report
(docs/audit.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from gpuprobe.cli.flags import (
    Commands,
    add_cluster_flags,
    add_kubeconfig_flag,
    at_least_one,
    not_negative,
)
from gpuprobe.cli.terminal import colour, terminal_width
from gpuprobe.errors import UsageError
from gpuprobe.report import Status

if TYPE_CHECKING:
    from gpuprobe.effects.readback import NodeSignals

# What `audit` reads of Kubernetes: every GPU node's gpuprobe signals, or why it could not.
KubeSignals = tuple[list["NodeSignals"], str | None]


def add_parser(commands: Commands) -> None:
    """`audit` and its flags, on the top-level parser's subcommands."""
    audit = commands.add_parser(
        "audit", help="query many agents over gRPC and print a cluster report"
    )
    # Without --targets, the agents are found through the API server (--kubeconfig).
    add_cluster_flags(audit, deadline_seconds=5.0, targets_required=False)
    audit.add_argument(
        "--fail-on",
        type=fail_on,
        metavar="WARNING|CRITICAL",
        help="exit 0 unless the cluster's status reaches this level (then 1 or 2) or a "
        "target is unreachable (then 3); a reachable node's UNKNOWN counts below WARNING",
    )
    audit.add_argument(
        "--concurrency",
        type=at_least_one,
        default=64,
        metavar="N",
        help="how many agents to ask at once (default 64)",
    )
    audit.add_argument(
        "--price-per-gpu-hour",
        type=price,
        metavar="PRICE",
        help="what a GPU-hour costs: the usage totals show the idle and unallocated cost",
    )
    add_kubeconfig_flag(
        audit,
        "read the cluster view (and, without --targets, find the agents there), and show each "
        "GPU node's gpuprobe conditions and taints",
    )
    audit.add_argument(
        "--config", metavar="FILE", help="gpuprobe configuration: its kubernetes section"
    )
    audit.add_argument(
        "--pending-window",
        type=window,
        default=300.0,
        metavar="SECONDS",
        help="the cluster view reports GPU pods Pending longer than this (default 300)",
    )
    audit.add_argument(
        "--idle-window",
        type=window,
        default=3600.0,
        metavar="SECONDS",
        help="the cluster view reports GPU nodes with no GPU allocated longer than this "
        "(default 3600)",
    )
    audit.set_defaults(func=run)


def fail_on(text: str) -> str:
    """--fail-on: WARNING or CRITICAL, in any case."""
    if text.upper() not in ("WARNING", "CRITICAL"):
        raise argparse.ArgumentTypeError(f"WARNING or CRITICAL, not {text!r}")
    return text.upper()


def price(text: str) -> float:
    """--price-per-gpu-hour: a finite number of 0 or more."""
    return not_negative(text, "a price")


def window(text: str) -> float:
    """--pending-window, --idle-window: a finite number of seconds, 0 or more."""
    return not_negative(text, "a number of seconds")


def run(args: argparse.Namespace) -> int:
    """Audit, print; the cluster's exit status (under --fail-on)."""
    # gRPC core writes its own log lines on failed connections; the report says what failed.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")

    # Loaded when the command runs, not to build the parser (see gpuprobe.cli); and after
    # GRPC_VERBOSITY is set, which gRPC core reads when it loads.
    from gpuprobe.audit.render import render_cluster
    from gpuprobe.audit.run import AuditOptions, audit
    from gpuprobe.audit.view.judge import Windows
    from gpuprobe.checks.registry import sections
    from gpuprobe.cli.credentials import credentials
    from gpuprobe.config import load_config
    from gpuprobe.effects.readback import render_signals
    from gpuprobe.kube.api import Access, in_cluster_available
    from gpuprobe.printable import screen
    from gpuprobe.targets import parse_targets

    # The cluster view is read with a kubeconfig, or in a pod with a service account.
    view = args.kubeconfig is not None or in_cluster_available()
    if args.targets is None and not view:
        raise UsageError(
            "audit: give --targets, or --kubeconfig (or run in a pod with a service account) "
            "to find the agents through the API server"
        )
    options = AuditOptions(
        targets=parse_targets(args.targets) if args.targets is not None else [],
        credentials=credentials(args),
        deadline=args.deadline,
        concurrency=args.concurrency,
        price_per_gpu_hour=args.price_per_gpu_hour,
        kube=Access(kubeconfig=args.kubeconfig) if view else None,
        windows=Windows(pending=args.pending_window, idle=args.idle_window),
    )

    # In a pod with a service account the API is read as well (its errors shown, not fatal).
    wants_kube = args.kubeconfig or args.config or in_cluster_available()
    if view:  # the view's pass over the nodes keeps their signals: no second list
        options = replace(options, signals=load_config(args.config, sections()).kubernetes)
    read_kube = kube_signals(args) if wants_kube and not view else None
    # The nodes' gpuprobe signals are read while the audit runs, not after it.
    read: list[KubeSignals] = []
    reading = None
    if read_kube is not None:
        reading = threading.Thread(target=lambda: read.append(read_kube()), daemon=True)
        reading.start()
    report = audit(options)
    if reading is not None:
        reading.join()
    kube = read[0] if read else None
    if report.view is not None:  # the view's pass over the nodes, or why it had none
        error = report.view.signals_error
        kube = (report.view.signals, None) if error is None else ([], error)
    if args.json:
        chunks = report.json_chunks()
        if kube is not None:
            signals = {"nodes": [n.to_dict() for n in kube[0]], "error": kube[1]}
            chunks = with_key(chunks, "kubernetes", signals)
        sys.stdout.writelines(chunks)
    else:
        sys.stdout.write(render_cluster(report, colour=colour(), width=terminal_width()))
        if kube is not None:
            found, error = kube
            if error is None:
                sys.stdout.write(render_signals(found))
            elif report.view is None or error != report.view.signals_error:
                sys.stdout.write(screen(["", f"kubernetes  not read: {error}"]))
            # else the view's lines already say why the nodes were not read
    sys.stdout.flush()
    return report.exit_status(Status(args.fail_on) if args.fail_on else None)


def with_key(chunks: Iterator[str], key: str, value: object) -> Iterator[str]:
    """A streamed JSON object (its last chunk ending in `}` and a newline) with one more key."""
    last = None
    for chunk in chunks:
        if last is not None:
            yield last
        last = chunk
    assert last is not None and last.endswith("}\n")
    yield f"{last[:-2]},\n {json.dumps(key)}: {json.dumps(value)}}}\n"


def kube_signals(args: argparse.Namespace) -> Callable[[], KubeSignals]:
    """What `audit` reads of Kubernetes: every GPU node's gpuprobe conditions and taints, or
    why they could not be read (the audit of the agents stands without them)."""
    # Loaded when the command runs, not to build the parser (see gpuprobe.cli).
    from gpuprobe.checks.registry import sections
    from gpuprobe.cli.kubernetes import kube_access
    from gpuprobe.config import load_config
    from gpuprobe.effects.readback import read_signals
    from gpuprobe.kube.api import KubeError

    config = load_config(args.config, sections()).kubernetes
    access = kube_access(args.kubeconfig)

    def read() -> KubeSignals:
        """The nodes' signals, and None; or no nodes and the error."""
        try:
            return read_signals(access, config), None
        except KubeError as exc:
            return [], str(exc)

    return read
