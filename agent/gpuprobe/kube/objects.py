"""Objects a command creates in one namespace and removes again, their pods' logs, and the nodes
they may run on: the verbs of `gpuprobe mesh --transport nccl` (docs/mesh.md), beside the node
agent's (kube/api.py) and the audit's read-only ones (kube/reader.py).

Requests go through lightkube's request layer (authentication from the kubeconfig or the pod's
service account, the bounded transport of kube/bounded.py) and answers are read as plain JSON,
so one client serves built-in kinds and custom resources (an MPIJob) alike. Creates ask for
strict field validation: a field the server does not know is an error, never silently
dropped. Every failure is one `KubeError` naming the verb and the HTTP status (or `timeout`,
`unreachable`, `too_large`, `invalid`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from gpuprobe.kube.api import Access, KubeError, make_client
from gpuprobe.kube.reader import Kind

T = TypeVar("T")
NODES = Kind("", "v1", "nodes", "Node", namespaced=False)
PODS = Kind("", "v1", "pods", "Pod", namespaced=True)
EVENTS = Kind("", "v1", "events", "Event", namespaced=True)
SERVICES = Kind("", "v1", "services", "Service", namespaced=True)
CONFIG_MAPS = Kind("", "v1", "configmaps", "ConfigMap", namespaced=True)
JOBS = Kind("batch", "v1", "jobs", "Job", namespaced=True)
# The MPI Operator's v2 API (kubeflow/mpi-operator, manifests/base/kubeflow.org_mpijobs.yaml).
MPI_JOBS = Kind("kubeflow.org", "v2beta1", "mpijobs", "MPIJob", namespaced=True)
PAGE = 500


class ObjectApi:
    """Create, read and delete objects in `namespace`; read nodes and pods' logs."""

    def __init__(self, access: Access, namespace: str, timeout: float) -> None:
        self.namespace = namespace
        self._client = make_client(access, timeout)

    def close(self) -> None:
        """Release the connection pool."""
        self._client.close()

    def served(self, group: str, version: str) -> list[str]:
        """Discovery: the resources the server serves in `group/version` (none when the group
        or version is not served: a 404)."""
        try:
            found = self._send("get", "GET", f"/apis/{group}/{version}")
        except KubeError as exc:
            if exc.code == "404":
                return []
            raise
        return [str(r.get("name", "")) for r in found.get("resources") or []]

    def create(self, kind: Kind, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create `obj` in the namespace; the object as the server stored it."""
        params = {"fieldValidation": "Strict"}
        return self._send("create", "POST", self._path(kind), params, body=obj)

    def get(self, kind: Kind, name: str) -> dict[str, Any]:
        """One object of the namespace (or a node) by name."""
        return self._send("get", "GET", f"{self._path(kind)}/{name}")

    def list(
        self, kind: Kind, labels: str | None = None, fields: str | None = None
    ) -> list[dict[str, Any]]:
        """The objects of the namespace (every node, for nodes) the selectors pick, read a
        page at a time."""
        params = {"limit": str(PAGE)}
        if labels:
            params["labelSelector"] = labels
        if fields:
            params["fieldSelector"] = fields
        found: list[dict[str, Any]] = []
        while True:
            page = self._send("list", "GET", self._path(kind), params)
            found += page.get("items") or []
            more = (page.get("metadata") or {}).get("continue")
            if not more:
                return found
            params["continue"] = str(more)

    def delete(self, kind: Kind, name: str, propagation: str = "Background") -> bool:
        """Delete an object and, by `propagation`, what it owns (a Job's pods: the API's own
        default for Jobs orphans them); False when it was already gone."""
        options = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        try:
            self._send("delete", "DELETE", f"{self._path(kind)}/{name}", body=options)
        except KubeError as exc:
            if exc.code == "404":
                return False
            raise
        return True

    def log(self, pod: str, container: str, tail_lines: int) -> str:
        """The last `tail_lines` lines of a container's log (stdout and stderr as the kubelet
        keeps them)."""
        params = {"container": container, "tailLines": str(tail_lines)}
        path = f"{self._path(PODS)}/{pod}/log"
        return self._call("get", lambda: self._request("GET", path, params, text=True))

    def _path(self, kind: Kind) -> str:
        base = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
        where = f"{base}/namespaces/{self.namespace}" if kind.namespaced else base
        return f"{where}/{kind.plural}"

    def _send(
        self,
        verb: str,
        method: str,
        path: str,
        params: Mapping[str, str] | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        def call() -> dict[str, Any]:
            text = self._request(method, path, params or {}, body=body)
            found = json.loads(text)
            if not isinstance(found, dict):
                raise KubeError(verb, "invalid", f"{path}: the answer is not a JSON object")
            return found

        return self._call(verb, call)

    def _request(
        self,
        method: str,
        path: str,
        params: Mapping[str, str],
        body: Mapping[str, Any] | None = None,
        text: bool = False,
    ) -> str:
        generic = self._client._client  # lightkube's request layer: auth, base URL, TLS
        headers = {"Accept": "text/plain" if text else "application/json"}
        content = None
        if body is not None:
            content = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = generic._client.build_request(
            method, path, params=dict(params), content=content, headers=headers
        )
        response = generic.send(request)
        generic.raise_for_status(response)  # lightkube's ApiError, with the Status body
        return str(response.content.decode("utf-8", errors="replace"))

    def _call(self, verb: str, call: Callable[[], T]) -> T:
        from lightkube import ApiError
        from lightkube.core.exceptions import ConfigError

        from gpuprobe.kube.bounded import failure_code

        try:
            return call()
        except KubeError:
            raise
        except ApiError as exc:
            status = str(exc.status.code or exc.response.status_code)
            raise KubeError(verb, status, str(exc.status.message or exc)) from None
        except ConfigError as exc:
            raise KubeError(verb, "401", str(exc)) from None
        except Exception as exc:
            code = failure_code(exc) or ("invalid" if isinstance(exc, ValueError) else None)
            if code is None:
                raise
            raise KubeError(verb, code, " ".join(str(exc).split()) or type(exc).__name__) from None
