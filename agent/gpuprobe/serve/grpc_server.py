"""The gRPC server: NodeDiagnostics, health and reflection on one port, with TLS and limits.

Every stream (server reflection, health Watch, WatchReports, any other) is bounded per kind
and per caller's address, and refused with RESOURCE_EXHAUSTED beyond (`StreamBounds`); the
worker pool is sized so that the bounded streams together leave `UNARY_WORKERS` threads for
GetReport, health checks and the other unary calls. Without it, 33 reflection streams held
open by an unauthenticated client took every worker and GetReport and health timed out.

NodeDiagnostics' method handlers are built here from the service descriptor rather than by the
generated `add_NodeDiagnosticsServicer_to_server`: grpcio answers a request whose bytes do not
parse with INTERNAL ("Exception deserializing request!") and gives the deserializer no way to
abort, so the deserializer hands a `Malformed` marker on and the method answers
INVALID_ARGUMENT, the caller's fault.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from gpuprobe.errors import UsageError
from gpuprobe.serve.logs import Throttle
from gpuprobe.serve.service import SERVICE_NAME, NodeDiagnosticsService
from gpuprobe.v1 import diagnostics_pb2 as pb

# Requests are small (a few check names): anything bigger is refused before it is parsed.
MAX_REQUEST_BYTES = 64 * 1024
MAX_METADATA_BYTES = 16 * 1024
# Calls in flight at most (streams included); past it new calls get RESOURCE_EXHAUSTED.
MAX_CONCURRENT_RPCS = 256

log = logging.getLogger("gpuprobe.serve")


@dataclass(frozen=True)
class StreamBound:
    """How many streams of one kind may be open at once, in all and from one address."""

    total: int
    per_peer: int


# Reflection (buf curl, grpcurl) needs a stream for a moment per command; a health Watch holds
# a worker for its life (grpc_health's blocking mode, below), so the pool has one per Watch.
REFLECTION = StreamBound(total=4, per_peer=2)
HEALTH_WATCH = StreamBound(total=32, per_peer=4)
WATCH_REPORTS_PER_PEER = 4
# Any other streaming method (none today): bounded too, never by accident unbounded.
OTHER_STREAMS = StreamBound(total=4, per_peer=2)
# Workers no stream can take: GetReport, health checks, RunChecks, the bandwidth calls.
UNARY_WORKERS = 16


def stream_bounds(max_watchers: int) -> dict[str, StreamBound]:
    """The bound of each kind of stream (the keys of `stream_kind`)."""
    return {
        "ServerReflectionInfo": REFLECTION,
        "health Watch": HEALTH_WATCH,
        "WatchReports": StreamBound(max_watchers, min(WATCH_REPORTS_PER_PEER, max_watchers)),
        "stream": OTHER_STREAMS,
    }


def pool_workers(max_watchers: int) -> int:
    """Worker threads for the bounded streams, each of which holds one (reflection, health
    Watch, WatchReports, any other), plus `UNARY_WORKERS` left for the unary calls."""
    return sum(bound.total for bound in stream_bounds(max_watchers).values()) + UNARY_WORKERS


def stream_kind(method: str) -> str:
    """The kind of a streaming method's stream, as `stream_bounds` keys them (both
    reflection versions are one kind)."""
    if method.endswith("/ServerReflectionInfo"):
        return "ServerReflectionInfo"
    if method == "/grpc.health.v1.Health/Watch":
        return "health Watch"
    if method == f"/{SERVICE_NAME}/WatchReports":
        return "WatchReports"
    return "stream"


class StreamBounds(grpc.ServerInterceptor):  # type: ignore[misc]
    """Refuses a stream with RESOURCE_EXHAUSTED once its kind has `total` streams open, or
    `per_peer` from the caller's address; a stream's slot is freed when its call ends."""

    def __init__(self, bounds: Mapping[str, StreamBound]) -> None:
        self.bounds = dict(bounds)
        self._lock = threading.Lock()
        self._open: Counter[str] = Counter()
        self._by_peer: Counter[tuple[str, str]] = Counter()
        self._throttle = Throttle()

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        """The method's handler, bounded when it streams."""
        handler = continuation(details)
        if handler is None or not (handler.request_streaming or handler.response_streaming):
            return handler
        kind = stream_kind(details.method)
        admit = lambda context: self._admit(kind, context)  # noqa: E731
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _bounded(handler.unary_stream, admit),
                handler.request_deserializer,
                handler.response_serializer,
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                _bounded(handler.stream_stream, admit),
                handler.request_deserializer,
                handler.response_serializer,
            )
        return grpc.stream_unary_rpc_method_handler(
            _bounded(handler.stream_unary, admit),
            handler.request_deserializer,
            handler.response_serializer,
        )

    def open_streams(self, kind: str) -> int:
        """Streams of `kind` open now."""
        with self._lock:
            return self._open[kind]

    def _admit(self, kind: str, context: Any) -> None:
        """Take a slot for this stream (freed when its call ends), or abort it."""
        bound = self.bounds.get(kind, OTHER_STREAMS)
        peer = peer_host(context.peer())
        with self._lock:
            if self._open[kind] >= bound.total:
                refusal = f"too many {kind} streams open (at most {bound.total}); try again later"
            elif self._by_peer[(kind, peer)] >= bound.per_peer:
                refusal = (
                    f"too many {kind} streams from one caller (at most {bound.per_peer}); "
                    "close one first"
                )
            else:
                refusal = ""
                self._open[kind] += 1
                self._by_peer[(kind, peer)] += 1
        if refusal:
            held = self._throttle.allow(f"{kind} {peer}")
            if held is not None:
                log.warning(
                    "stream refused",
                    extra={"peer": peer, "kind": kind, "reason": refusal, "held_back": held},
                )
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
        released = threading.Event()

        def release() -> None:
            if released.is_set():
                return
            released.set()
            with self._lock:
                self._open[kind] -= 1
                self._by_peer[(kind, peer)] -= 1
                if self._by_peer[(kind, peer)] <= 0:
                    del self._by_peer[(kind, peer)]

        if not context.add_callback(release):  # the call already ended
            release()


