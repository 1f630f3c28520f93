"""HTTP to the cloud's instance metadata service: asked live, recorded for capture, replayed.

The providers announce a node's preemption and maintenance on a link-local HTTP service (AWS
and Azure at 169.254.169.254, GCE at metadata.google.internal). This module only carries
requests and answers; `gpuprobe.lifecycle` knows the providers' paths and bodies.

Every request is bounded by its timeout as a whole (connect, headers and body), its body read
up to `MAX_BODY_BYTES`, and a redirect is never followed: a metadata service does not redirect,
so one that does is not the metadata service, and its answer is handed back as it came (the
reader judges it). A snapshot keeps the answers in `lifecycle.json`:

    {"format": 1, "answers": [
      {"method": "PUT", "path": "/latest/api/token", "status": 200, "body": "<redacted>"},
      {"method": "GET", "path": "/latest/meta-data/spot/instance-action", "status": 404,
       "body": "...", "headers": {"Content-Type": "text/html"}},
      {"method": "GET", "path": "/computeMetadata/v1/instance/preempted", "error": "timed out"}]}

A replay answers each (method, path) with its recorded answers in order, the last repeating; an
IMDSv2 session token is never written down (its body is `<redacted>`).
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpuprobe.errors import SnapshotError
from gpuprobe.host.jsonfile import read_json

LIFECYCLE_FILE = "lifecycle.json"
LIFECYCLE_FORMAT = 1
# A notice is a few hundred bytes; Azure's document with many events a few KiB.
MAX_BODY_BYTES = 64 * 1024
# The answer headers a reader needs (GCE's proof it is the metadata server; where a redirect
# pointed; what kind of body came), kept in recordings too.
KEPT_HEADERS = ("Metadata-Flavor", "Content-Type", "Location")
# The IMDSv2 token path: its answer is a credential, never recorded.
TOKEN_PATH = "/latest/api/token"
REDACTED = "<redacted>"
ENTRY_KEYS = frozenset({"method", "path", "status", "body", "headers", "error"})


@dataclass(frozen=True)
class MetadataAnswer:
    """One answer of the metadata service, or why none came (`error`: timed out, refused)."""

    status: int | None = None
    body: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None

    def header(self, name: str) -> str | None:
        """An answer header, its name matched without regard to case."""
        wanted = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == wanted), None)


class MetadataService(Protocol):
    """Where metadata answers come from: the network, or a snapshot."""

    def ask(
        self, base: str, method: str, path: str, headers: Mapping[str, str], timeout_s: float
    ) -> MetadataAnswer:
        """`method path` (path with its query) of the service at `base` (`http://host[:port]`)
        with `headers`, within `timeout_s` seconds in all."""
        ...


class LiveMetadata:
    """The metadata service over the network (plain HTTP, as the providers serve it)."""

    def ask(
        self, base: str, method: str, path: str, headers: Mapping[str, str], timeout_s: float
    ) -> MetadataAnswer:
        """One request; never raises: a failure is an answer with its `error`."""
        parsed = urllib.parse.urlsplit(base)
        if parsed.scheme != "http" or not parsed.hostname:
            return MetadataAnswer(error=f"endpoint {base!r} is not an http://host[:port] URL")
        deadline = time.monotonic() + timeout_s
        try:
            port = parsed.port
        except ValueError:
            return MetadataAnswer(error=f"endpoint {base!r} has no valid port")
        connection = _BoundedConnection(parsed.hostname, port, deadline, timeout_s)
        try:
            connection.request(method, path, headers=dict(headers))
            response = connection.getresponse()
            body = _read_body(connection, response, deadline)
            kept = {k: v for k in KEPT_HEADERS if (v := response.getheader(k)) is not None}
            return MetadataAnswer(response.status, body, kept)
        except TimeoutError:
            return MetadataAnswer(error=f"no answer within {timeout_s:g} s")
        except (OSError, http.client.HTTPException) as exc:
            return MetadataAnswer(error=_reason(exc))
        finally:
            connection.close()


class _DeadlineSocket(socket.socket):
    """A socket whose every wait is bounded by what is left of one deadline: a server that
    drips its head a byte at a time (each byte within a per-read timeout) still ends at it."""

    deadline = 0.0

    def _bound(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        self.settimeout(left)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        self._bound()
        return super().recv(bufsize, flags)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self._bound()
        return super().recv_into(buffer, nbytes, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._bound()
        super().sendall(data, flags)


class _BoundedConnection(http.client.HTTPConnection):
    """HTTP over a `_DeadlineSocket`: connect, request, head and body within one deadline."""

    def __init__(self, host: str, port: int | None, deadline: float, timeout_s: float) -> None:
        super().__init__(host, port, timeout=timeout_s)
        self.deadline = deadline

    def connect(self) -> None:
        super().connect()
        plain = self.sock
        bounded = _DeadlineSocket(plain.family, plain.type, plain.proto, fileno=plain.detach())
        bounded.deadline = self.deadline
        self.sock = bounded


def _remaining(connection: http.client.HTTPConnection, deadline: float) -> None:
    """Bound the next socket wait by what is left of the request's time."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    if connection.sock is not None:
        connection.sock.settimeout(left)


