"""The Kubernetes API access of a one-shot command (`check --publish`, `audit`).

It imports the API client: the commands import it when they run, never to build the parser
(see `gpuprobe.cli`).
"""

from __future__ import annotations

from gpuprobe.errors import UsageError
from gpuprobe.kube.api import Access, KubeApi, in_cluster_available


def kube_access(kubeconfig: str | None) -> Access:
    """The access --kubeconfig gives, else the pod's in-cluster credentials; a usage error
    when there is neither or the kubeconfig is broken."""
    if kubeconfig is None and not in_cluster_available():
        raise UsageError("no Kubernetes access: give --kubeconfig (no in-cluster credentials)")
    access = Access(kubeconfig=kubeconfig)
    KubeApi(access, timeout=1).close()  # a broken kubeconfig is a usage error before any work
    return access
