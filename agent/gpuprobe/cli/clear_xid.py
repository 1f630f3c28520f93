"""`gpuprobe clear-xid`: forget the sticky critical XIDs and NVML events reported now (they
return if they recur)."""

from __future__ import annotations

import argparse

from gpuprobe.cli.flags import Commands, positive_int


def add_parser(commands: Commands) -> None:
    """`clear-xid` and its flags, on the top-level parser's subcommands."""
    clear_xid = commands.add_parser(
        "clear-xid",
        help="clear the sticky critical XIDs and NVML events reported now (they return if "
        "they recur)",
    )
    clear_xid.add_argument(
        "--gpu", type=positive_int, metavar="N", help="only those of GPU index N"
    )
    clear_xid.add_argument("--root", metavar="DIR", default="/", help="read host files under DIR")
    clear_xid.add_argument("--config", metavar="FILE", help="gpuprobe configuration (YAML)")
    clear_xid.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Clear, and say how many in one line."""
    # Loaded when the command runs, not to build the parser (see gpuprobe.cli).
    from gpuprobe.checks.context import CheckContext
    from gpuprobe.checks.registry import CHECKS, clear, sections
    from gpuprobe.checks.runner import checks_states
    from gpuprobe.cli.prepare import node_host
    from gpuprobe.config import load_config

    config = load_config(args.config, sections())
    host = node_host(args)
    # The state directory the checks' runner keeps (`xid.state_dir`, else the live default).
    cleared = clear(CheckContext(host, checks_states(host, config, CHECKS)), config, args.gpu)
    where = f" on GPU {args.gpu}" if args.gpu is not None else ""
    print(f"gpuprobe: cleared {cleared} sticky finding{'s' if cleared != 1 else ''}{where}")
    return 0
