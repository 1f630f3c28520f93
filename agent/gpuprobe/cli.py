"""The command line: `gpuprobe check`, `capture` (and the daemon and cluster commands).

A thin face: it parses flags, builds the host and config, runs, prints, and maps the outcome
to the contract's exit status. Heavy modules are imported only by the command that needs
them, so `gpuprobe --help` stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from gpuprobe import __version__

if TYPE_CHECKING:
    from gpuprobe.config import Config

USAGE_ERROR = 64


class _Parser(argparse.ArgumentParser):
    """argparse that ends a usage error with one line and exit status 64."""

    def error(self, message: str) -> NoReturn:
        print(f"gpuprobe: {message} (see gpuprobe --help)", file=sys.stderr)
        raise SystemExit(USAGE_ERROR)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text}")
    return value


def _check_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("names no check")
    return names


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    parser = _Parser(
        prog="gpuprobe",
        description="Node-level GPU diagnostics for Kubernetes GPU clusters.",
    )
    parser.add_argument("--version", action="version", version=f"gpuprobe {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    check = commands.add_parser(
        "check", help="run every check once on this node and print the report"
    )
    _add_check_flags(check)
    check.add_argument("--json", action="store_true", help="print the JSON report")
    check.add_argument(
        "--storage-path",
        action="append",
        metavar="PATH",
        help="a host path whose throughput the storage check measures (repeatable)",
    )
    check.set_defaults(func=_check)

    capture = commands.add_parser("capture", help="write a node snapshot of this host to DIR")
    capture.add_argument("directory", metavar="DIR", help="an empty or new directory")
    _add_check_flags(capture, snapshot=False)
    capture.set_defaults(func=_capture)
    return parser


def _add_check_flags(parser: argparse.ArgumentParser, snapshot: bool = True) -> None:
    parser.add_argument("--only", type=_check_list, metavar="a,b", help="run only the named checks")
    if snapshot:
        parser.add_argument("--snapshot", metavar="DIR", help="run against a node snapshot")
    parser.add_argument("--root", metavar="DIR", default="/", help="read host files under DIR")
    parser.add_argument(
        "--expect-gpus", type=_positive_int, metavar="N", help="GPUs this node must have"
    )
    parser.add_argument("--config", metavar="FILE", help="gpuprobe configuration (YAML)")
    parser.add_argument(
        "--node-name",
        metavar="NAME",
        help="the node's name (default: $NODE_NAME, else the host name; a snapshot's own)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    from gpuprobe import cleanup
    from gpuprobe.errors import UsageError

    args = build_parser().parse_args(argv)
    if threading_main():
        cleanup.exit_on_signals()
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"gpuprobe: {exc}", file=sys.stderr)
        return USAGE_ERROR
    finally:
        cleanup.remove_all()


def threading_main() -> bool:
    """Whether this is the main thread (only it may set signal handlers)."""
    import threading

    return threading.current_thread() is threading.main_thread()


def _prepare(args: argparse.Namespace) -> tuple[Config, list[str]]:
    """The configuration with flag overrides, and the checks to run."""
    import dataclasses

    from gpuprobe.checks.registry import CHECKS, resolve
    from gpuprobe.config import load_config
    from gpuprobe.errors import UsageError

    config = load_config(args.config)
    if args.expect_gpus is not None:
        config = dataclasses.replace(
            config, gpus=dataclasses.replace(config.gpus, expect=args.expect_gpus)
        )
    storage_paths = getattr(args, "storage_path", None) or []
    if storage_paths:
        storage = config.storage
        try:
            storage = dataclasses.replace(storage, paths=(*storage.paths, *storage_paths))
        except UsageError as exc:
            raise UsageError(f"--storage-path: {exc}") from None
        config = dataclasses.replace(config, storage=storage)
    try:
        names = resolve(args.only)
    except KeyError as exc:
        raise UsageError(f"unknown check {exc.args[0]!r} (known: {', '.join(CHECKS)})") from None
    return config, names


def _check(args: argparse.Namespace) -> int:
    from gpuprobe.checks.runner import run_checks
    from gpuprobe.errors import UsageError
    from gpuprobe.host import live_host, snapshot_host
    from gpuprobe.render import render_report
    from gpuprobe.report import exit_status

    config, names = _prepare(args)
    if args.snapshot and args.root != "/":
        raise UsageError("--snapshot and --root exclude each other")
    if args.snapshot:
        host = snapshot_host(args.snapshot, args.node_name)
    else:
        if not os.path.isdir(args.root):
            raise UsageError(f"--root {args.root}: not a directory")
        host = live_host(args.root, args.node_name)
    report = run_checks(host, config, names)
    if args.json:
        sys.stdout.write(report.to_json() + "\n")
    else:
        colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        sys.stdout.write(render_report(report, colour=colour))
    sys.stdout.flush()
    return exit_status(report.status)


def _capture(args: argparse.Namespace) -> int:
    from gpuprobe.capture import capture

    config, names = _prepare(args)
    report = capture(args.directory, config, names, args.root, args.node_name)
    print(
        f"gpuprobe: wrote the snapshot of {report.node} to {args.directory} "
        f"({len(report.checks)} checks, status {report.status.value})"
    )
    return 0
