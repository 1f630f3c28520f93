"""Which agents to talk to: the `--targets` list of `audit` and `mesh`, and DNS discovery.

`T` is a comma-separated list of `host:port` (`[v6]:port` for an IPv6 address) and
`dns:NAME:PORT` entries; a `dns:` entry stands for every address NAME resolves to, which for a
Kubernetes headless Service is every ready agent pod:

    specs = parse_targets("dns:gpuprobe.gpuprobe.svc.cluster.local:50051,10.0.0.7:50051")
    found = discover(specs, timeout=5.0)
    found.addresses   # ["10.0.0.7:50051", "10.0.0.8:50051", ...] (each once, in order)
    found.failures    # [DnsFailure(spec, reason)] for names that resolved to nothing

Resolution goes through the system resolver (`getaddrinfo`), each name in its own thread and
bounded by `timeout`; the resolver can be swapped (`resolver=`) so tests never need DNS.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from gpuprobe.errors import UsageError

DNS_PREFIX = "dns:"

# Returns the IP addresses (text) that NAME has for a TCP connection to PORT; raises OSError
# (socket.gaierror) when it cannot.
Resolver = Callable[[str, int], Sequence[str]]


@dataclass(frozen=True)
class TargetSpec:
    """One entry of `--targets`: an agent's `host:port`, or a DNS name for many agents."""

    host: str
    port: int
    dns: bool = False

    @property
    def address(self) -> str:
        """`host:port` as gRPC dials it (`[v6]:port` for an IPv6 address)."""
        return join_host_port(self.host, self.port)

    def __str__(self) -> str:
        return f"{DNS_PREFIX}{self.host}:{self.port}" if self.dns else self.address


@dataclass(frozen=True)
class DnsFailure:
    """A `dns:` entry that gave no address: the name is unknown, or the lookup failed or
    timed out. For a headless Service, no ready agent pod."""

    spec: TargetSpec
    reason: str


@dataclass(frozen=True)
class Discovery:
    """What `--targets` came to: the agents' addresses, each once, and the names that gave
    none."""

    addresses: list[str] = field(default_factory=list)
    failures: list[DnsFailure] = field(default_factory=list)


# A targets file: at most this many bytes (a million agents' addresses fit in it).
MAX_TARGETS_FILE_BYTES = 64 * 1024 * 1024


def parse_targets(text: str) -> list[TargetSpec]:
    """The entries of a `--targets` value; raises UsageError for a malformed one. An entry
    `@FILE` stands for the entries in FILE (whitespace, commas or newlines between them, `#`
    to the end of a line a comment): an inventory of thousands of agents is longer than one
    command-line argument may be."""
    entries = []
    for entry in (e.strip() for e in text.split(",")):
        entries += _read_targets_file(entry[1:]) if entry.startswith("@") else [entry]
    if not any(entries):
        raise UsageError("--targets names no agent")
    return [parse_target(e) for e in entries if e]