def _read_body(
    connection: http.client.HTTPConnection, response: http.client.HTTPResponse, deadline: float
) -> str:
    """The body, up to MAX_BODY_BYTES, read within the deadline (a trickling server too)."""
    chunks: list[bytes] = []
    size = 0
    while size < MAX_BODY_BYTES:
        _remaining(connection, deadline)
        chunk = response.read1(MAX_BODY_BYTES - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return f"name not resolved ({exc.strerror})"
    if isinstance(exc, http.client.IncompleteRead):
        return "the answer ended early"
    if isinstance(exc, http.client.HTTPException):
        return f"not an HTTP answer ({type(exc).__name__})"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__


class RecordingMetadata:
    """The live service, each answer written down (for `gpuprobe capture`)."""

    def __init__(self, inner: MetadataService) -> None:
        self.inner = inner
        self.answers: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def ask(
        self, base: str, method: str, path: str, headers: Mapping[str, str], timeout_s: float
    ) -> MetadataAnswer:
        """Ask the live service and keep its answer (a session token's body redacted)."""
        answer = self.inner.ask(base, method, path, headers, timeout_s)
        with self._lock:
            self.answers.append(answer_to_json(method, path, answer))
        return answer

    def to_json(self) -> dict[str, Any]:
        """lifecycle.json's content."""
        with self._lock:
            return {"format": LIFECYCLE_FORMAT, "answers": list(self.answers)}


def answer_to_json(method: str, path: str, answer: MetadataAnswer) -> dict[str, Any]:
    """One recorded answer, as lifecycle.json holds it."""
    entry: dict[str, Any] = {"method": method, "path": path}
    if answer.error is not None:
        entry["error"] = answer.error
        return entry
    entry["status"] = answer.status
    entry["body"] = REDACTED if method == "PUT" and path == TOKEN_PATH else answer.body
    if answer.headers:
        entry["headers"] = dict(answer.headers)
    return entry


class ReplayedMetadata:
    """A snapshot's metadata service: each request's recorded answers, in order.

    `answers` None: the snapshot recorded none (no lifecycle.json), so every request is
    answered "not recorded", which the reader reports as it would an unreachable service.
    """

    def __init__(self, answers: list[dict[str, Any]] | None = None) -> None:
        self._by_request: dict[tuple[str, str], list[MetadataAnswer]] = {}
        for entry in answers or []:
            key = (entry["method"], entry["path"])
            self._by_request.setdefault(key, []).append(_answer(entry))
        self._served: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self.recorded = answers is not None

    def ask(
        self, base: str, method: str, path: str, headers: Mapping[str, str], timeout_s: float
    ) -> MetadataAnswer:
        """The next recorded answer to `method path` (the last one repeating)."""
        key = (method, path)
        with self._lock:
            found = self._by_request.get(key)
            if not found:
                where = "the snapshot" if self.recorded else "the snapshot (no lifecycle.json)"
                return MetadataAnswer(error=f"{method} {path} is not recorded in {where}")
            index = self._served.get(key, 0)
            self._served[key] = index + 1
            return found[min(index, len(found) - 1)]


def _answer(entry: Mapping[str, Any]) -> MetadataAnswer:
    if "error" in entry:
        return MetadataAnswer(error=str(entry["error"]))
    headers = entry.get("headers") or {}
    return MetadataAnswer(int(entry["status"]), str(entry.get("body", "")), dict(headers))


def answers_from_json(content: Any, where: str = LIFECYCLE_FILE) -> list[dict[str, Any]]:
    """The recorded answers of lifecycle.json content; SnapshotError on a bad shape."""
    if not isinstance(content, dict) or content.get("format") != LIFECYCLE_FORMAT:
        raise SnapshotError(f'{where}: expected {{"format": 1, "answers": [...]}}')
    answers = content.get("answers")
    if set(content) - {"format", "answers"}:
        raise SnapshotError(f"{where}: unknown keys {sorted(set(content) - {'format', 'answers'})}")
    if not isinstance(answers, list):
        raise SnapshotError(f'{where}: "answers" must be a list')
    for i, entry in enumerate(answers):
        _check_entry(entry, f"{where}: answers[{i}]")
    return answers


def _check_entry(entry: Any, where: str) -> None:
    if not isinstance(entry, dict):
        raise SnapshotError(f"{where}: not an object")
    unknown = set(entry) - ENTRY_KEYS
    if unknown:
        raise SnapshotError(f"{where}: unknown keys {sorted(unknown)}")
    if not isinstance(entry.get("method"), str) or not isinstance(entry.get("path"), str):
        raise SnapshotError(f'{where}: needs "method" and "path" strings')
    if "error" in entry:
        if not isinstance(entry["error"], str):
            raise SnapshotError(f'{where}: "error" must be a string')
        return
    status = entry.get("status")
    if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
        raise SnapshotError(f'{where}: "status" must be an HTTP status (100-599)')
    if not isinstance(entry.get("body", ""), str):
        raise SnapshotError(f'{where}: "body" must be a string')
    headers = entry.get("headers", {})
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise SnapshotError(f'{where}: "headers" must map names to strings')


def load_lifecycle(path: Path) -> ReplayedMetadata:
    """A snapshot's metadata service (answering "not recorded" without lifecycle.json)."""
    try:
        content = read_json(path)
    except FileNotFoundError:
        return ReplayedMetadata()
    return ReplayedMetadata(answers_from_json(content, str(path)))


def lifecycle_json_text(content: Mapping[str, Any]) -> str:
    """lifecycle.json as capture writes it."""
    return json.dumps(content, indent=1) + "\n"
