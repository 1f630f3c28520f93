"""The audit's read-only view of the API server: discovery, and lists read a page at a time.

Everything here reads (get and list); nothing writes. Every request of one reader shares one
deadline: a page asks with what is left of it as its timeout, and none starts once it has
passed, so a slow or huge cluster costs the deadline, never more. Lists come as plain dicts,
one page (`limit`) at a time, so a caller that digests each object as it comes holds one page,
never the whole list.

lightkube builds the requests (paths, selectors, authentication from the kubeconfig or the
service account) and turns error answers into `ApiError`; the answers are decoded here as
plain JSON, which is all the audit reads of them and several times cheaper than models.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from gpuprobe.kube.api import Access, KubeError, make_client

T = TypeVar("T")
# Objects per page: big enough that 5,000 nodes take 10 requests, small enough that a page
# of pods (tens of kilobytes each at worst) stays a few megabytes.
PAGE = 500
# Objects one list may hold, all its pages together: 20 times the nodes Kubernetes supports
# (5,000), so that a server that ignores `limit` or hands out `continue` tokens forever costs
# a bounded list, never the reader's memory.
MOST_ITEMS = 100_000


@dataclass(frozen=True)
class Kind:
    """A resource the audit reads: its API group ("" for core), version, plural and kind, and
    whether it lives in namespaces."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        """`group/version`, or the version alone for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self) -> str:
        """The collection's path across every namespace."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return f"{base}/{self.plural}"


class ClusterReader:
    """Reads the cluster within one deadline (`end`, a time.monotonic() value)."""

    def __init__(self, access: Access, end: float) -> None:
        self.end = end
        self._client = make_client(access, max(0.1, end - time.monotonic()))
        self.requests = 0

    def close(self) -> None:
        """Release the connection pool."""
        self._client.close()

    def left(self, verb: str) -> float:
        """Seconds left of the deadline; raises KubeError(verb, "timeout") when none are."""
        left = self.end - time.monotonic()
        if left <= 0:
            raise KubeError(verb, "timeout", "the audit's deadline passed before this request")
        return left

    def get_path(self, path: str) -> dict[str, Any]:
        """GET one path (discovery, /version) as JSON."""
        return self._call("get", lambda: self._get(path, {}))

    def each(
        self,
        kind: Kind,
        labels: str | None = None,
        fields: str | None = None,
        page: int = PAGE,
        most: int = MOST_ITEMS,
    ) -> Iterator[dict[str, Any]]:
        """Every object of `kind` in every namespace that the selectors pick, a page at a
        time. Raises KubeError (`list`, the status) on an error answer, a timeout or an
        unreachable server, also midway (the objects before it were yielded); `too_large`
        past `most` objects in all."""
        params: dict[str, str] = {"limit": str(page)}
        seen = 0
        if labels:
            params["labelSelector"] = labels
        if fields:
            params["fieldSelector"] = fields
        while True:
            answer = self._call("list", lambda: self._get(kind.path(), params))
            items, more = _page(kind, answer, page)
            seen += len(items)
            if seen > most:
                raise KubeError(
                    "list", "too_large", f"{kind.plural}: more than {most} objects: not read past"
                )
            yield from items
            if not more:
                return
            params["continue"] = more

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> dict[str, Any]:
        """One object by name."""
        base = kind.path().rsplit("/", 1)[0]
        where = f"{base}/namespaces/{namespace}" if namespace else base
        return self._call("get", lambda: self._get(f"{where}/{kind.plural}/{name}", {}))

    def _get(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        import httpx2

        generic = self._client._client  # lightkube's request layer: auth, base URL, TLS
        timeout = httpx2.Timeout(self.left("get"))
        request = generic._client.build_request("GET", path, params=dict(params), timeout=timeout)
        self.requests += 1
        response = generic.send(request)
        generic.raise_for_status(response)  # lightkube's ApiError, with the Status body
        found = json.loads(response.content)
        if not isinstance(found, dict):
            raise KubeError("get", "invalid", f"{path}: the answer is not a JSON object")
        return found

    def _call(self, verb: str, call: Callable[[], T]) -> T:
        from lightkube import ApiError
        from lightkube.core.exceptions import ConfigError

        from gpuprobe.kube.bounded import failure_code

        try:
            return call()
        except ApiError as exc:
            status = str(exc.status.code or exc.response.status_code)
            raise KubeError(verb, status, str(exc.status.message or exc)) from None
        except ConfigError as exc:
            raise KubeError(verb, "401", str(exc)) from None
        except Exception as exc:
            # The bounded transport's refusals (kube/bounded.py), timeouts, dead servers, and
            # a body that is no JSON: each the code the API's other callers count it under.
            code = failure_code(exc) or ("invalid" if isinstance(exc, ValueError) else None)
            if code is None:
                raise
            raise KubeError(verb, code, str(exc) or type(exc).__name__) from None


def _page(kind: Kind, answer: Mapping[str, Any], limit: int) -> tuple[list[Any], str]:
    """A list page's items and its `continue` token ("" on the last page); KubeError
    (`invalid`) for a page of the wrong shape, or with more items than the `limit` asked (a
    server that ignores it would have the view hold a whole list of any size)."""
    items = answer.get("items") or []
    meta = answer.get("metadata") or {}
    more = meta.get("continue") if isinstance(meta, Mapping) else None
    what = f"{kind.plural}: the list's"
    if not isinstance(items, list):
        raise KubeError("list", "invalid", f"{what} items are a {type(items).__name__}")
    if not isinstance(meta, Mapping) or not isinstance(more, str | None):
        raise KubeError("list", "invalid", f"{what} metadata is not an object with a token")
    if len(items) > limit:
        raise KubeError(
            "list",
            "invalid",
            f"{what} page holds {len(items)} items where at most {limit} were asked: not read",
        )
    return items, more or ""
