"""The command line: `gpuprobe check`, `capture` (and the daemon and cluster commands).

A thin face: it parses flags, builds the host and config, runs, prints, and maps the outcome
to the contract's exit status. Heavy modules are imported only by the command that needs
them, so `gpuprobe --help` stays fast.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, NoReturn

from gpuprobe import __version__

if TYPE_CHECKING:
    from gpuprobe.client import Credentials
    from gpuprobe.config import Config
    from gpuprobe.host import Host
    from gpuprobe.host.podstatus import PodStatuses
    from gpuprobe.kube.api import Access as KubeAccess
    from gpuprobe.kube.once import NodeSignals

USAGE_ERROR = 64


class _Parser(argparse.ArgumentParser):
    """argparse that ends a usage error with one line, pointing at the help of the command
    it belongs to, and exit status 64; a help epilog may be made only when asked for."""

    lazy_epilog: Callable[[], str] | None = None
    commands: dict[str, _Parser] | None = None  # the top-level parser's subcommands

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


EXIT_STATUS_HELP = (
    "exit status: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (the worst check's status), "
    f"{USAGE_ERROR} usage error"
)


def _checks_help(exit_status: bool) -> Callable[[], str]:
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


def build_parser() -> _Parser:
    """The argument parser of every command."""
    parser = _Parser(
        prog="gpuprobe",
        description="Node-level GPU diagnostics for Kubernetes GPU clusters.",
    )
    parser.add_argument("--version", action="version", version=f"gpuprobe {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    check = commands.add_parser(
        "check",
        help="run every check once on this node and print the report",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.lazy_epilog = _checks_help(exit_status=True)
    _add_check_flags(check)
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
    _add_storage_flag(check)
    check.add_argument(
        "--publish",
        action="store_true",
        help="also write the run's node conditions and events to Kubernetes",
    )
    _add_kubeconfig_flag(check, "for --publish (default: in-cluster credentials)")
    check.set_defaults(func=_check)

    capture = commands.add_parser(
        "capture",
        help="write a node snapshot of this host to DIR",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    capture.lazy_epilog = _checks_help(exit_status=False)
    capture.add_argument("directory", metavar="DIR", help="an empty or new directory")
    _add_check_flags(capture, snapshot=False)
    capture.set_defaults(func=_capture)

    clear_xid = commands.add_parser(
        "clear-xid",
        help="clear the sticky critical XIDs and NVML events reported now (they return if "
        "they recur)",
    )
    clear_xid.add_argument(
        "--gpu", type=_positive_int, metavar="N", help="only those of GPU index N"
    )
    clear_xid.add_argument("--root", metavar="DIR", default="/", help="read host files under DIR")
    clear_xid.add_argument("--config", metavar="FILE", help="gpuprobe configuration (YAML)")
    clear_xid.set_defaults(func=_clear_xid)

    serve = commands.add_parser(
        "serve",
        help="the agent daemon: periodic checks, gRPC API, Prometheus /metrics",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.lazy_epilog = _checks_help(exit_status=False)
    _add_check_flags(serve)
    _add_storage_flag(serve)
    _add_serve_flags(serve)
    serve.set_defaults(func=_serve)

    audit = commands.add_parser(
        "audit", help="query many agents over gRPC and print a cluster report"
    )
    _add_audit_flags(audit)
    _add_kubeconfig_flag(
        audit,
        "read the cluster view (and, without --targets, find the agents there), and show each "
        "GPU node's gpuprobe conditions and taints",
    )
    audit.add_argument(
        "--config", metavar="FILE", help="gpuprobe configuration: its kubernetes section"
    )
    audit.add_argument(
        "--pending-window",
        type=_window,
        default=300.0,
        metavar="SECONDS",
        help="the cluster view reports GPU pods Pending longer than this (default 300)",
    )
    audit.add_argument(
        "--idle-window",
        type=_window,
        default=3600.0,
        metavar="SECONDS",
        help="the cluster view reports GPU nodes with no GPU allocated longer than this "
        "(default 3600)",
    )
    audit.set_defaults(func=_audit)

    mesh = commands.add_parser(
        "mesh", help="run bandwidth tests between agents and print the link matrix and verdicts"
    )
    _add_mesh_flags(mesh)
    mesh.set_defaults(func=_mesh)
    parser.commands = {
        name: sub for name, sub in commands.choices.items() if isinstance(sub, _Parser)
    }
    return parser


def _add_storage_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage-path",
        action="append",
        metavar="PATH",
        help="a host path whose throughput the storage check measures (repeatable)",
    )


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


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text}")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0: {text}")
    return value


# gRPC turns a deadline past its range into one already expired (a healthy agent would read
# as timed out); an hour is more than any agent needs to answer.
MAX_DEADLINE_SECONDS = 3600


def _deadline(text: str) -> float:
    value = _positive_float(text)
    if value > MAX_DEADLINE_SECONDS:
        raise argparse.ArgumentTypeError(f"at most {MAX_DEADLINE_SECONDS} s, not {text}")
    return value


def _add_serve_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--grpc-listen",
        metavar="HOST:PORT",
        default="[::]:50051",
        help="gRPC address (port 0: any free port; the bound ports are logged); the default "
        "[::] takes IPv6 and IPv4 (IPv4 alone where the kernel has no IPv6)",
    )
    parser.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        default="[::]:9760",
        help="Prometheus /metrics, /healthz and /readyz address ([::]: IPv6 and IPv4)",
    )
    parser.add_argument(
        "--interval",
        type=_positive_float,
        metavar="SECONDS",
        help="how often the checks run (default: serve.interval_seconds, 60)",
    )
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        help="bearer token that guards RunChecks, ClearFindings and the bandwidth RPCs",
    )
    parser.add_argument("--tls-cert", metavar="FILE", help="serve gRPC over TLS: certificate")
    parser.add_argument("--tls-key", metavar="FILE", help="serve gRPC over TLS: private key")
    parser.add_argument(
        "--tls-client-ca",
        metavar="FILE",
        help="require client certificates signed by this CA (mTLS); they authorise too",
    )
    parser.add_argument(
        "--tls-client-cert",
        metavar="FILE",
        help="mTLS: the client certificate this agent presents to its peers in bandwidth "
        "tests (default: --tls-cert, which then needs the clientAuth key usage)",
    )
    parser.add_argument(
        "--tls-client-key", metavar="FILE", help="mTLS: the key of --tls-client-cert"
    )
    parser.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="without a token or mTLS, let anyone call the guarded RPCs (else refused)",
    )
    _add_kubeconfig_flag(parser, "write node conditions, events and taints")


def _add_kubeconfig_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help=f"Kubernetes API access from outside a pod: {what} (docs/kubernetes.md)",
    )


def _window(text: str) -> float:
    """--pending-window, --idle-window: a finite number of seconds, 0 or more."""
    return _not_negative(text, "a number of seconds")


def _add_cluster_flags(
    parser: argparse.ArgumentParser, deadline: float, targets_required: bool = True
) -> None:
    """The flags of commands that talk to many agents: who, and with which credentials."""
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
        type=_deadline,
        default=deadline,
        metavar="SECONDS",
        help=f"how long each agent (and each DNS lookup) may take to answer (default {deadline:g}, "
        f"at most {MAX_DEADLINE_SECONDS})",
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


def _add_audit_flags(parser: argparse.ArgumentParser) -> None:
    # Without --targets, the agents are found through the API server (--kubeconfig).
    _add_cluster_flags(parser, deadline=5.0, targets_required=False)
    parser.add_argument(
        "--fail-on",
        type=_fail_on,
        metavar="WARNING|CRITICAL",
        help="exit 0 unless the cluster's status reaches this level (then 1 or 2) or a "
        "target is unreachable (then 3); a reachable node's UNKNOWN counts below WARNING",
    )
    parser.add_argument(
        "--concurrency",
        type=_at_least_one,
        default=64,
        metavar="N",
        help="how many agents to ask at once (default 64)",
    )
    parser.add_argument(
        "--price-per-gpu-hour",
        type=_price,
        metavar="PRICE",
        help="what a GPU-hour costs: the usage totals show the idle and unallocated cost",
    )


def _price(text: str) -> float:
    """--price-per-gpu-hour: a finite number of 0 or more."""
    return _not_negative(text, "a price")


def _not_negative(text: str, what: str) -> float:
    """A flag's finite number of 0 or more; a usage error naming `what` otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"not {what} of 0 or more: {text!r}")
    return value


