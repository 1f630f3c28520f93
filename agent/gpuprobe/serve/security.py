"""Who may call the RPCs that cost something or change state, and the server's TLS.

A caller is authorised by the shared bearer token (`authorization: Bearer <token>`, read
from `--token-file`, e.g. a mounted Kubernetes Secret, and re-read when the file changes) or
by a client certificate the server verified (mTLS). Without a token and without mTLS these
RPCs are refused, unless the operator chose the open mode explicitly; a token file that does
not exist yet (an optional Secret not created) keeps them refused until it does.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

import grpc

from gpuprobe.credentials import TokenFile, check_ca, check_key_pair, read_pem


@dataclass(frozen=True)
class Verdict:
    """Whether a caller may go ahead, and if not, the gRPC status and reason to answer."""

    allowed: bool
    code: grpc.StatusCode = grpc.StatusCode.OK
    reason: str = ""


class Guard:
    """Decides whether a call to a guarded RPC may go ahead."""

    def __init__(self, token: TokenFile | None, mtls: bool, open_mode: bool) -> None:
        self.token = token
        self.mtls = mtls
        self.open_mode = open_mode

    def check(self, context: grpc.ServicerContext) -> Verdict:
        """The verdict for this call."""
        if self.mtls and context.peer_identities():
            return Verdict(True)  # the server verified the client's certificate
        presented = bearer(context.invocation_metadata())
        if self.token is not None:
            expected = self.token.token()
            if expected is None:
                return Verdict(
                    False,
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"this agent's token file {self.token.path} does not exist yet (the "
                    "Secret gpuprobe-token is not created): guarded RPCs stay closed until it is",
                )
            if presented is None:
                return Verdict(
                    False,
                    grpc.StatusCode.UNAUTHENTICATED,
                    "this RPC needs a bearer token (authorization: Bearer <token>)",
                )
            if not hmac.compare_digest(presented.encode(), expected.encode()):
                return Verdict(False, grpc.StatusCode.UNAUTHENTICATED, "wrong bearer token")
            return Verdict(True)
        if self.open_mode:
            return Verdict(True)
        return Verdict(
            False,
            grpc.StatusCode.PERMISSION_DENIED,
            "this agent has no token configured: start it with --token-file (or mTLS), "
            "or with --allow-unauthenticated to open this RPC to anyone",
        )


def bearer(metadata: Any) -> str | None:
    """The bearer token in the call's metadata, if any."""
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def caller(context: grpc.ServicerContext) -> str:
    """Who is calling, for rate limits: the client certificate's name, else the peer's
    address without its port."""
    identities = context.peer_identities()
    if identities:
        return "cert:" + b",".join(identities).decode(errors="replace")
    peer = context.peer() or "unknown"
    host, sep, port = peer.rpartition(":")
    return host if sep and port.isdigit() else peer


def server_credentials(cert: str, key: str, client_ca: str | None) -> grpc.ServerCredentials:
    """TLS credentials from PEM files; with `client_ca`, clients must present a certificate
    signed by it (mTLS). Raises UsageError naming the file that is wrong: unreadable, not what
    its flag says, or a key that is not the certificate's (gRPC would only say that it cannot
    listen)."""
    check_key_pair(cert, key, "--tls-cert", "--tls-key")
    if client_ca is not None:
        check_ca(client_ca, "--tls-client-ca")
    pair = (read_pem(key, "--tls-key"), read_pem(cert, "--tls-cert"))
    if client_ca is None:
        return grpc.ssl_server_credentials([pair])
    return grpc.ssl_server_credentials(
        [pair], root_certificates=read_pem(client_ca, "--tls-client-ca"), require_client_auth=True
    )
