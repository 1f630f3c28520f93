"""Why an agent gave no report: a failure kind for machines and one line for the operator.

gRPC folds most connection problems into `UNAVAILABLE` and words the rest in its own details
(`failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.7:50051: Failed to
connect to remote host: Connection refused`); this module names the cause an operator acts on:
nothing listens, no answer in time, wrong or missing credentials, a TLS mismatch, an agent
still starting, something that is not a gpuprobe agent.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

import grpc


class Failure(enum.StrEnum):
    """The kind of failure, as `audit --json` writes it in `failure`."""

    DNS = "dns"  # a dns: name gave no address
    REFUSED = "refused"  # nothing listens at the address (connection refused)
    TIMEOUT = "timeout"  # no answer within the deadline (down, filtered, or hung)
    UNAUTHORISED = "unauthorised"  # the agent (or a proxy before it) refused the credentials
    TLS = "tls"  # the TLS handshake failed, or one side spoke TLS and the other did not
    NOT_READY = "not_ready"  # the agent runs but has no report yet (first round of checks)
    NOT_AN_AGENT = "not_an_agent"  # something answered, but not the gpuprobe.v1 API
    UNAVAILABLE = "unavailable"  # the connection failed otherwise (reset, name lookup, ...)
    ERROR = "error"  # any other gRPC error, named by its status code


@dataclass(frozen=True)
class Unreachable:
    """A target that gave no report, with its failure kind and the reason in one line."""

    failure: Failure
    reason: str


# gRPC's details for a failed connection end in the last subchannel's error after its address.
_LAST_ERROR = re.compile(r"last error: [A-Z_]+: (?:ipv4:|ipv6:|unix:)?\S+?: (.*)$", re.DOTALL)
_TLS_WORDS = ("tls handshake", "ssl", "certificate", "hostname verification", "handshake")


def agents(count: int) -> str:
    """`1 agent`, `2 agents`."""
    return f"{count} agent{'' if count == 1 else 's'}"


def no_answer(timeout: float, late: tuple[float, int] | None = None) -> Unreachable:
    """A call that got no answer within `timeout` seconds; `late` (the seconds it had left,
    the agents asked at once) when it was asked late, after waiting for a free thread."""
    if late is not None:
        left, workers = late
        return Unreachable(
            Failure.TIMEOUT,
            f"no answer in the {left:.1f} s left of the {timeout:g} s deadline: it waited while "
            f"the {agents(workers)} asked at once did not answer (raise --concurrency)",
        )
    return Unreachable(
        Failure.TIMEOUT, f"no answer within {timeout:g} s (the agent is down, hung or filtered)"
    )


def explain(error: grpc.RpcError, timeout: float, tls: bool) -> Unreachable:
    """What a failed GetReport (or other) call means; `timeout` was the call's deadline and
    `tls` whether the caller spoke TLS."""
    code = _code(error)
    details = _details(error)
    cause = _last_error(details)
    lowered = details.lower()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return no_answer(timeout)
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return Unreachable(
            Failure.UNAUTHORISED, f"refused our credentials ({code.name}): {details or '-'}"
        )
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return Unreachable(
            Failure.NOT_AN_AGENT,
            f"answers gRPC but not gpuprobe.v1.NodeDiagnostics/GetReport: {details or '-'}",
        )
    if code != grpc.StatusCode.UNAVAILABLE:
        return Unreachable(Failure.ERROR, f"{code.name}: {details or '-'}")
    if "connection refused" in lowered:
        return Unreachable(Failure.REFUSED, "connection refused: nothing listens at the address")
    if "first round of checks" in lowered:
        return Unreachable(Failure.NOT_READY, f"the agent has no report yet: {details}")
    if "errors resolving" in lowered or "dns resolution failed" in lowered:
        return Unreachable(Failure.UNAVAILABLE, f"the host name does not resolve: {details}")
    if "wrong_version_number" in lowered:
        # Our ClientHello was answered by something that is not TLS: a plain-text gRPC
        # agent, or a plain HTTP/1 server.
        return Unreachable(
            Failure.TLS,
            "it does not speak TLS: call it without --tls-ca (a plain-text agent), or check "
            "the port",
        )
    if "failed parsing http/2" in lowered:
        # The first bytes back were not an HTTP/2 SETTINGS frame: "HTTP/1.1 400 ..." from a
        # web server (an agent's /metrics port), or a TLS server's alert.
        return Unreachable(
            Failure.NOT_AN_AGENT,
            "it does not speak gRPC (HTTP/2): an HTTP/1 server, such as an agent's /metrics "
            "port (the gRPC port is another), or one that wants TLS (--tls-ca)",
        )
    if "missing selected alpn" in lowered:
        # The TLS handshake held, but the server did not agree to HTTP/2 (ALPN h2).
        return Unreachable(
            Failure.NOT_AN_AGENT,
            "it speaks TLS but not gRPC (HTTP/2): an HTTPS server, not an agent's gRPC port",
        )
    if any(word in lowered for word in _TLS_WORDS):
        return Unreachable(Failure.TLS, f"TLS handshake failed: {cause}")
    if "socket closed" in lowered and "failed to connect" in lowered:
        # The agent closed the connection while it was being set up: a TLS agent called in
        # plaintext, or an mTLS agent that did not accept our client certificate.
        if tls:
            why = "it wants a client certificate its CA signed (--tls-cert, --tls-key)"
        else:
            why = "it serves TLS: call it with --tls-ca"
        return Unreachable(Failure.TLS, f"the agent closed the connection at setup: {why}")
    return Unreachable(Failure.UNAVAILABLE, f"UNAVAILABLE: {cause or '-'}")


def status_code(error: grpc.RpcError) -> grpc.StatusCode | None:
    """The gRPC status of a failed call, None for an error that carries none."""
    code = getattr(error, "code", None)
    value = code() if callable(code) else None
    return value if isinstance(value, grpc.StatusCode) else None


def _code(error: grpc.RpcError) -> grpc.StatusCode:
    return status_code(error) or grpc.StatusCode.UNKNOWN


def _details(error: grpc.RpcError) -> str:
    details = getattr(error, "details", None)
    value = details() if callable(details) else None
    return " ".join(str(value).split()) if value else ""


def _last_error(details: str) -> str:
    """The last connection error in gRPC's details, without the address gRPC prefixes."""
    match = _LAST_ERROR.search(details)
    return match.group(1).strip() if match else details
