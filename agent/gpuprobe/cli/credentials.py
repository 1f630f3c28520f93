"""The credentials the cluster commands (`audit`, `mesh`) call the agents with.

It imports the gRPC client: the commands import it when they run, never to build the parser
(see `gpuprobe.cli`).
"""

from __future__ import annotations

import argparse

from gpuprobe.client import Credentials


def credentials(args: argparse.Namespace) -> Credentials:
    """The agents' token and TLS settings from the cluster flags."""
    return Credentials.load(
        token_file=args.token_file,
        ca_file=args.tls_ca,
        cert_file=args.tls_cert,
        key_file=args.tls_key,
        server_name=args.tls_server_name,
    )