def _read_targets_file(path: str) -> list[str]:
    """The entries a targets file lists; raises UsageError."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TARGETS_FILE_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"--targets @{path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_TARGETS_FILE_BYTES:
        raise UsageError(f"--targets @{path}: larger than {MAX_TARGETS_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8-sig")  # an editor's byte-order mark is no part of a target
    except UnicodeDecodeError:
        raise UsageError(f"--targets @{path}: not UTF-8 text") from None
    lines = (line.partition("#")[0] for line in text.splitlines())
    return [e for line in lines for e in line.replace(",", " ").split()]


def parse_target(entry: str) -> TargetSpec:
    """One `host:port`, `[v6]:port` or `dns:NAME:PORT`; raises UsageError."""
    if _URL.match(entry):
        raise UsageError(_not_a_url(entry))
    dns = entry.startswith(DNS_PREFIX)
    rest = entry.removeprefix(DNS_PREFIX) if dns else entry
    host, sep, port_text = rest.rpartition(":")
    if not sep or not host or not port_text:
        raise UsageError(f"--targets: {entry!r} is not HOST:PORT or dns:NAME:PORT")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UsageError(f"--targets: {entry!r}: the port must be 1-65535")
    if host.startswith("["):
        if not host.endswith("]") or not _is_ipv6(host[1:-1]):
            raise UsageError(f"--targets: {entry!r}: brackets hold an IPv6 address")
        host = host[1:-1]
    elif ":" in host:
        raise UsageError(f"--targets: {entry!r}: write an IPv6 address in brackets, [{host}]")
    if dns and _is_ip(host):
        raise UsageError(f"--targets: {entry!r}: dns: takes a name, not an address")
    if any(c.isspace() for c in host) or "/" in host:
        raise UsageError(f"--targets: {entry!r}: not a host name or address")
    return TargetSpec(host, int(port_text), dns)


# `http://host:port/...`: what a browser or curl would take, pasted where gRPC wants host:port.
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def _not_a_url(entry: str) -> str:
    """The usage error for a URL given as a target, with the host:port it may have meant."""
    try:
        parts = urllib.parse.urlsplit(entry)
        port = parts.port
    except ValueError:
        port = None
    if parts.hostname and port:
        meant = f": {join_host_port(parts.hostname, port)}"
    else:
        meant = " (the agent's gRPC port: 50051 in the DaemonSet)"
    return f"--targets: {entry!r} is a URL; a target is HOST:PORT, not a URL{meant}"


def discover(
    specs: Iterable[TargetSpec], timeout: float, resolver: Resolver | None = None
) -> Discovery:
    """Resolve the `dns:` entries (concurrently, each within `timeout` seconds) and list
    every agent address once, in the order given; DNS addresses sorted within their name."""
    specs = list(specs)
    resolve = resolver or system_resolver
    lookups = {s: _Lookup(s, resolve) for s in specs if s.dns}
    for lookup in lookups.values():
        lookup.start()
    deadline = time.monotonic() + timeout  # one deadline for all: the lookups run at once
    found = Discovery()
    seen: set[str] = set()
    for spec in specs:
        if not spec.dns:
            addresses = [spec.address]
        else:
            result = lookups[spec].result(deadline, timeout)
            if isinstance(result, DnsFailure):
                found.failures.append(result)
                continue
            addresses = result
        for address in addresses:
            if address not in seen:
                seen.add(address)
                found.addresses.append(address)
    return found


def system_resolver(name: str, port: int) -> list[str]:
    """The addresses the system resolver (getaddrinfo: /etc/hosts, DNS) gives NAME for TCP."""
    infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def join_host_port(host: str, port: int) -> str:
    """`host:port`, with an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Lookup:
    """One name's resolution in a daemon thread: a lookup stuck in the resolver costs its
    timeout, and never holds the process at exit."""

    def __init__(self, spec: TargetSpec, resolve: Resolver) -> None:
        self.spec = spec
        self._resolve = resolve
        self._done = threading.Event()
        self._result: list[str] | DnsFailure = DnsFailure(spec, "not resolved")
        self._thread = threading.Thread(target=self._run, name=f"dns {spec.host}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            addresses = _unique(self._resolve(self.spec.host, self.spec.port))
        except OSError as exc:
            why = exc.strerror or str(exc) or type(exc).__name__
            self._result = DnsFailure(self.spec, f"{self.spec.host} does not resolve: {why}")
        except ValueError as exc:  # a resolver that answered something other than addresses
            self._result = DnsFailure(self.spec, f"{self.spec.host}: {exc}")
        else:
            if addresses:
                self._result = [join_host_port(a, self.spec.port) for a in addresses]
            else:
                self._result = DnsFailure(self.spec, f"{self.spec.host} has no address")
        self._done.set()

    def result(self, deadline: float, timeout: float) -> list[str] | DnsFailure:
        """The addresses, or why there are none, waiting until the monotonic `deadline`."""
        if not self._done.wait(max(0.0, deadline - time.monotonic())):
            return DnsFailure(self.spec, f"resolving {self.spec.host} took over {timeout:g} s")
        return self._result


def _unique(addresses: Iterable[str]) -> list[str]:
    """Each address once (getaddrinfo may repeat them), sorted: IPv4 before IPv6, numerically,
    so the order does not depend on the resolver's rotation. Raises ValueError for text that
    is not an IP address."""
    by_ip = {ipaddress.ip_address(a): a for a in addresses}
    return [by_ip[ip] for ip in sorted(by_ip, key=lambda ip: (ip.version, ip))]


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _is_ipv6(host: str) -> bool:
    return _is_ip(host) and ":" in host