def _bounded(behavior: Callable[..., Any], admit: Callable[[Any], None]) -> Callable[..., Any]:
    def bounded(request: Any, context: Any, *more: Any) -> Any:
        """The stream's behavior, once it has a slot."""
        admit(context)
        return behavior(request, context, *more)

    # grpc_health marks its Watch as blocking or not (and on which pool): keep the mark.
    for attribute in ("experimental_non_blocking", "experimental_thread_pool"):
        if hasattr(behavior, attribute):
            setattr(bounded, attribute, getattr(behavior, attribute))
    return bounded


def peer_host(peer: str | None) -> str:
    """The address part of gRPC's peer string (`ipv4:10.0.0.5:41234`, `ipv6:[::1]:5`)."""
    text = peer or "unknown"
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return text
    return host.removeprefix("ipv4:").removeprefix("ipv6:").strip("[]")


def build(
    service: NodeDiagnosticsService,
    listen: str,
    credentials: grpc.ServerCredentials | None,
    max_watchers: int,
) -> tuple[grpc.Server, int, health.HealthServicer, StreamBounds]:
    """The server with every service added and its port bound (not started yet), and the
    bounds on its streams."""
    bounds = StreamBounds(stream_bounds(max_watchers))
    server = grpc.server(
        futures.ThreadPoolExecutor(
            max_workers=pool_workers(max_watchers), thread_name_prefix="grpc"
        ),
        interceptors=[bounds],
        options=[
            ("grpc.so_reuseport", 0),  # a second agent on the same port must fail, not share
            ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
            ("grpc.max_metadata_size", MAX_METADATA_BYTES),
        ],
        maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS,
    )
    handlers = method_handlers(service)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)
    # Blocking mode: each Watch is a generator a worker drains, and `set` only queues the new
    # status for it. In the non-blocking mode `set` sends to every Watch while holding the
    # servicer's lock and waits for gRPC to take each send, while a Watch that closes takes
    # the same lock in the thread that would complete the send: status changes racing
    # closing Watch streams froze the whole server within seconds (tests/serve).
    checker = health.HealthServicer(experimental_non_blocking=False)
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    # The agent process is alive; the API is SERVING once the first report exists.
    checker.set("", health_pb2.HealthCheckResponse.SERVING)
    checker.set(SERVICE_NAME, health_pb2.HealthCheckResponse.NOT_SERVING)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    target = grpc_target(listen)
    try:
        if credentials is None:
            port = server.add_insecure_port(target)
        else:
            port = server.add_secure_port(target, credentials)
    except RuntimeError:
        port = 0
    if not port:
        raise UsageError(f"--grpc-listen {listen}: cannot listen ({bind_error(listen)})")
    return server, port, checker, bounds


def bind_error(listen: str) -> str:
    """Why HOST:PORT cannot be bound, in the system's words (gRPC's own error says little)."""
    host, port = split_host_port(listen)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host or "0.0.0.0", port))
    except OSError as exc:
        return exc.strerror or str(exc)
    return "gRPC refused the address"


def grpc_target(listen: str) -> str:
    """HOST:PORT as gRPC binds it (an empty host is every IPv4 address)."""
    host, port = split_host_port(listen)
    host = host or "0.0.0.0"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def split_host_port(listen: str) -> tuple[str, int]:
    """HOST:PORT or [V6]:PORT as (host, port); raises UsageError."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"{listen!r} is not HOST:PORT")
    return host.removeprefix("[").removesuffix("]"), int(port)


class Malformed:
    """A request whose bytes did not parse as its message; its method answers INVALID_ARGUMENT."""

    def __init__(self, error: str) -> None:
        self.error = error


def method_handlers(service: NodeDiagnosticsService) -> dict[str, grpc.RpcMethodHandler]:
    """NodeDiagnostics' handlers, one per method of the proto's service, each refusing a
    malformed request with INVALID_ARGUMENT before the servicer sees it."""
    handlers = {}
    for method in pb.DESCRIPTOR.services_by_name["NodeDiagnostics"].methods:
        request, response = (
            getattr(pb, method.input_type.name),
            getattr(pb, method.output_type.name),
        )
        factory = (
            grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = factory(
            _refusing_malformed(getattr(service, method.name), method.name),
            request_deserializer=_tolerant(request.FromString),
            response_serializer=response.SerializeToString,
        )
    return handlers


def _tolerant(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        """The parsed request, or `Malformed` with protobuf's reason."""
        try:
            return parse(data)
        except Exception as exc:  # DecodeError: corrupt wire format, bad UTF-8, ...
            return Malformed(str(exc))

    return deserialize


def _refusing_malformed(
    behavior: Callable[[Any, Any], Any], name: str
) -> Callable[[Any, Any], Any]:
    def handle(request: Any, context: Any) -> Any:
        """The servicer's answer; INVALID_ARGUMENT for a request that did not parse."""
        if isinstance(request, Malformed):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"malformed {name} request: {request.error}"
            )
        return behavior(request, context)

    return handle
