"""The thin wrapper over the Kubernetes client library (lightkube): the few calls gpuprobe makes.

lightkube is imported here, in kube/bounded.py (its transport) and in `kube.reader` (the
audit's read-only lister) only, and those only when the feature is on, so an agent without
Kubernetes access never loads it. Every request
ends within the timeout and reads a bounded answer (kube/bounded.py). Every failure of a call
is one `KubeError` naming the verb and an HTTP status (or `timeout`, `unreachable`,
`too_large`, `invalid`), which is what the `gpuprobe_kubernetes_errors_total{verb,code}`
counter and the backoff need; no answer, however odd, is a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from gpuprobe.config import KubernetesConfig, selector_terms
from gpuprobe.errors import UsageError
from gpuprobe.kube.kubeconfig import NotAKubeconfig, load_kubeconfig

T = TypeVar("T")
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Pods listed per request: a node's pods in one or two pages, each a bounded answer.
PAGE = 250


class KubeError(Exception):
    """A call to the API server failed: `verb` (get, list, patch, create) and `code` (the HTTP
    status, `timeout` or `unreachable`)."""

    def __init__(self, verb: str, code: str, message: str) -> None:
        super().__init__(f"{verb}: {code}: {message}")
        self.verb = verb
        self.code = code
        self.message = message


def in_cluster_available(account: Path = SERVICE_ACCOUNT) -> bool:
    """Whether this process has in-cluster credentials (a pod's service-account token and the
    API server's address), which `kubernetes.enabled: auto` turns the feature on for."""
    return (account / "token").is_file() and "KUBERNETES_SERVICE_HOST" in os.environ


def wanted(config: KubernetesConfig, kubeconfig: str | None) -> bool:
    """Whether the agent talks to Kubernetes: `enabled` true, or auto with a `--kubeconfig` or
    in-cluster credentials."""
    if config.enabled == "auto":
        return kubeconfig is not None or in_cluster_available()
    return config.enabled is True


def parse_selector(text: str) -> dict[str, Any]:
    """A label selector of equality and existence terms (`a=b,c!=d,e,!f`, each key once) as
    lightkube's selector; raises UsageError (a ConfigError, as when the config loads) on any
    other form."""
    from lightkube import operators

    pairs: dict[str, Any] = {}
    for term in selector_terms(text):
        if term.op == "!exists":
            pairs[term.key] = operators.not_exists()
        elif term.op == "exists":
            pairs[term.key] = None
        elif term.op == "!=":
            pairs[term.key] = operators.not_equal(term.value)
        else:
            pairs[term.key] = term.value
    return pairs


def selects(text: str, labels: Mapping[str, str]) -> bool:
    """Whether a selector of the form `parse_selector` reads picks an object with these
    labels (as the API server would); raises UsageError on any other form (a loaded config's
    selector never does: it was read when the config loaded)."""
    return all(term.picks(labels) for term in selector_terms(text))


@dataclass(frozen=True)
class Access:
    """Where the API server is and who we are: a kubeconfig file, or a pod's service account."""

    kubeconfig: str | None = None
    account: Path = SERVICE_ACCOUNT
    server: str | None = (
        None  # in-cluster: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
    )


class KubeApi:
    """The calls gpuprobe makes, on the node it runs on and its events, returning plain dicts."""

    def __init__(self, access: Access, timeout: float) -> None:
        self._client = make_client(access, timeout)

    def close(self) -> None:
        """Release the connection pool."""
        self._client.close()

    def get_node(self, name: str) -> dict[str, Any]:
        """The Node object."""
        from lightkube.resources.core_v1 import Node

        return self._call("get", lambda: _plain(self._client.get(Node, name)))

    def list_nodes(self, selector: str) -> list[dict[str, Any]]:
        """The nodes a label selector picks."""
        from lightkube.resources.core_v1 import Node

        labels = parse_selector(selector)
        return self._call(
            "list", lambda: [_plain(n) for n in self._client.list(Node, labels=labels)]
        )

    def list_node_pods(
        self, node: str, most: int, keep: Callable[[dict[str, Any]], T]
    ) -> tuple[list[T], bool]:
        """The pods bound to `node` in every namespace (a field selector on `spec.nodeName`,
        read in pages), each passed through `keep`; at most `most` of them, and whether more
        were left unread."""
        from lightkube import ALL_NS
        from lightkube.resources.core_v1 import Pod

        def listing() -> tuple[list[T], bool]:
            kept: list[T] = []
            pods = self._client.list(
                Pod, namespace=ALL_NS, fields={"spec.nodeName": node}, chunk_size=PAGE
            )
            for pod in pods:
                if len(kept) == most:
                    return kept, True
                kept.append(keep(_plain(pod)))
            return kept, False

        return self._call("list", listing)

    def patch_node_status(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A strategic merge patch of the node's status (conditions merge by `type`)."""
        from lightkube.resources.core_v1 import Node

        return self._call("patch", lambda: self._client.patch(Node.Status, name, patch).to_dict())

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of the node (lists replaced whole; a `metadata.resourceVersion`
        in the patch makes it conditional: 409 when the node changed since)."""
        from lightkube.resources.core_v1 import Node
        from lightkube.types import PatchType

        return self._call(
            "patch",
            lambda: _plain(self._client.patch(Node, name, patch, patch_type=PatchType.MERGE)),
        )

    def create_event(self, event: dict[str, Any]) -> None:
        """Create an events.k8s.io/v1 Event."""
        from lightkube.resources.events_v1 import Event

        namespace = event["metadata"]["namespace"]
        self._call(
            "create",
            lambda: self._client.create(cast(Event, Event.from_dict(event)), namespace=namespace),
        )

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """A JSON merge patch of an Event (its `series`)."""
        from lightkube.resources.events_v1 import Event
        from lightkube.types import PatchType

        self._call(
            "patch",
            lambda: self._client.patch(
                Event, name, patch, namespace=namespace, patch_type=PatchType.MERGE
            ),
        )

    def api_resources(self, group: str) -> dict[str, list[str]]:
        """Discovery: each version of `group` the server serves, with the resources it lists
        (`devicetaintrules`, ...); {} when the group is not served at all (404)."""
        try:
            document = self._call("get", lambda: self._json("GET", f"/apis/{group}"))
        except KubeError as exc:
            if exc.code == "404":
                return {}
            raise
        found: dict[str, list[str]] = {}
        for entry in document.get("versions") or []:
            version = str(entry.get("version") or "")
            if version:
                found[version] = self._resources(f"/apis/{group}/{version}")
        return found

    def _resources(self, path: str) -> list[str]:
        """The resources a group version's discovery document lists."""
        listed = self._call("get", lambda: self._json("GET", path))
        return [str(r.get("name")) for r in listed.get("resources") or []]

    def list_objects(
        self, path: str, labels: str | None = None, fields: str | None = None, most: int = 5000
    ) -> list[dict[str, Any]]:
        """The objects of a collection (`/apis/GROUP/VERSION/PLURAL`) the selectors pick, read
        in pages; at most `most` of them."""
        return self.each_object(path, _same, labels, fields, most)

    def each_object(
        self,
        path: str,
        keep: Callable[[dict[str, Any]], T],
        labels: str | None = None,
        fields: str | None = None,
        most: int = 5000,
    ) -> list[T]:
        """As `list_objects`, each object passed through `keep` as its page comes (a page is
        held at a time, never the whole list: the fleet's ResourceSlices are big)."""

        def listing() -> list[T]:
            params = {"limit": str(PAGE)}
            if labels:
                params["labelSelector"] = labels
            if fields:
                params["fieldSelector"] = fields
            kept: list[T] = []
            while len(kept) < most:
                answer = self._json("GET", path, params)
                kept += [keep(i) for i in answer.get("items") or [] if isinstance(i, dict)]
                more = (answer.get("metadata") or {}).get("continue")
                if not more:
                    break
                params["continue"] = str(more)
            return kept[:most]

        return self._call("list", listing)

    def create_object(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create an object in a collection (`/apis/GROUP/VERSION/PLURAL`)."""
        return self._call(
            "create", lambda: self._json("POST", path, {"fieldManager": "gpuprobe"}, body)
        )

    def delete_object(self, path: str) -> None:
        """Delete one object (`/apis/GROUP/VERSION/PLURAL/NAME`)."""
        self._call("delete", lambda: self._json("DELETE", path))

    def evict(self, namespace: str, pod: str) -> None:
        """Ask the Eviction API (policy/v1) to evict a pod: the API server honours its
        PodDisruptionBudget (429 while it allows no disruption). Never a delete."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction"
        self._call("create", lambda: self._json("POST", path, None, body))

    def _json(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None = None,
        body: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One request through lightkube's request layer (authentication, TLS, the bounded
        transport), its answer as a JSON object."""
        import json

        generic = self._client._client
        request = generic._client.build_request(method, path, params=dict(params or {}), json=body)
        response = generic.send(request)
        generic.raise_for_status(response)  # lightkube's ApiError, with the Status body
        found = json.loads(response.content) if response.content else {}
        if not isinstance(found, dict):
            raise ValueError(f"{path}: the answer is not a JSON object")
        return found

    def _call(self, verb: str, call: Callable[[], T]) -> T:
        from lightkube.core.exceptions import ConfigError

        from gpuprobe.kube.bounded import failure_code

        try:
            return call()
        except ConfigError as exc:  # the token file vanished (a pod's token is remounted)
            raise KubeError(verb, "401", str(exc)) from None
        except Exception as exc:
            code = failure_code(exc)
            if code is None:
                raise
            text = " ".join(f"{exc} {_causes(exc)}".split())[:300] or type(exc).__name__
            raise KubeError(verb, code, text) from None


def _same(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


def _causes(exc: Exception) -> str:
    """The causes an API Status gives (a disruption budget's "needs 2 healthy pods and has 2
    currently"), "" when none."""
    details = getattr(getattr(exc, "status", None), "details", None)
    causes = getattr(details, "causes", None) or []
    return "; ".join(str(getattr(c, "message", "") or "") for c in causes)


def make_client(access: Access, timeout: float) -> Any:
    """A lightkube client for `access` (a kubeconfig file, else the pod's service account),
    each request ending within `timeout` seconds and reading a bounded answer
    (kube/bounded.py); raises UsageError for access that cannot be read (a missing or
    malformed kubeconfig, no in-cluster credentials)."""
    import yaml
    from lightkube.config.kubeconfig import KubeConfig
    from lightkube.config.models import Cluster, User
    from lightkube.core.exceptions import ConfigError

    from gpuprobe.kube.bounded import bounded_client

    try:
        if access.kubeconfig is not None:
            config = load_kubeconfig(access.kubeconfig)
        else:
            if access.server is None and not in_cluster_available(access.account):
                raise UsageError(
                    f"kubernetes: no in-cluster credentials ({access.account}/token and "
                    "$KUBERNETES_SERVICE_HOST); give --kubeconfig"
                )
            token = access.account / "token"
            server = access.server or _in_cluster_server()
            config = KubeConfig.from_one(
                cluster=Cluster(server=server, certificate_auth=str(access.account / "ca.crt")),
                user=User(token_file=str(token)),
            )
        return bounded_client(config, timeout, field_manager="gpuprobe")
    except NotAKubeconfig as exc:
        raise UsageError(f"kubernetes access ({access.kubeconfig}): {exc}") from None
    except (ConfigError, OSError, KeyError, ValueError, TypeError, yaml.YAMLError) as exc:
        where = access.kubeconfig or str(access.account)
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise UsageError(f"kubernetes access ({where}): {text}") from None


def _plain(obj: Any) -> dict[str, Any]:
    """A lightkube object as the API's JSON object."""
    found: dict[str, Any] = obj.to_dict()
    return found


def _in_cluster_server() -> str:
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    if ":" in host:
        host = f"[{host}]"
    return f"https://{host}:{port}"
