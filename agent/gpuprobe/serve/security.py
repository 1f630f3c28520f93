"""Who may call the RPCs that cost something or change state, and the server's TLS.

A caller is authorised by the shared bearer token (`authorization: Bearer <token>`, read
from `--token-file`, e.g. a mounted Kubernetes Secret, and re-read when the file changes) or
by a client certificate the server verified (mTLS). Without a token and without mTLS these
RPCs are refused, unless the operator chose the open mode explicitly.
"""

from __future__ import annotations

import hmac
import os
import threading
from dataclasses import dataclass
from typing import Any

import grpc

from gpuprobe.errors import UsageError

# A token file bigger than this is not a token (a wrong path, e.g. a whole kubeconfig).
MAX_TOKEN_BYTES = 4096


class TokenFile:
    """The bearer token in a file, re-read when the file changes (a rotated Secret)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._token = read_token(path)  # a bad file at start is a usage error
        self._stamp = self._stat()

    def token(self) -> str:
        """The current token; the last good one when the file became unreadable."""
        stamp = self._stat()
        if stamp is not None and stamp != self._stamp:
            with self._lock:
                try:
                    self._token = read_token(self.path)
                    self._stamp = stamp
                except UsageError:
                    pass  # a Secret mid-update: keep the last good token
        return self._token

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_ino)


def read_token(path: str) -> str:
    """The token in `path` (surrounding whitespace dropped); raises UsageError."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"--token-file {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_TOKEN_BYTES:
        raise UsageError(f"--token-file {path}: over {MAX_TOKEN_BYTES} bytes, not a token")
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise UsageError(f"--token-file {path}: not ASCII text") from None
    if not token or any(c.isspace() for c in token):
        raise UsageError(f"--token-file {path}: empty or holds whitespace inside the token")
    return token


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
            if presented is None:
                return Verdict(
                    False,
                    grpc.StatusCode.UNAUTHENTICATED,
                    "this RPC needs a bearer token (authorization: Bearer <token>)",
                )
            if not hmac.compare_digest(presented.encode(), self.token.token().encode()):
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
    signed by it (mTLS). Raises UsageError for an unreadable file."""
    pair = (read_pem(key, "--tls-key"), read_pem(cert, "--tls-cert"))
    if client_ca is None:
        return grpc.ssl_server_credentials([pair])
    return grpc.ssl_server_credentials(
        [pair], root_certificates=read_pem(client_ca, "--tls-client-ca"), require_client_auth=True
    )


def read_pem(path: str, flag: str) -> bytes:
    """A PEM file's bytes, for the TLS flag `flag`; raises UsageError naming it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN" not in data:
        raise UsageError(f"{flag} {path}: not a PEM file")
    return data
