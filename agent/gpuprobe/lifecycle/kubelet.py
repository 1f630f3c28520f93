"""The kubelet's graceful node shutdown, from its configuration file (KubeletConfiguration).

With `shutdownGracePeriod` above 0 the kubelet holds the node's shutdown (a systemd inhibitor)
and ends pods in order: normal pods first, critical pods in the last
`shutdownGracePeriodCriticalPods`. Absent or `0s` (the default) it does not, and a preempted
node's pods are killed with it, their containers never told.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuprobe.containers.configfile import FileProblem, parse_yaml, read_host_file
from gpuprobe.host import Host

DEFAULT_CONFIG = "/var/lib/kubelet/config.yaml"
# A Go duration (time.ParseDuration), as the kubelet's config file writes metav1.Duration.
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


@dataclass(frozen=True)
class GracefulShutdown:
    """The kubelet's shutdown grace periods in seconds (0 when absent), or why they are not
    known: `absent` (no config file at the path) or `problem` (unreadable, unparseable)."""

    path: str
    grace_seconds: float = 0.0
    critical_seconds: float = 0.0
    absent: bool = False
    problem: str | None = None

    @property
    def enabled(self) -> bool:
        """Whether the kubelet shuts pods down gracefully when the node goes."""
        return self.grace_seconds > 0


def go_duration(text: str) -> float | None:
    """Seconds of a Go duration string (`30s`, `1m30s`, `0`), None when it is none."""
    text = text.strip()
    if text in ("0", "+0", "-0"):
        return 0.0
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if not body:
        return None
    total, at = 0.0, 0
    for match in _PART.finditer(body):
        if match.start() != at:
            return None
        total += float(match.group(1)) * _UNITS[match.group(2)]
        at = match.end()
    return sign * total if at == len(body) else None


def read_graceful_shutdown(host: Host, path: str = DEFAULT_CONFIG) -> GracefulShutdown:
    """The grace periods the kubelet's config file at `path` sets."""
    raw = read_host_file(host.fs, path)
    if raw is None:
        return GracefulShutdown(path, absent=True)
    if isinstance(raw, FileProblem):
        return GracefulShutdown(path, problem=f"{path} {raw.problem}")
    content = parse_yaml(path, raw)
    if isinstance(content, FileProblem):
        return GracefulShutdown(path, problem=f"{path} {content.problem}")
    if not isinstance(content, dict) or content.get("kind", "KubeletConfiguration") != (
        "KubeletConfiguration"
    ):
        return GracefulShutdown(path, problem=f"{path} is not a KubeletConfiguration")
    seconds = []
    for key in ("shutdownGracePeriod", "shutdownGracePeriodCriticalPods"):
        value = content.get(key, "0s")
        parsed = go_duration(value) if isinstance(value, str) else None
        if parsed is None or parsed < 0:
            return GracefulShutdown(path, problem=f"{path}: {key} {value!r} is not a duration")
        seconds.append(parsed)
    return GracefulShutdown(path, seconds[0], seconds[1])
