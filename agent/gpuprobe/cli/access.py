"""The credentials a command talks to others with: the Kubernetes API's (`check --publish`,
`audit`) and the agents' (`audit`, `mesh`).

It imports the API and gRPC clients: the commands import it when they run, never to build the
parser (see `gpuprobe.cli`).
"""

from __future__ import annotations

import argparse

from gpuprobe.client import Credentials
from gpuprobe.errors import UsageError
from gpuprobe.kube.api import Access, KubeApi, in_cluster_available


def kube_access(kubeconfig: str | None) -> Access:
    """The Kubernetes API access of a one-shot command: --kubeconfig, else in-cluster."""
    if kubeconfig is None and not in_cluster_available():
        raise UsageError("no Kubernetes access: give --kubeconfig (no in-cluster credentials)")
    access = Access(kubeconfig=kubeconfig)
    KubeApi(access, timeout=1).close()  # a broken kubeconfig is a usage error before any work
    return access


def credentials(args: argparse.Namespace) -> Credentials:
    """The agents' token and TLS settings from the cluster flags."""
    return Credentials.load(
        token_file=args.token_file,
        ca_file=args.tls_ca,
        cert_file=args.tls_cert,
        key_file=args.tls_key,
        server_name=args.tls_server_name,
    )
