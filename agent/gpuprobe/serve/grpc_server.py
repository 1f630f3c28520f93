"""The gRPC server: NodeDiagnostics, health and reflection on one port, with TLS and limits.

NodeDiagnostics' method handlers are built here from the service descriptor rather than by the
generated `add_NodeDiagnosticsServicer_to_server`: grpcio answers a request whose bytes do not
parse with INTERNAL ("Exception deserializing request!") and gives the deserializer no way to
abort, so the deserializer hands a `Malformed` marker on and the method answers
INVALID_ARGUMENT, the caller's fault.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from gpuprobe.errors import UsageError
from gpuprobe.serve.service import SERVICE_NAME, NodeDiagnosticsService
from gpuprobe.v1 import diagnostics_pb2 as pb

# Requests are small (a few check names): anything bigger is refused before it is parsed.
MAX_REQUEST_BYTES = 64 * 1024
MAX_METADATA_BYTES = 16 * 1024
# Calls in flight at most (streams included); past it new calls get RESOURCE_EXHAUSTED.
MAX_CONCURRENT_RPCS = 256


def build(
    service: NodeDiagnosticsService,
    listen: str,
    credentials: grpc.ServerCredentials | None,
    workers: int,
) -> tuple[grpc.Server, int, health.HealthServicer]:
    """The server with every service added and its port bound (not started yet)."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="grpc"),
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
    checker = health.HealthServicer(
        experimental_non_blocking=True,
        experimental_thread_pool=futures.ThreadPoolExecutor(max_workers=1),
    )
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
    return server, port, checker


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