def _rdma_devices(text: str) -> tuple[str, ...]:
    """--rdma-device: comma-separated device names, each once."""
    devices = tuple(d.strip() for d in text.split(","))
    bad = [d for d in devices if not d or "/" in d or d in (".", "..")]
    if bad or not devices:
        raise argparse.ArgumentTypeError(f"not RDMA device names: {text!r}")
    if len(set(devices)) != len(devices):
        raise argparse.ArgumentTypeError(f"a device named twice: {text!r}")
    return devices


def _add_mesh_flags(parser: argparse.ArgumentParser) -> None:
    _add_cluster_flags(parser, deadline=10.0)
    parser.add_argument(
        "--transport",
        choices=("tcp", "rdma"),
        default="tcp",
        help="tcp (parallel streams) or rdma (perftest ib_write_bw)",
    )
    parser.add_argument(
        "--mode",
        choices=("full", "quick"),
        default="full",
        help="full: every pair (circle method); quick: random matchings, then re-test the suspects",
    )
    parser.add_argument(
        "--seconds",
        type=_positive_float,
        default=10.0,
        metavar="S",
        help="each test's duration after the warm-up (default 10)",
    )
    parser.add_argument(
        "--warmup",
        type=_positive_float,
        default=1.0,
        metavar="S",
        help="TCP: seconds sent before the measured window (default 1)",
    )
    parser.add_argument(
        "--streams",
        type=_streams,
        default=4,
        metavar="N",
        help="TCP: parallel streams per test, 1-64 (default 4)",
    )
    parser.add_argument(
        "--matchings",
        type=_at_least_one,
        default=3,
        metavar="K",
        help="quick mode: random perfect matchings before the re-test (default 3)",
    )
    parser.add_argument(
        "--rdma-device",
        type=_rdma_devices,
        default=(),
        metavar="DEV[,DEV...]",
        help="RDMA: the device on every node (e.g. mlx5_0), or several (mlx5_0,mlx5_1): "
        "one mesh per rail, in turn",
    )
    parser.add_argument(
        "--floor-gbps",
        type=_positive_float,
        metavar="GBIT",
        help="a link below this many Gbit/s is LOW whatever its peers do",
    )
    parser.add_argument(
        "--mad-k",
        type=_positive_float,
        default=3.0,
        metavar="K",
        help="LOW below the typical rate by more than K·MAD (default 3) ...",
    )
    parser.add_argument(
        "--min-drop",
        type=_fraction,
        default=0.10,
        metavar="F",
        help="... and by at least this fraction of it (default 0.10)",
    )
    parser.add_argument(
        "--force", action="store_true", help="test even while GPU processes are active on a node"
    )


