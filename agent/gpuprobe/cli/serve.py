"""`gpuprobe serve`: the agent daemon (periodic checks, the gRPC API, Prometheus `/metrics`,
and the effects on the cluster), run until SIGTERM (`gpuprobe.serve.main`)."""

from __future__ import annotations

import argparse
import dataclasses
import os

from gpuprobe.cli.flags import (
    Commands,
    add_check_flags,
    add_kubeconfig_flag,
    add_storage_flag,
    checks_help,
    positive_float,
)


def add_parser(commands: Commands) -> None:
    """`serve` and its flags, on the top-level parser's subcommands."""
    serve = commands.add_parser(
        "serve",
        help="the agent daemon: periodic checks, gRPC API, Prometheus /metrics",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.lazy_epilog = checks_help(exit_status=False)
    add_check_flags(serve)
    add_storage_flag(serve)
    serve.add_argument(
        "--grpc-listen",
        metavar="HOST:PORT",
        default="[::]:50051",
        help="gRPC address (port 0: any free port; the bound ports are logged); the default "
        "[::] takes IPv6 and IPv4 (IPv4 alone where the kernel has no IPv6)",
    )
    serve.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        default="[::]:9760",
        help="Prometheus /metrics, /healthz and /readyz address ([::]: IPv6 and IPv4)",
    )
    serve.add_argument(
        "--interval",
        type=positive_float,
        metavar="SECONDS",
        help="how often the checks run (default: serve.interval_seconds, 60)",
    )
    serve.add_argument(
        "--token-file",
        metavar="FILE",
        help="bearer token that guards RunChecks, ClearFindings and the bandwidth RPCs",
    )
    serve.add_argument("--tls-cert", metavar="FILE", help="serve gRPC over TLS: certificate")
    serve.add_argument("--tls-key", metavar="FILE", help="serve gRPC over TLS: private key")
    serve.add_argument(
        "--tls-client-ca",
        metavar="FILE",
        help="require client certificates signed by this CA (mTLS); they authorise too",
    )
    serve.add_argument(
        "--tls-client-cert",
        metavar="FILE",
        help="mTLS: the client certificate this agent presents to its peers in bandwidth "
        "tests (default: --tls-cert, which then needs the clientAuth key usage)",
    )
    serve.add_argument(
        "--tls-client-key", metavar="FILE", help="mTLS: the key of --tls-client-cert"
    )
    serve.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="without a token or mTLS, let anyone call the guarded RPCs (else refused)",
    )
    add_kubeconfig_flag(serve, "write node conditions, events and taints")
    serve.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM; exit status 0."""
    # gRPC core writes its own (non-JSON) log lines; the agent logs what matters itself.
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")

    # Loaded when the command runs, not to build the parser (see gpuprobe.cli); and after
    # GRPC_VERBOSITY is set, which gRPC core reads when it loads.
    from gpuprobe.cli.prepare import node_host, prepare
    from gpuprobe.serve.agent import ServeOptions
    from gpuprobe.serve.main import serve

    config, names = prepare(args)
    if args.interval is not None:
        config = dataclasses.replace(
            config, serve=dataclasses.replace(config.serve, interval_seconds=args.interval)
        )
    host = node_host(args, config)
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
