"""A bounded transport for the Kubernetes client library (lightkube over httpx2): every request
ends within its deadline, and no answer is read past a size.

httpx's timeouts bound each network operation, not the request: an API server (or a proxy in
front of one) that sends a byte every few seconds holds a request, and the thread making it,
for as long as it likes. Here every connect, TLS handshake, write and read of one request gets
at most what is left of the request's deadline, so the request ends at its deadline whatever
the other side does. Answers are read up to `MAX_RESPONSE_BYTES` (a `Content-Length` past it
is refused before reading, a body that grows past it is abandoned) and uncompressed (the
request asks for `identity`), so the bound is on what the process holds. Answers the client
library cannot read are refused here with what they were (`BadAnswer`): a redirect (never
followed), an error without a JSON `Status`, a success that is not JSON (but plain text where
the request asked for it with `Accept: text/plain`: a pod's log).

`failure_code` names any exception of a call as the code `gpuprobe_kubernetes_errors_total`
counts (docs/kubernetes.md). Any lightkube user (the effects loop, the pods check, a cluster
reader) builds its client with `bounded_client` and classifies its failures with
`failure_code`.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import httpcore2
import httpx2

if TYPE_CHECKING:
    from lightkube import Client
    from lightkube.config.kubeconfig import KubeConfig, SingleConfig

# The largest answer read. A Node is tens of kB (the kubelet reports at most 50 images); a
# page of 250 pods a few MB with their managed fields.
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
JSON = "application/json"
TEXT = "text/plain"
# The codes failure_code gives beside an HTTP status.
TIMEOUT, UNREACHABLE, TOO_LARGE, INVALID = "timeout", "unreachable", "too_large", "invalid"

_local = threading.local()  # the deadline (time.monotonic) of the request this thread makes


class BadAnswer(httpx2.HTTPError):
    """An answer refused before the client library reads it: `code` is its HTTP status (a
    redirect, an error without a JSON Status), `too_large` or `invalid`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def _left(timeout: float | None, kind: type[Exception]) -> float:
    """The time an operation may take: its own timeout, cut to what the request has left."""
    deadline: float | None = getattr(_local, "deadline", None)
    if deadline is None:
        return timeout if timeout is not None else 60.0
    left = deadline - time.monotonic()
    if left <= 0:
        raise kind("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore2.NetworkStream):
    """A connection whose every operation is held to the deadline of the current request."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        """Read, within what the request has left."""
        return self.inner.read(max_bytes, _left(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        """Write, within what the request has left."""
        self.inner.write(buffer, _left(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        """Close the connection."""
        self.inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        """The TLS handshake, within what the request has left."""
        left = _left(timeout, httpcore2.ConnectTimeout)
        return _Stream(self.inner.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        """As the inner stream's (the socket, the TLS object)."""
        return self.inner.get_extra_info(info)


class _Backend(httpcore2.NetworkBackend):
    """Connections held to their request's deadline."""

    def __init__(self) -> None:
        self.inner = httpcore2.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        """Connect, within what the request has left."""
        left = _left(timeout, httpcore2.ConnectTimeout)
        return _Stream(self.inner.connect_tcp(host, port, left, local_address, socket_options))

    def sleep(self, seconds: float) -> None:
        """As the standard backend's."""
        self.inner.sleep(seconds)


class _Body(httpx2.SyncByteStream):
    """An answer's body, read up to the bound and within the request's deadline."""

    def __init__(self, inner: Iterable[bytes], response: Any, most: int, deadline: float) -> None:
        self.inner, self.response, self.most, self.deadline = inner, response, most, deadline

    def __iter__(self) -> Iterator[bytes]:
        """The body's chunks; BadAnswer(too_large) past the bound."""
        _local.deadline = self.deadline
        read = 0
        try:
            with _mapped():
                for chunk in self.inner:
                    read += len(chunk)
                    if read > self.most:
                        raise BadAnswer(
                            TOO_LARGE, f"answer larger than {self.most} bytes: abandoned"
                        )
                    yield chunk
        finally:
            _local.deadline = None

    def close(self) -> None:
        """Release (or drop) the connection."""
        self.response.close()


class BoundedTransport(httpx2.BaseTransport):
    """An httpx transport whose requests each end within `seconds` and read at most
    `most_bytes` of an answer (see the module's docstring)."""

    def __init__(
        self, ssl_context: ssl.SSLContext, seconds: float, most_bytes: int = MAX_RESPONSE_BYTES
    ) -> None:
        self.seconds = seconds
        self.most_bytes = most_bytes
        self._pool = httpcore2.ConnectionPool(
            ssl_context=ssl_context, network_backend=_Backend(), max_connections=4
        )

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send `request` and take its answer's head under the deadline; the body is read
        (by whoever reads the response) under the same deadline and the size bound."""
        assert isinstance(request.stream, httpx2.SyncByteStream)
        deadline = time.monotonic() + self.seconds
        headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"accept-encoding"]
        headers.append((b"Accept-Encoding", b"identity"))
        core = httpcore2.Request(
            method=request.method,
            url=httpcore2.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=headers,
            content=request.stream,
            extensions=request.extensions,
        )
        _local.deadline = deadline
        try:
            with _mapped():
                answer = self._pool.handle_request(core)
        finally:
            _local.deadline = None
        text = request.headers.get("accept", "") == TEXT  # a pod's log is plain text
        try:
            _refuse_unreadable(answer, self.most_bytes, text)
        except BadAnswer:
            answer.close()
            raise
        assert isinstance(answer.stream, Iterable)
        return httpx2.Response(
            status_code=answer.status,
            headers=answer.headers,
            stream=_Body(answer.stream, answer, self.most_bytes, deadline),
            extensions=answer.extensions,
        )

    def close(self) -> None:
        """Close the pooled connections."""
        self._pool.close()


def _refuse_unreadable(answer: httpcore2.Response, most: int, text: bool = False) -> None:
    """BadAnswer for an answer the client library would choke on, or that is too large; a
    plain-text success is read when `text` (the request asked for one)."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in answer.headers}
    status = answer.status
    media = headers.get("content-type", "").split(";")[0].strip().lower()
    if 300 <= status < 400:
        where = headers.get("location", "nowhere")
        raise BadAnswer(str(status), f"redirected to {where} (redirects are not followed)")
    if status >= 400 and media != JSON:
        raise BadAnswer(str(status), f"HTTP {status} without a Status ({media or 'no type'})")
    if status < 300 and media != JSON and not (text and media == TEXT):
        raise BadAnswer(INVALID, f"HTTP {status} answer is {media or 'untyped'}, not JSON")
    if headers.get("content-encoding", "identity").lower() != "identity":
        raise BadAnswer(INVALID, f"answer encoded {headers['content-encoding']} unasked")
    length = headers.get("content-length", "")
    if length.isdigit() and int(length) > most:
        raise BadAnswer(TOO_LARGE, f"answer of {length} bytes refused (at most {most})")


@contextmanager
def _mapped() -> Iterator[None]:
    """httpcore's exceptions as httpx's (what the client library and `failure_code` know)."""
    try:
        yield
    except httpx2.HTTPError:
        raise
    except httpcore2.TimeoutException as exc:
        raise httpx2.TimeoutException(str(exc) or type(exc).__name__) from exc
    except (
        httpcore2.NetworkError,
        httpcore2.ProtocolError,
        httpcore2.UnsupportedProtocol,
        httpcore2.ProxyError,
    ) as exc:
        raise httpx2.TransportError(str(exc) or type(exc).__name__) from exc


def transport_for(config: SingleConfig, seconds: float) -> BoundedTransport:
    """The bounded transport for a kubeconfig context: its server's CA (or the system's) and
    the user's client certificate, as lightkube would verify them."""
    from lightkube.config.client_adapter import verify_cluster

    assert config.user is not None, "kubeconfig context without a user"
    context = verify_cluster(config.cluster, config.user, config.abs_file, trust_env=False)
    return BoundedTransport(context, seconds)


def bounded_client(config: KubeConfig | SingleConfig, seconds: float, **kwargs: Any) -> Client:
    """A lightkube Client whose every request ends within `seconds` and reads at most
    `MAX_RESPONSE_BYTES`; raises lightkube's ConfigError for a kubeconfig it cannot use."""
    from lightkube import Client
    from lightkube.config.kubeconfig import KubeConfig
    from lightkube.core.exceptions import ConfigError

    single = config.get() if isinstance(config, KubeConfig) else config
    if single is None:
        raise ConfigError("the kubeconfig names no context to use")
    return Client(
        single,
        timeout=httpx2.Timeout(seconds),
        trust_env=False,
        transport=transport_for(single, seconds),
        **kwargs,
    )


def failure_code(exc: BaseException) -> str | None:
    """The code a failed call counts under (an HTTP status, `timeout`, `unreachable`,
    `too_large`, `invalid`), or None for an exception that is no failure of the API."""
    import msgspec
    from lightkube import ApiError

    if isinstance(exc, BadAnswer):
        return exc.code
    if isinstance(exc, ApiError):
        return str(exc.status.code or exc.response.status_code)
    if isinstance(exc, httpx2.HTTPStatusError):  # an error lightkube did not read as Status
        return str(exc.response.status_code)
    if isinstance(exc, httpx2.TimeoutException):
        return TIMEOUT
    if isinstance(exc, httpx2.HTTPError | OSError):
        return UNREACHABLE
    # An answer of the wrong shape (a list without `items`, a field of the wrong type) or
    # nested past what the decoder follows.
    if isinstance(
        exc,
        msgspec.MsgspecError
        | RecursionError
        | ValueError
        | LookupError
        | TypeError
        | AttributeError,
    ):
        return INVALID
    return None
