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
    from gpuprobe.client import Credentials
    from gpuprobe.config import Config
    from gpuprobe.host import Host

USAGE_ERROR = 64
MAX_TEST_SECONDS = 120  # what an agent's MeasureBandwidth accepts


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
    _add_storage_flag(check)
    check.set_defaults(func=_check)

    capture = commands.add_parser("capture", help="write a node snapshot of this host to DIR")
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
        "serve", help="the agent daemon: periodic checks, gRPC API, Prometheus /metrics"
    )
    _add_check_flags(serve)
    _add_storage_flag(serve)
    _add_serve_flags(serve)
    serve.set_defaults(func=_serve)

    audit = commands.add_parser(
        "audit", help="query many agents over gRPC and print a cluster report"
    )
    _add_audit_flags(audit)
    audit.set_defaults(func=_audit)

    mesh = commands.add_parser(
        "mesh", help="run bandwidth tests between agents and print the link matrix and verdicts"
    )
    _add_mesh_flags(mesh)
    mesh.set_defaults(func=_mesh)
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
    if not value > 0 or value == float("inf"):
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
        default="0.0.0.0:50051",
        help="gRPC address (port 0: any free port; the bound ports are logged)",
    )
    parser.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        default="0.0.0.0:9760",
        help="Prometheus /metrics and /healthz address",
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
        "--allow-unauthenticated",
        action="store_true",
        help="without a token or mTLS, let anyone call the guarded RPCs (else refused)",
    )


def _add_cluster_flags(parser: argparse.ArgumentParser, deadline: float) -> None:
    """The flags of commands that talk to many agents: who, and with which credentials."""
    parser.add_argument(
        "--targets",
        required=True,
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
    _add_cluster_flags(parser, deadline=5.0)
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
    from gpuprobe.serve.bandwidth import MAX_STREAMS

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

    args = build_parser().parse_args(argv)
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


def _host(args: argparse.Namespace) -> Host:
    """The node the command looks at: a snapshot replayed, or the live node under --root."""
    from gpuprobe.errors import UsageError
    from gpuprobe.host import live_host, snapshot_host

    snapshot = getattr(args, "snapshot", None)
    node_name = getattr(args, "node_name", None)
    if snapshot:
        if args.root != "/":
            raise UsageError("--snapshot and --root exclude each other")
        return snapshot_host(snapshot, node_name)
    if not os.path.isdir(args.root):
        raise UsageError(f"--root {args.root}: not a directory")
    return live_host(args.root, node_name)


def _check(args: argparse.Namespace) -> int:
    from gpuprobe.checks.runner import run_checks
    from gpuprobe.render import render_report
    from gpuprobe.report import exit_status

    config, names = _prepare(args)
    report = run_checks(_host(args), config, names)
    if args.json:
        sys.stdout.write(report.to_json() + "\n")
    else:
        colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        sys.stdout.write(render_report(report, colour=colour))
    sys.stdout.flush()
    return exit_status(report.status)


def _capture(args: argparse.Namespace) -> int:
    from gpuprobe.capture import capture
    from gpuprobe.checks.registry import ACTIVE

    config, names = _prepare(args)
    if args.only is None:
        # Active checks load the node and are never replayed: a snapshot has no use for them.
        names = [name for name in names if name not in ACTIVE]
    report = capture(args.directory, config, names, args.root, args.node_name)
    print(
        f"gpuprobe: wrote the snapshot of {report.node} to {args.directory} "
        f"({len(report.checks)} checks, status {report.status.value})"
    )
    return 0


def _clear_xid(args: argparse.Namespace) -> int:
    from gpuprobe.checks.xid import clear
    from gpuprobe.config import load_config

    config = load_config(args.config)
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
    host = _host(args)
    options = ServeOptions(
        grpc_listen=args.grpc_listen,
        metrics_listen=args.metrics_listen,
        token_file=args.token_file,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        allow_unauthenticated=args.allow_unauthenticated,
    )
    return serve(host, config, names, options)


def _audit(args: argparse.Namespace) -> int:
    # gRPC core writes its own log lines on failed connections; the report says what failed.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")

    from gpuprobe.audit.render import render_cluster
    from gpuprobe.audit.run import AuditOptions, audit
    from gpuprobe.report import Status
    from gpuprobe.targets import parse_targets

    options = AuditOptions(
        targets=parse_targets(args.targets),
        credentials=_credentials(args),
        deadline=args.deadline,
        concurrency=args.concurrency,
    )
    report = audit(options)
    if args.json:
        sys.stdout.writelines(report.json_chunks())
    else:
        colour = sys.stdout.isatty() and "NO_COLOR" not in os.environ
        sys.stdout.write(render_cluster(report, colour=colour))
    sys.stdout.flush()
    return report.exit_status(Status(args.fail_on) if args.fail_on else None)


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

    from gpuprobe.audit.fanout import fetch_all
    from gpuprobe.client import Client
    from gpuprobe.errors import UsageError
    from gpuprobe.mesh.render import render_mesh
    from gpuprobe.mesh.run import MeshOptions, identify, run_mesh
    from gpuprobe.mesh.verdict import Thresholds, unreachable_finding
    from gpuprobe.report import exit_status
    from gpuprobe.targets import discover, parse_targets

    if args.transport == "rdma" and not args.rdma_device:
        raise UsageError("--transport rdma needs --rdma-device")
    if args.seconds + args.warmup > MAX_TEST_SECONDS:
        raise UsageError(f"--seconds and --warmup: at most {MAX_TEST_SECONDS} s together")
    credentials = _credentials(args)
    found = discover(parse_targets(args.targets), args.deadline)
    peers, unreachable = identify(fetch_all(found.addresses, credentials, args.deadline))
    unreachable = [unreachable_finding(str(f.spec), f.reason) for f in found.failures] + unreachable
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
    result = run_mesh(peers, options, lambda target: Client(target, credentials=credentials))
    result.findings = unreachable + result.findings
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(render_mesh(result))
    sys.stdout.flush()
    return exit_status(result.status)
