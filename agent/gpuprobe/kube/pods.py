"""The live source of the node's pods: the API server, through the client library.

`pod_statuses()` gives the `host.pod_statuses` of a live host: None (the answer "absent")
when the Kubernetes feature is off, or `auto` without working credentials; else a source that
lists the pods bound to the node (`spec.nodeName`), in pages, at most `MAX_PODS` of them,
keeping only what `gpuprobe.host.podstatus` keeps. A failed call (403 without the RBAC grant,
a timeout, an unreachable server) is an answer naming its code, never an exception.
"""

from __future__ import annotations

from gpuprobe.config import KubernetesConfig
from gpuprobe.errors import UsageError
from gpuprobe.host.podstatus import (
    MAX_PODS,
    PodStatusAnswer,
    PodStatuses,
    failed,
    pod_from_api,
)
from gpuprobe.kube.api import Access, KubeApi, KubeError, wanted


class LivePodStatuses:
    """The API server's pods of one node."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def ask(self, node: str) -> PodStatusAnswer:
        """List the node's pods; a failed call is the answer's `error`."""
        try:
            pods, more = self.api.list_node_pods(node, MAX_PODS, pod_from_api)
        except KubeError as exc:
            return failed(exc.code, exc.message)
        return PodStatusAnswer(tuple(pods), truncated=more)


def pod_statuses(config: KubernetesConfig, kubeconfig: str | None) -> PodStatuses | None:
    """The API server as the source of the node's pods, when `kubernetes.enabled` says so
    (None: absent); raises UsageError for access that `enabled: true` or a `--kubeconfig`
    asked for and that does not work."""
    if not wanted(config, kubeconfig):
        return None
    try:
        api = KubeApi(Access(kubeconfig=kubeconfig), config.timeout_seconds)
    except UsageError:
        if config.enabled is True or kubeconfig is not None:
            raise
        return None  # auto: credentials that do not work leave the check as without them
    return LivePodStatuses(api)
