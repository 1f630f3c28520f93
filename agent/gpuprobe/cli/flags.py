"""The flag parsing the commands share: the parser that ends a usage error in one line, the
value types, and the groups of flags several commands take."""

from __future__ import annotations

import argparse
import math
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import NoReturn, TypeAlias

USAGE_ERROR = 64

EXIT_STATUS_HELP = (
    "exit status: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (the worst check's status), "
    f"{USAGE_ERROR} usage error"
)

# gRPC turns a deadline past its range into one already expired (a healthy agent would read
# as timed out); an hour is more than any agent needs to answer.
MAX_DEADLINE_SECONDS = 3600


class Parser(argparse.ArgumentParser):
    """argparse that ends a usage error with one line, pointing at the help of the command
    it belongs to, and exit status 64; a help epilog may be made only when asked for."""

    lazy_epilog: Callable[[], str] | None = None
    commands: dict[str, Parser] | None = None  # the top-level parser's subcommands

    def error(self, message: str) -> NoReturn:
        print(f"gpuprobe: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(USAGE_ERROR)

    def parse_command_line(self, argv: Sequence[str] | None) -> argparse.Namespace:
        """The parsed arguments; a flag no command knows is the named command's error, so
        the message points at that command's help."""
        args, extras = self.parse_known_args(argv)
        if extras:
            owner = (self.commands or {}).get(getattr(args, "command", ""), self)
            owner.error(f"unrecognized arguments: {' '.join(extras)}")
        return args

    def format_help(self) -> str:
        if self.lazy_epilog is not None:
            self.epilog = self.lazy_epilog()
        return super().format_help()


# The top-level parser's subcommands: each command module adds its parser to them.
Commands: TypeAlias = "argparse._SubParsersAction[Parser]"


def checks_help(exit_status: bool) -> Callable[[], str]:
    """The epilog of a command that takes `--only`: the check names (and its exit status)."""

    def epilog() -> str:
        # Imported only when help is asked for: the checks are most of the program.
        from gpuprobe.checks.registry import CHECKS

        names = textwrap.fill(
            ", ".join(CHECKS), width=78, initial_indent="  ", subsequent_indent="  "
        )
        active = " and ".join(name for name, check in CHECKS.items() if check.active)
        text = (
            "checks (--only takes them, comma-separated; docs/checks.md tells what each\n"
            f"holds the node to):\n{names}\n  ({active} are active: they load the node while "
            "they measure)"
        )
        return f"{text}\n\n{textwrap.fill(EXIT_STATUS_HELP, 78)}" if exit_status else text

    return epilog


def positive_int(text: str) -> int:
    """A whole number of 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text}")
    return value


def at_least_one(text: str) -> int:
    """A whole number of 1 or more."""
    value = positive_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def positive_float(text: str) -> float:
    """A finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text}")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0: {text}")
    return value


def not_negative(text: str, what: str) -> float:
    """A flag's finite number of 0 or more; a usage error naming `what` otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"not {what} of 0 or more: {text!r}")
    return value


def deadline(text: str) -> float:
    """--deadline: seconds above 0, at most MAX_DEADLINE_SECONDS."""
    value = positive_float(text)
    if value > MAX_DEADLINE_SECONDS:
        raise argparse.ArgumentTypeError(f"at most {MAX_DEADLINE_SECONDS} s, not {text}")
    return value


def check_list(text: str) -> list[str]:
    """--only: comma-separated check names, at least one."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("names no check")
    return names


def add_check_flags(parser: argparse.ArgumentParser, snapshot: bool = True) -> None:
    """The flags of the commands that run checks on this node: which, where, how."""
    parser.add_argument("--only", type=check_list, metavar="a,b", help="run only the named checks")
    if snapshot:
        parser.add_argument("--snapshot", metavar="DIR", help="run against a node snapshot")
    # No default: a --root given beside --snapshot, even `/`, is refused (cli.prepare).
    parser.add_argument("--root", metavar="DIR", help="read host files under DIR (default: /)")
    parser.add_argument(
        "--expect-gpus", type=positive_int, metavar="N", help="GPUs this node must have"
    )
    parser.add_argument("--config", metavar="FILE", help="gpuprobe configuration (YAML)")
    parser.add_argument(
        "--node-name",
        metavar="NAME",
        help="the node's name (default: $NODE_NAME, else the host name; a snapshot's own)",
    )


def add_storage_flag(parser: argparse.ArgumentParser) -> None:
    """--storage-path, repeatable."""
    parser.add_argument(
        "--storage-path",
        action="append",
        metavar="PATH",
        help="a host path whose throughput the storage check measures (repeatable)",
    )


def add_kubeconfig_flag(parser: argparse.ArgumentParser, what: str) -> None:
    """--kubeconfig, saying `what` the command does with the access."""
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help=f"Kubernetes API access from outside a pod: {what} (docs/kubernetes.md)",
    )


def add_cluster_flags(
    parser: argparse.ArgumentParser,
    deadline_seconds: float,
    targets_required: bool = True,
    deadline_help: str | None = None,
) -> None:
    """The flags of commands that talk to many agents: who, and with which credentials
    (`deadline_help`: a command whose --deadline means more; its default is then None, and
    the command picks it)."""
    parser.add_argument(
        "--targets",
        required=targets_required,
        metavar="T",
        help="agents: comma-separated HOST:PORT ([V6]:PORT) and dns:NAME:PORT (every address "
        "NAME resolves to, e.g. a headless Service); @FILE reads them from FILE",
    )
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    parser.add_argument(
        "--deadline",
        type=deadline,
        default=None if deadline_help else deadline_seconds,
        metavar="SECONDS",
        help=(deadline_help + f" (at most {MAX_DEADLINE_SECONDS})")
        if deadline_help
        else f"how long each agent (and each DNS lookup) may take to answer (default "
        f"{deadline_seconds:g}, at most {MAX_DEADLINE_SECONDS})",
    )
    parser.add_argument(
        "--token-file", metavar="FILE", help="bearer token sent to the agents with every call"
    )
    parser.add_argument(
        "--tls-ca", metavar="FILE", help="call the agents over TLS, trusting this CA (PEM)"
    )
    parser.add_argument(
        "--tls-cert", metavar="FILE", help="client certificate for agents that require mTLS"
    )
    parser.add_argument("--tls-key", metavar="FILE", help="the client certificate's key")
    parser.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="the name the agents' certificates carry (default: the target's host)",
    )
