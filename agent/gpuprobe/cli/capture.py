"""`gpuprobe capture DIR`: run the checks on this host (the passive ones, unless `--only`
names others) and write its node snapshot (docs/snapshot-format.md)."""

from __future__ import annotations

import argparse

from gpuprobe.cli.flags import Commands, add_check_flags, checks_help


def add_parser(commands: Commands) -> None:
    """`capture` and its flags, on the top-level parser's subcommands."""
    capture = commands.add_parser(
        "capture",
        help="write a node snapshot of this host to DIR",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    capture.lazy_epilog = checks_help(exit_status=False)
    capture.add_argument("directory", metavar="DIR", help="an empty or new directory")
    add_check_flags(capture, snapshot=False)
    capture.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the snapshot and say so in one line."""
    # Loaded when the command runs, not to build the parser (see gpuprobe.cli).
    from gpuprobe.capture import capture
    from gpuprobe.checks.registry import active
    from gpuprobe.cli.prepare import host_root, pod_statuses, prepare

    config, names = prepare(args)
    if args.only is None:
        # Active checks load the node and are never replayed: a snapshot has no use for them.
        names = [name for name in names if name not in active(names)]
    pods = pod_statuses(args, config)
    report = capture(args.directory, config, names, host_root(args), args.node_name, pods)
    print(
        f"gpuprobe: wrote the snapshot of {report.node} to {args.directory} "
        f"({len(report.checks)} checks, status {report.status.value})"
    )
    return 0
