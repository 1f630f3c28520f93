"""The three clouds' instance metadata services in the tests, on loopback, as strict as the
real ones about what the agent reads.

- AWS IMDSv2 (`ImdsStandIn`): `PUT /latest/api/token` needs
  `X-aws-ec2-metadata-token-ttl-seconds` (1-21600, else 400) and answers a token; every GET
  needs `X-aws-ec2-metadata-token` with a live token (401 without or with a wrong one: the
  instance requires IMDSv2); a request carrying `X-Forwarded-For` is refused (403), as IMDS
  refuses proxied token requests. `spot/instance-action` and
  `events/recommendations/rebalance` are 404 (IMDS's own HTML page) until a notice is set;
  `events/maintenance/scheduled` is `[]` until events are set. Other methods: 405.
- GCE (`GceStandIn`): every request needs `Metadata-Flavor: Google` (403 without it, the
  server's HTML), and a request with `X-Forwarded-For` is refused (403); every answer carries
  `Metadata-Flavor: Google`, `Content-Type: application/text`. `instance/preempted` answers
  `FALSE` / `TRUE`, `instance/maintenance-event` `NONE` / `MIGRATE_ON_HOST_MAINTENANCE` /
  `TERMINATE_ON_HOST_MAINTENANCE`.
- Azure (`AzureStandIn`): `GET /metadata/scheduledevents?api-version=2020-07-01` needs
  `Metadata: true` (400 `{"error": "Bad request. Required metadata header not specified"}`)
  and an `api-version` (400); answers `{"DocumentIncarnation": n, "Events": [...]}`, the
  incarnation rising with every change. `POST` acknowledges events (what the agent must never
  do: the tests assert no POST came). `/metadata/instance/compute/name` answers the VM's name.

Each records every request (method, path, headers) so a test can assert the protocol, and
can be told to misbehave (`fault`): `html` (a captive portal's page), `truncated` (JSON cut
short), `500`, `hang` (no answer until released), `drip` (a status line, then header bytes
one a second, never ending the head: a server that keeps a per-read timeout from firing),
`redirect` (302 to another loopback server that records whether anyone came).
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

IMDS_404 = """<?xml version="1.0" encoding="iso-8859-1"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"
\t"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">
 <head>
  <title>404 - Not Found</title>
 </head>
 <body>
  <h1>404 - Not Found</h1>
 </body>
</html>
"""
GCE_403 = (
    "<!DOCTYPE html>\n<html lang=en>\n  <meta charset=utf-8>\n  <title>Error 403 (Forbidden)!!1"
    "</title>\n  <p><b>403.</b> <ins>That\u2019s an error.</ins>\n  <p>Your client does not have "
    "permission to get URL <code>{path}</code> from this server. Missing Metadata-Flavor:Google "
    "header.  <ins>That\u2019s all we know.</ins>\n"
)
PORTAL = "<html><head><title>Hotel WiFi</title></head><body>Please log in</body></html>\n"
HANG_SECONDS = 30.0


@dataclass(frozen=True)
class Request:
    """One request a stand-in received."""

    method: str
    path: str
    headers: dict[str, str]
    at: float = field(default_factory=time.monotonic)  # when it came (monotonic)

    def header(self, name: str) -> str | None:
        """A request header, matched without regard to case."""
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)


Answer = tuple[int, dict[str, str], bytes]


class StandIn:
    """A loopback HTTP server that answers as one metadata service and records requests."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.fault: str | None = None
        self.release = threading.Event()
        self.elsewhere: StandIn | None = None  # where a redirect points
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                request = Request(self.command, self.path, dict(self.headers.items()))
                with owner._lock:
                    owner.requests.append(request)
                status, headers, body = owner.answer(request)
                if status == 0:  # hang: hold the connection, answer nothing
                    owner.release.wait(HANG_SECONDS)
                    return
                if status == -1:  # drip: a head that never ends, a byte a second
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Padding: ")
                    self.wfile.flush()
                    while not owner.release.wait(1.0):
                        try:
                            self.wfile.write(b"a")
                            self.wfile.flush()
                        except OSError:
                            return
                    return
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The base URL (what `lifecycle.endpoint` is set to)."""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> None:
        """Serve on a thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving; a held (hanging) request is let go."""
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def seen(self, method: str | None = None) -> list[Request]:
        """The requests received so far (of one method)."""
        with self._lock:
            return [r for r in self.requests if method is None or r.method == method]

    def answer(self, request: Request) -> Answer:
        """The answer to one request: the fault's, else the service's."""
        faulty = self.faulty(request)
        if faulty is not None:
            return faulty
        return self.serve(request)

    def faulty(self, request: Request) -> Answer | None:
        """The fault's answer, when one is set (and applies to this request)."""
        if self.fault is None:
            return None
        if self.fault == "html":
            return 200, {"Content-Type": "text/html"}, PORTAL.encode()
        if self.fault == "truncated":
            return 200, {"Content-Type": "application/json"}, b'{"action": "terminate", "ti'
        if self.fault == "500":
            return 500, {"Content-Type": "text/plain"}, b"Internal Server Error\n"
        if self.fault == "hang":
            return 0, {}, b""
        if self.fault == "drip":
            return -1, {}, b""
        if self.fault == "redirect":
            assert self.elsewhere is not None
            return 302, {"Location": f"{self.elsewhere.url}/elsewhere"}, b""
        raise AssertionError(f"unknown fault {self.fault}")

    def serve(self, request: Request) -> Answer:
        """The service's own answer (each stand-in its provider's)."""
        return 404, {}, b""


