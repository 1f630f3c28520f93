"""`gpuprobe check`: run the checks once on this node, and hand the report to its sinks: the
printed report (text or `--json`) and, with `--publish`, the node's conditions and events in
Kubernetes. The exit status is the report's (docs/checks.md)."""

from __future__ import annotations

import argparse
import json
import sys

from gpuprobe.cli.flags import (
    Commands,
    add_check_flags,
    add_kubeconfig_flag,
    add_storage_flag,
    checks_help,
)
from gpuprobe.cli.terminal import colour, terminal_width
from gpuprobe.errors import UsageError
from gpuprobe.report import NodeReport, Status, exit_status


def add_parser(commands: Commands) -> None:
    """`check` and its flags, on the top-level parser's subcommands."""
    check = commands.add_parser(
        "check",
        help="run every check once on this node and print the report",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.lazy_epilog = checks_help(exit_status=True)
    add_check_flags(check)
    check.add_argument("--json", action="store_true", help="print the JSON report")
    check.add_argument(
        "--verbose",
        action="store_true",
        help="end the text report with every check's summary line, not only the OK checks' names",
    )
    check.add_argument(
        "--explain-policy",
        action="store_true",
        help="print the effective XID policy (NVIDIA's catalog with xid.policy) and run nothing",
    )
    add_storage_flag(check)
    check.add_argument(
        "--publish",
        action="store_true",
        help="also write the run's node conditions and events to Kubernetes",
    )
    add_kubeconfig_flag(check, "for --publish (default: in-cluster credentials)")
    check.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the checks, feed the report to the sinks; the report's exit status (UNKNOWN's for
    an OK run that Kubernetes did not hear)."""
    # Loaded when the command runs, not to build the parser (see gpuprobe.cli).
    from gpuprobe.checks.registry import policy
    from gpuprobe.cli.kubernetes import kube_access
    from gpuprobe.cli.prepare import node_host, prepare
    from gpuprobe.effects.once import publish_once
    from gpuprobe.kube.api import KubeError
    from gpuprobe.pipeline import Sink, feed, run_checks
    from gpuprobe.printable import printable, screen
    from gpuprobe.render import render_report

    config, names = prepare(args)
    if args.explain_policy:
        explaining = policy()
        if explaining is None:
            raise UsageError("no check has a policy to explain")
        explained = explaining.explain(node_host(args), config)
        text = (
            json.dumps(explained, indent=1) + "\n"
            if args.json
            else screen(explaining.render(explained).splitlines())
        )
        sys.stdout.write(text)
        return 0
    access = kube_access(args.kubeconfig) if args.publish else None
    if args.kubeconfig and not args.publish:
        raise UsageError("--kubeconfig goes with --publish")
    # The pods check alone reads the API server: no client for a run without it.
    host = node_host(args, config if "pods" in names else None)

    def show(report: NodeReport) -> None:
        """Print the report, JSON or text."""
        if args.json:
            sys.stdout.write(report.to_json() + "\n")
        else:
            text = render_report(
                report,
                colour=colour(),
                width=terminal_width(),
                replayed=host.is_snapshot,
                captured_at=host.captured_at,
                verbose=args.verbose,
            )
            sys.stdout.write(text)
        sys.stdout.flush()

    sinks: list[Sink[NodeReport]] = [show]
    if access is not None:
        sinks.append(lambda report: publish_once(report, config.kubernetes, access))
    report = run_checks(host, config, names)
    status = exit_status(report.status)
    try:
        feed(report, sinks)
    except KubeError as exc:
        print(f"gpuprobe: publishing to Kubernetes failed: {printable(str(exc))}", file=sys.stderr)
        return status or exit_status(Status.UNKNOWN)  # an OK run that Kubernetes did not hear
    return status