def _fraction(text: str) -> float:
    value = _positive_float(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be below 1: {text}")
    return value


def _fail_on(text: str) -> str:
    if text.upper() not in ("WARNING", "CRITICAL"):
        raise argparse.ArgumentTypeError(f"WARNING or CRITICAL, not {text!r}")
    return text.upper()


def _streams(text: str) -> int:
    from gpuprobe.measure.bandwidth import MAX_STREAMS

    value = _at_least_one(text)
    if value > MAX_STREAMS:
        raise argparse.ArgumentTypeError(f"at most {MAX_STREAMS}: {text}")
    return value


def _at_least_one(text: str) -> int:
    value = _positive_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    from gpuprobe import cleanup
    from gpuprobe.errors import UsageError

    args = build_parser().parse_command_line(argv)
    if threading_main():
        # SIGTERM ends serve with 0 from its first moment (serve() then installs its orderly
        # stop); the one-shot commands end with 143, as a process SIGTERM killed.
        cleanup.exit_on_signals(code=0 if args.func is _serve else 143)
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

    from gpuprobe.checks.registry import CHECKS, refuse_unknown_names, resolve, sections
    from gpuprobe.config import load_config
    from gpuprobe.errors import UsageError

    config = load_config(args.config, sections())
    refuse_unknown_names(config)
    if args.expect_gpus is not None:
        try:
            gpus = dataclasses.replace(config.gpus, expect=args.expect_gpus)
        except UsageError as exc:
            raise UsageError(f"--expect-gpus: {exc}") from None
        config = dataclasses.replace(config, gpus=gpus)
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


def _host(args: argparse.Namespace, config: Config | None = None) -> Host:
    """The node the command looks at: a snapshot replayed, or the live node under --root
    (with `config`: its pods from the API server when `kubernetes.enabled` says so)."""
    from gpuprobe.errors import UsageError
    from gpuprobe.host import check_root, live_host, snapshot_host

    snapshot = getattr(args, "snapshot", None)
    node_name = getattr(args, "node_name", None)
    if snapshot:
        if args.root != "/":
            raise UsageError("--snapshot and --root exclude each other")
        return snapshot_host(snapshot, node_name)
    check_root(args.root)
    pods = _pod_statuses(args, config) if config is not None else None
    return live_host(args.root, node_name, pods)


def _pod_statuses(args: argparse.Namespace, config: Config) -> PodStatuses | None:
    """The API server as the live source of the node's pods (None: no API access). Only
    `serve` and `check --publish` insist on access that does not work; a plain `check` (or
    `capture`) without a `--kubeconfig` reads the node's disk alone then."""
    from gpuprobe.errors import UsageError
    from gpuprobe.kube.pods import pod_statuses

    kubeconfig = getattr(args, "kubeconfig", None)
    try:
        return pod_statuses(config.kubernetes, kubeconfig)
    except UsageError as exc:
        if args.command == "serve" or getattr(args, "publish", False) or kubeconfig:
            raise
        if config.kubernetes.enabled is True:  # "true: no access is a usage error"
            raise UsageError(
                f"kubernetes.enabled is true and there is no access ({exc}): run in a pod, "
                "add --publish --kubeconfig FILE, or set kubernetes.enabled: auto"
            ) from None
        return None


def _check(args: argparse.Namespace) -> int:
    from gpuprobe.errors import UsageError
    from gpuprobe.pipeline import run_checks
    from gpuprobe.render import render_report
    from gpuprobe.report import Status, exit_status

    config, names = _prepare(args)
    if args.explain_policy:
        return _explain_policy(args, config)
    access = _kube_access(args.kubeconfig) if args.publish else None
    if args.kubeconfig and not args.publish:
        raise UsageError("--kubeconfig goes with --publish")
    # The pods check alone reads the API server: no client for a run without it.
    host = _host(args, config if "pods" in names else None)
    report = run_checks(host, config, names)
    if args.json:
        sys.stdout.write(report.to_json() + "\n")
    else:
        text = render_report(
            report,
            colour=_colour(),
            width=_terminal_width(),
            replayed=host.is_snapshot,
            captured_at=host.captured_at,
            verbose=args.verbose,
        )
        sys.stdout.write(text)
    sys.stdout.flush()
    status = exit_status(report.status)
    if access is not None:
        from gpuprobe.kube.api import KubeError
        from gpuprobe.kube.once import publish_once

        try:
            publish_once(report, config.kubernetes, access)
        except KubeError as exc:
            print(f"gpuprobe: publishing to Kubernetes failed: {exc}", file=sys.stderr)
            return status or exit_status(Status.UNKNOWN)  # an OK run that Kubernetes did not hear
    return status


def _kube_access(kubeconfig: str | None) -> KubeAccess:
    """The Kubernetes API access of a one-shot command: --kubeconfig, else in-cluster."""
    from gpuprobe.errors import UsageError
    from gpuprobe.kube.api import Access, KubeApi, in_cluster_available

    if kubeconfig is None and not in_cluster_available():
        raise UsageError("no Kubernetes access: give --kubeconfig (no in-cluster credentials)")
    access = Access(kubeconfig=kubeconfig)
    KubeApi(access, timeout=1).close()  # a broken kubeconfig is a usage error before any work
    return access


def _colour() -> bool:
    """Whether to paint the statuses: only on a terminal that shows colour, and never with
    NO_COLOR set (no-color.org) or on TERM=dumb (a terminal that has no escape sequences)."""
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def _terminal_width() -> int | None:
    """The columns to wrap the report to: the terminal's, or None (no wrapping) when the
    output is not a terminal (a pipe or a file gets whole lines, for grep)."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def _explain_policy(args: argparse.Namespace, config: Config) -> int:
    import json

    from gpuprobe.checks.xid import explain_policy
    from gpuprobe.checks.xid.policy import render

    explained = explain_policy(_host(args), config)
    sys.stdout.write(json.dumps(explained, indent=1) + "\n" if args.json else render(explained))
    return 0


def _capture(args: argparse.Namespace) -> int:
    from gpuprobe.capture import capture
    from gpuprobe.checks.registry import active

    config, names = _prepare(args)
    if args.only is None:
        # Active checks load the node and are never replayed: a snapshot has no use for them.
        names = [name for name in names if name not in active(names)]
    pods = _pod_statuses(args, config)
    report = capture(args.directory, config, names, args.root, args.node_name, pods)
    print(
        f"gpuprobe: wrote the snapshot of {report.node} to {args.directory} "
        f"({len(report.checks)} checks, status {report.status.value})"
    )
    return 0


def _clear_xid(args: argparse.Namespace) -> int:
    from gpuprobe.checks.registry import sections
    from gpuprobe.checks.xid import clear
    from gpuprobe.config import load_config

    config = load_config(args.config, sections())
    cleared = clear(_host(args), config, args.gpu)
    where = f" on GPU {args.gpu}" if args.gpu is not None else ""
    print(f"gpuprobe: cleared {cleared} sticky finding{'s' if cleared != 1 else ''}{where}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import dataclasses

    # gRPC core writes its own (non-JSON) log lines; the agent logs what matters itself.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")

    from gpuprobe.serve.agent import ServeOptions
    from gpuprobe.serve.main import serve

    config, names = _prepare(args)
    if args.interval is not None:
        config = dataclasses.replace(
            config, serve=dataclasses.replace(config.serve, interval_seconds=args.interval)
        )
    host = _host(args, config)
    options = ServeOptions(
        grpc_listen=args.grpc_listen,
        metrics_listen=args.metrics_listen,
        token_file=args.token_file,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        allow_unauthenticated=args.allow_unauthenticated,
        tls_client_cert=args.tls_client_cert,
        tls_client_key=args.tls_client_key,
        kubeconfig=args.kubeconfig,
    )
    return serve(host, config, names, options)


def _audit(args: argparse.Namespace) -> int:
    # gRPC core writes its own log lines on failed connections; the report says what failed.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")

    from gpuprobe.audit.render import render_cluster
    from gpuprobe.audit.run import AuditOptions, audit
    from gpuprobe.audit.view.judge import Windows
    from gpuprobe.errors import UsageError
    from gpuprobe.kube.api import Access, in_cluster_available
    from gpuprobe.report import Status
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
        credentials=_credentials(args),
        deadline=args.deadline,
        concurrency=args.concurrency,
        price_per_gpu_hour=args.price_per_gpu_hour,
        kube=Access(kubeconfig=args.kubeconfig) if view else None,
        windows=Windows(pending=args.pending_window, idle=args.idle_window),
    )

    # In a pod with a service account the API is read as well (its errors shown, not fatal).
    wants_kube = args.kubeconfig or args.config or in_cluster_available()
    if view:  # the view's pass over the nodes keeps their signals: no second list
        from dataclasses import replace

        from gpuprobe.config import load_config

        options = replace(options, signals=load_config(args.config).kubernetes)
    read_kube = _kube_signals(args) if wants_kube and not view else None
    # The nodes' gpuprobe signals are read while the audit runs, not after it.
    read: list[tuple[list[NodeSignals], str | None]] = []
    reading = None
    if read_kube is not None:
        import threading

        reading = threading.Thread(target=lambda: read.append(read_kube()), daemon=True)
        reading.start()
    report = audit(options)
    if reading is not None:
        reading.join()
    kube = read[0] if read else None
    if report.view is not None:
        kube = (report.view.signals, None)
        if report.view.signals_error is not None:  # the view's deadline ran out first
            kube = _kube_signals(args)()
    if args.json:
        chunks = report.json_chunks()
        if kube is not None:
            signals = {"nodes": [n.to_dict() for n in kube[0]], "error": kube[1]}
            chunks = _with_key(chunks, "kubernetes", signals)
        sys.stdout.writelines(chunks)
    else:
        sys.stdout.write(render_cluster(report, colour=_colour(), width=_terminal_width()))
        if kube is not None:
            from gpuprobe.kube.once import render_signals

            found, error = kube
            sys.stdout.write(
                render_signals(found) if error is None else f"\nkubernetes  not read: {error}\n"
            )
    sys.stdout.flush()
    return report.exit_status(Status(args.fail_on) if args.fail_on else None)


def _with_key(chunks: Iterator[str], key: str, value: object) -> Iterator[str]:
    """A streamed JSON object (its last chunk ending in `}` and a newline) with one more key."""
    import json

    last = None
    for chunk in chunks:
        if last is not None:
            yield last
        last = chunk
    assert last is not None and last.endswith("}\n")
    yield f"{last[:-2]},\n {json.dumps(key)}: {json.dumps(value)}}}\n"


def _kube_signals(args: argparse.Namespace) -> Callable[[], tuple[list[NodeSignals], str | None]]:
    """What `audit` reads of Kubernetes: every GPU node's gpuprobe conditions and taints, or
    why they could not be read (the audit of the agents stands without them)."""
    from gpuprobe.config import load_config
    from gpuprobe.kube.api import KubeError
    from gpuprobe.kube.once import read_signals

    config = load_config(args.config).kubernetes
    access = _kube_access(args.kubeconfig)

    def read() -> tuple[list[NodeSignals], str | None]:
        """The nodes' signals, and None; or no nodes and the error."""
        try:
            return read_signals(access, config), None
        except KubeError as exc:
            return [], str(exc)

    return read


def _credentials(args: argparse.Namespace) -> Credentials:
    """The agents' token and TLS settings from the cluster flags."""
    from gpuprobe.client import Credentials

    return Credentials.load(
        token_file=args.token_file,
        ca_file=args.tls_ca,
        cert_file=args.tls_cert,
        key_file=args.tls_key,
        server_name=args.tls_server_name,
    )


def _mesh(args: argparse.Namespace) -> int:
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    import json

    from gpuprobe.mesh.render import render_mesh
    from gpuprobe.mesh.run import MeshOptions, mesh
    from gpuprobe.mesh.verdict import Thresholds
    from gpuprobe.report import exit_status

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
    result = mesh(args.targets, _credentials(args), options, args.deadline)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render_mesh(result, width=_terminal_width()))
    sys.stdout.flush()
    return exit_status(result.status)