class ImdsStandIn(StandIn):
    """AWS's IMDSv2, with IMDSv1 off (`HttpTokens: required`)."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens: set[str] = set()
        self.spot: dict[str, str] | None = None  # {"action", "time"}
        self.rebalance: dict[str, str] | None = None  # {"noticeTime"}
        self.scheduled: list[dict[str, str]] = []

    def answer(self, request: Request) -> Answer:
        """Token requests are never faulted (the fault is in the notice endpoints)."""
        if request.method == "PUT":
            return self.serve(request)
        return super().answer(request)

    def serve(self, request: Request) -> Answer:
        """IMDSv2's answers."""
        if request.header("X-Forwarded-For") is not None:
            return 403, {"Content-Type": "text/plain"}, b"Forbidden\n"
        if request.method == "PUT" and request.path == "/latest/api/token":
            ttl = request.header("X-aws-ec2-metadata-token-ttl-seconds")
            if ttl is None or not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                return 400, {"Content-Type": "text/plain"}, b"Bad Request\n"
            token = secrets.token_urlsafe(42)
            self.tokens.add(token)
            headers = {"Content-Type": "text/plain", "X-aws-ec2-metadata-token-ttl-seconds": ttl}
            return 200, headers, token.encode()
        if request.method != "GET":
            return 405, {"Content-Type": "text/plain"}, b"Method Not Allowed\n"
        if request.header("X-aws-ec2-metadata-token") not in self.tokens:
            return 401, {"Content-Type": "text/plain"}, b"Unauthorized\n"
        json_type = {"Content-Type": "text/plain"}
        if request.path == "/latest/meta-data/spot/instance-action" and self.spot:
            return 200, json_type, json.dumps(self.spot).encode()
        if request.path == "/latest/meta-data/events/recommendations/rebalance" and self.rebalance:
            return 200, json_type, json.dumps(self.rebalance).encode()
        if request.path == "/latest/meta-data/events/maintenance/scheduled":
            return 200, json_type, json.dumps(self.scheduled, indent=2).encode()
        return 404, {"Content-Type": "text/html"}, IMDS_404.encode()


class GceStandIn(StandIn):
    """GCE's metadata server."""

    def __init__(self) -> None:
        super().__init__()
        self.preempted = "FALSE"
        self.maintenance = "NONE"
        self.flavor_in_answers = True  # False: a server that is not the metadata server

    def serve(self, request: Request) -> Answer:
        """The metadata server's answers."""
        headers = {"Content-Type": "application/text", "Server": "Metadata Server for VM"}
        if self.flavor_in_answers:
            headers["Metadata-Flavor"] = "Google"
        path = urllib.parse.urlsplit(request.path).path
        if request.header("Metadata-Flavor") != "Google" or request.header("X-Forwarded-For"):
            html = {**headers, "Content-Type": "text/html; charset=UTF-8"}
            return 403, html, GCE_403.format(path=path).encode()
        if request.method != "GET":
            return 405, headers, b""
        values = {
            "/computeMetadata/v1/instance/preempted": self.preempted,
            "/computeMetadata/v1/instance/maintenance-event": self.maintenance,
        }
        if path in values:
            return 200, headers, values[path].encode()
        return 404, {**headers, "Content-Type": "text/html; charset=UTF-8"}, b"Not Found\n"


class AzureStandIn(StandIn):
    """Azure's Instance Metadata Service, Scheduled Events."""

    def __init__(self, vm_name: str = "gpu-node-17") -> None:
        super().__init__()
        self.vm_name = vm_name
        self.incarnation = 1
        self.events: list[dict[str, Any]] = []
        self.acknowledged: list[Any] = []

    def set_events(self, events: list[dict[str, Any]]) -> None:
        """New events: a new document incarnation."""
        self.events = events
        self.incarnation += 1

    def serve(self, request: Request) -> Answer:
        """IMDS's answers."""
        json_type = {"Content-Type": "application/json; charset=utf-8"}
        if request.header("X-Forwarded-For") is not None:
            return 400, json_type, b'{"error": "Bad request. Request contains X-Forwarded-For"}'
        if request.header("Metadata") != "true":
            body = b'{"error": "Bad request. Required metadata header not specified"}'
            return 400, json_type, body
        split = urllib.parse.urlsplit(request.path)
        query = urllib.parse.parse_qs(split.query)
        if "api-version" not in query:
            body = b'{"error": "Bad request. api-version was not specified in the request"}'
            return 400, json_type, body
        if split.path == "/metadata/scheduledevents":
            if request.method == "POST":
                self.acknowledged.append(request)
                return 200, json_type, b""
            document = {"DocumentIncarnation": self.incarnation, "Events": self.events}
            return 200, json_type, json.dumps(document).encode()
        if split.path == "/metadata/instance/compute/name" and query.get("format") == ["text"]:
            return 200, {"Content-Type": "text/plain; charset=utf-8"}, self.vm_name.encode()
        return 404, json_type, b'{"error": "Not found"}'


@contextmanager
def running(kind: type[StandIn]) -> Iterator[Any]:
    """A started stand-in of `kind` with a second loopback server its redirects point to;
    both stopped on every way out."""
    service, elsewhere = kind(), StandIn()
    service.elsewhere = elsewhere
    service.start()
    elsewhere.start()
    try:
        yield service
    finally:
        service.stop()
        elsewhere.stop()
