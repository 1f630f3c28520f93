"""The command line: one module per command, each a thin face that adds its flags to the
parser (`add_parser`) and, once chosen, runs (`run`): it builds what the command needs from
the flags, calls the pipeline or the orchestration, paints the outcome and maps it to the
contract's exit status. `flags` holds the flag parsing the commands share.

Building the parser loads no check, host, gRPC or Kubernetes module: a command imports what
it runs inside its `run`, so `gpuprobe --help` and each command load only their own.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

from gpuprobe import __version__, cleanup
from gpuprobe.cli import audit, capture, check, clear_xid, mesh, serve
from gpuprobe.cli.flags import USAGE_ERROR, Parser
from gpuprobe.errors import UsageError
from gpuprobe.printable import printable

__all__ = ["build_parser", "main"]

# In the order `gpuprobe --help` lists them.
COMMANDS = (check, capture, clear_xid, serve, audit, mesh)


def build_parser() -> Parser:
    """The argument parser of every command."""
    parser = Parser(
        prog="gpuprobe",
        description="Node-level GPU diagnostics for Kubernetes GPU clusters.",
    )
    parser.add_argument("--version", action="version", version=f"gpuprobe {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        command.add_parser(commands)
    parser.commands = {
        name: sub for name, sub in commands.choices.items() if isinstance(sub, Parser)
    }
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_command_line(argv)
    if threading_main():
        # SIGTERM ends serve with 0 from its first moment (serve() then installs its orderly
        # stop); the one-shot commands end with 143, as a process SIGTERM killed.
        cleanup.exit_on_signals(code=0 if args.command == "serve" else 143)
    try:
        return int(args.func(args))
    except UsageError as exc:
        # As argparse's own errors (flags.Parser.error): one line, pointing at the command's
        # help, whatever found the error.
        said = printable(str(exc))  # a path or a server's words: shown, never obeyed
        print(f"gpuprobe: {said} (see gpuprobe {args.command} --help)", file=sys.stderr)
        return USAGE_ERROR
    finally:
        cleanup.remove_all()


def threading_main() -> bool:
    """Whether this is the main thread (only it may set signal handlers)."""
    return threading.current_thread() is threading.main_thread()
