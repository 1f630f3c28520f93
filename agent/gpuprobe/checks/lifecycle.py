"""Check `lifecycle`: does the cloud announce this node's preemption, maintenance or a
rebalance, and will the kubelet shut its pods down gracefully when the node goes?

The provider comes from DMI (`lifecycle.provider: auto`) or the config; its metadata service
is asked with its documented protocol (`gpuprobe.lifecycle.notices`), and the kubelet's
`shutdownGracePeriod` read from its config file (`gpuprobe.lifecycle.kubelet`). A node on no
known cloud has nobody to announce anything: OK, and it says so. A metadata service that does
not answer as documented leaves the notices unknown (UNKNOWN, never "none").
"""

from __future__ import annotations

import contextlib
import threading
import urllib.parse
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NotRequired, TypedDict

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check, Poll
from gpuprobe.checks.state import Keeps
from gpuprobe.config import Config
from gpuprobe.errors import ConfigError
from gpuprobe.families import Family
from gpuprobe.host import Host
from gpuprobe.lifecycle import kubelet, notices, provider
from gpuprobe.report import Action, CheckResult, Finding, Severity, Status, format_time, parse_time

NAME = "lifecycle"
PROVIDER_CHOICES = ("auto", "aws", "gcp", "azure", "none")
PROVIDER_NAMES = {"aws": "AWS", "gcp": "GCE", "azure": "Azure"}
# A reading is at most the token, three GETs and, after a 401, a new token and the GET again
# (AWS), each within timeout_seconds.
MOST_REQUESTS = 6
CODES = {
    notices.PREEMPTION: "NODE_PREEMPTION_NOTICE",
    notices.MAINTENANCE: "NODE_MAINTENANCE_SCHEDULED",
    notices.REBALANCE: "NODE_REBALANCE_RECOMMENDED",
}


@dataclass(frozen=True)
class LifecycleConfig:
    """The `lifecycle:` section: which cloud to ask, where, how long to wait, how often the
    daemon looks, and where the kubelet keeps its configuration."""

    # auto (from DMI), aws, gcp, azure, or none (never ask).
    provider: str = "auto"
    # The metadata service's base URL (http://host[:port]); None: the provider's own.
    endpoint: str | None = None
    # Each request's bound; a service that takes longer is reported UNKNOWN.
    timeout_seconds: float = 2.0
    # How often the daemon asks for notices between rounds (AWS asks for every 5 s).
    poll_seconds: float = 5.0
    # The kubelet's config file (KubeletConfiguration), a host path.
    kubelet_config: str = kubelet.DEFAULT_CONFIG

    def __post_init__(self) -> None:
        if self.provider not in PROVIDER_CHOICES:
            raise ConfigError(
                f"provider: {self.provider!r} is not one of {', '.join(PROVIDER_CHOICES)}"
            )
        if self.endpoint is not None:
            parsed = urllib.parse.urlsplit(self.endpoint)
            if parsed.scheme != "http" or not parsed.hostname or parsed.path not in ("", "/"):
                raise ConfigError(
                    f"endpoint: {self.endpoint!r} is not a base URL like http://169.254.169.254"
                )
        if not self.kubelet_config.startswith("/"):
            raise ConfigError(f"kubelet_config: {self.kubelet_config!r} is not an absolute path")

    def endpoint_for(self, cloud: str) -> str:
        """The base URL to ask `cloud`'s metadata service at."""
        return (self.endpoint or notices.DEFAULT_ENDPOINTS[cloud]).rstrip("/")


class NoticeEntry(TypedDict):
    """One notice (`data.notices[]`)."""

    kind: str
    source: str
    detail: str
    time: str | None
    estimated: bool


class ShutdownFacts(TypedDict):
    """The kubelet's graceful node shutdown (`data.graceful_shutdown`)."""

    config_file: str
    state: str  # enabled | disabled | absent | unreadable
    shutdown_grace_period_seconds: NotRequired[float]
    shutdown_grace_period_critical_pods_seconds: NotRequired[float]
    problem: NotRequired[str]


class LifecycleData(TypedDict):
    """The check's data (docs/checks.md, check `lifecycle`)."""

    provider: str | None
    provider_from: str  # dmi | config
    endpoint: NotRequired[str]
    notices: list[NoticeEntry]
    answers: NotRequired[dict[str, str]]
    termination_time: NotRequired[str]
    problem: NotRequired[str]
    graceful_shutdown: ShutdownFacts


@dataclass
class LifecycleKept:
    """What the check keeps between runs, shared with the daemon's notice poller
    (`notice_sense`): the metadata service's session (AWS's IMDSv2 token while it lives,
    Azure's instance name), as `lifecycle.notices` keeps it; and the reading in which the
    poller heard a change, handed to the run it wakes, so the service is asked once per
    notice."""

    session: dict[str, Any] = field(default_factory=dict)
    heard: Hashable = None  # what the poller heard last (None: nothing yet)
    handed: tuple[notices.NoticeReading, datetime] | None = None  # a change, and when read
    lock: threading.Lock = field(default_factory=threading.Lock)

    def hand(self, heard: Hashable, reading: notices.NoticeReading, at: datetime) -> None:
        """The poller's reading at `at`: handed to the next run when it heard a change."""
        with self.lock:
            if heard != self.heard:
                self.heard, self.handed = heard, (reading, at)

    def take(self, at: datetime, fresh: timedelta) -> notices.NoticeReading | None:
        """The reading handed by the poller, once, if it was read within `fresh` of `at`
        (older, the run asks itself)."""
        with self.lock:
            handed, self.handed = self.handed, None
        if handed is None or not timedelta(0) <= at - handed[1] <= fresh:
            return None
        return handed[0]


KEEPS: Keeps[LifecycleKept] = Keeps(LifecycleKept)


def run(ctx: CheckContext, config: Config) -> CheckResult:
    """Ask the provider for notices and read the kubelet's shutdown grace periods."""
    host = ctx.host
    settings = config.section(NAME, LifecycleConfig)
    cloud, source = _provider(host, settings)
    shutdown = kubelet.read_graceful_shutdown(host, settings.kubelet_config)
    shutdown_data = _shutdown_data(shutdown)
    if cloud is None:
        vendor = provider.dmi(host, "sys_vendor")
        why = f"DMI sys_vendor {vendor!r}" if vendor else "no DMI sys_vendor"
        if source == "config":
            why = "lifecycle.provider is none"
        data = LifecycleData(
            provider=None, provider_from=source, notices=[], graceful_shutdown=shutdown_data
        )
        return CheckResult(NAME, f"not on a known cloud ({why}): no notices to hear", data=data)
    at = _now(host)
    kept = ctx.kept(KEEPS)
    # A run the poller woke judges what the poller read (within one poll of now).
    reading = kept.take(at, timedelta(seconds=settings.poll_seconds))
    if reading is None:
        endpoint = settings.endpoint_for(cloud)
        reading = notices.read_notices(
            host, cloud, endpoint, settings.timeout_seconds, kept.session, at
        )
    data = LifecycleData(
        provider=cloud,
        provider_from=source,
        endpoint=reading.endpoint,
        notices=[_notice_data(n) for n in reading.notices],
        answers=dict(reading.answers),
        graceful_shutdown=shutdown_data,
    )
    findings = _shutdown_findings(shutdown)
    name = PROVIDER_NAMES[cloud]
    if reading.problem is not None:
        data["problem"] = reading.problem
        findings.insert(0, _unknown(name, reading))
        return CheckResult(
            NAME, f"{name} notices unknown: {reading.problem}", findings, data, floor=Status.UNKNOWN
        )
    ending = termination_time(reading.notices)
    if ending is not None:
        data["termination_time"] = format_time(ending)
    findings[:0] = [_notice_finding(name, kind, reading.notices, at) for kind in _kinds(reading)]
    return CheckResult(NAME, _summary(name, reading, ending, at, shutdown), findings, data)


def _now(host: Host) -> datetime:
    """Now as the host tells it (a snapshot: when it was captured)."""
    return host.captured_at or datetime.fromtimestamp(host.clock.wall(), UTC)


def _provider(host: Host, settings: LifecycleConfig) -> tuple[str | None, str]:
    if settings.provider == "auto":
        return provider.detect(host), "dmi"
    return (None if settings.provider == "none" else settings.provider), "config"


def _kinds(reading: notices.NoticeReading) -> list[str]:
    return list(dict.fromkeys(n.kind for n in reading.notices))


def termination_time(found: tuple[notices.Notice, ...]) -> datetime | None:
    """When the node goes: the earliest time a preemption or maintenance notice gives."""
    times = [n.time for n in found if n.time is not None and n.kind != notices.REBALANCE]
    return min(times) if times else None


def _left(when: datetime | None, at: datetime) -> str:
    if when is None:
        return ""
    seconds = (when - at).total_seconds()
    if seconds >= 0:
        return f" at {format_time(when)} (in {seconds:.0f} s)"
    return f" at {format_time(when)} ({-seconds:.0f} s ago)"


def _notice_finding(
    name: str, kind: str, found: tuple[notices.Notice, ...], at: datetime
) -> Finding:
    mine = [n for n in found if n.kind == kind]
    said = "; ".join(
        f"{n.detail}{_left(n.time, at)}{' (estimated)' if n.estimated else ''}" for n in mine
    )
    if kind == notices.PREEMPTION:
        return Finding(
            CODES[kind],
            Severity.CRITICAL,
            f"{name} announced this node's preemption: {said}; drain it: its pods end with it",
            Action.DRAIN_NODE,
        )
    if kind == notices.MAINTENANCE:
        return Finding(
            CODES[kind],
            Severity.WARNING,
            f"{name} scheduled maintenance that takes this node down: {said}",
            Action.DRAIN_NODE,
        )
    return Finding(
        CODES[kind],
        Severity.WARNING,
        f"{name} recommends moving work off this spot node ({said}): its interruption risk "
        "is elevated",
        Action.DRAIN_NODE,
    )


def _unknown(name: str, reading: notices.NoticeReading) -> Finding:
    return Finding(
        "NODE_NOTICES_UNKNOWN",
        Severity.UNKNOWN,
        f"{name}'s metadata service at {reading.endpoint} did not answer as documented: "
        f"{reading.problem}; a preemption or maintenance notice would go unheard",
        Action.CHECK_NETWORK,
    )


def _shutdown_findings(shutdown: kubelet.GracefulShutdown) -> list[Finding]:
    resource = f"file:{shutdown.path}"
    if shutdown.problem is not None:
        return [
            Finding(
                "CONFIG_INVALID",
                Severity.WARNING,
                f"the kubelet's config {shutdown.problem}: whether it shuts pods down "
                "gracefully is unknown",
                Action.FIX_CONFIG,
                resource,
            )
        ]
    if shutdown.absent or shutdown.enabled:
        return []
    return [
        Finding(
            "GRACEFUL_SHUTDOWN_DISABLED",
            Severity.WARNING,
            f"the kubelet's graceful node shutdown is off (shutdownGracePeriod absent or 0 in "
            f"{shutdown.path}) on a node that gets preemption and maintenance notices: its pods "
            "would be killed with the node, never told; set shutdownGracePeriod (e.g. 30s) and "
            "shutdownGracePeriodCriticalPods (e.g. 10s)",
            Action.FIX_CONFIG,
            resource,
        )
    ]


def _shutdown_data(shutdown: kubelet.GracefulShutdown) -> ShutdownFacts:
    if shutdown.problem is not None:
        return ShutdownFacts(
            config_file=shutdown.path, state="unreadable", problem=shutdown.problem
        )
    if shutdown.absent:
        return ShutdownFacts(config_file=shutdown.path, state="absent")
    return ShutdownFacts(
        config_file=shutdown.path,
        state="enabled" if shutdown.enabled else "disabled",
        shutdown_grace_period_seconds=shutdown.grace_seconds,
        shutdown_grace_period_critical_pods_seconds=shutdown.critical_seconds,
    )


def _notice_data(notice: notices.Notice) -> NoticeEntry:
    return NoticeEntry(
        kind=notice.kind,
        source=notice.source,
        detail=notice.detail,
        time=format_time(notice.time) if notice.time is not None else None,
        estimated=notice.estimated,
    )


def _summary(
    name: str,
    reading: notices.NoticeReading,
    ending: datetime | None,
    at: datetime,
    shutdown: kubelet.GracefulShutdown,
) -> str:
    if reading.notices:
        said = ", ".join(_kinds(reading))
        head = f"{name} announced {said}{_left(ending, at)}"
    else:
        head = f"{name}: no preemption, maintenance or rebalance notice"
    if shutdown.absent:
        return f"{head}; kubelet config {shutdown.path} not found (lifecycle.kubelet_config)"
    if shutdown.problem is None and shutdown.enabled:
        return f"{head}; graceful node shutdown {shutdown.grace_seconds:g} s"
    return head


def notice_sense(ctx: CheckContext, config: Config) -> Callable[[], Hashable] | None:
    """What the daemon's poller compares between looks (the notices heard, and whether the
    service answered), or None where no provider gives notices (nothing to poll); `ctx` is the
    check's runner's, whose state (the metadata session) the poller shares."""
    host = ctx.host
    settings = config.section(NAME, LifecycleConfig)
    cloud, _ = _provider(host, settings)
    if cloud is None:
        return None
    endpoint = settings.endpoint_for(cloud)

    def sense() -> Hashable:
        at = _now(host)
        kept = ctx.kept(KEEPS)
        reading = notices.read_notices(
            host, cloud, endpoint, settings.timeout_seconds, kept.session, at
        )
        heard = tuple((n.kind, n.source, n.detail, n.time) for n in reading.notices)
        kept.hand((heard, reading.problem is None), reading, at)
        return heard, reading.problem is None

    return sense


def notice_poll(ctx: CheckContext, config: Config) -> Poll | None:
    """The record's `poll`: the notices compared every `lifecycle.poll_seconds` between
    rounds (None where no provider gives notices)."""
    sense = notice_sense(ctx, config)
    if sense is None:
        return None
    return Poll(sense, config.section(NAME, LifecycleConfig).poll_seconds, "cloud notice")


def families(data: LifecycleData) -> Iterator[Family]:
    """`gpuprobe_node_termination_timestamp_seconds` (only with a notice that gives a time)
    and `gpuprobe_node_notice_info{provider,kind}` (one per kind of notice)."""
    ending = Family(
        "gpuprobe_node_termination_timestamp_seconds",
        "When the cloud provider said this node goes (preemption or maintenance), Unix time",
    )
    text = data["termination_time"] if "termination_time" in data else None
    if isinstance(text, str):
        with contextlib.suppress(ValueError):
            ending.add([], parse_time(text).timestamp())
    yield ending
    info = Family(
        "gpuprobe_node_notice_info",
        "1 for each kind of notice the cloud provider gives this node now",
        ("provider", "kind"),
    )
    cloud = data["provider"] if "provider" in data else None
    found = data["notices"] if "notices" in data else []
    if isinstance(cloud, str) and isinstance(found, list):
        kinds = {n["kind"] for n in found if isinstance(n, dict) and isinstance(n.get("kind"), str)}
        for kind in sorted(kinds, key=lambda k: (k not in notices.KINDS, k)):
            info.add([cloud, kind], 1)
    yield info


CHECK: Check[LifecycleData] = Check(
    NAME,
    run,
    section=LifecycleConfig,
    least_deadline=lambda config: (
        MOST_REQUESTS * config.section(NAME, LifecycleConfig).timeout_seconds + 2.0
    ),
    metrics=families,
    poll=notice_poll,
    notices=(
        ("NODE_PREEMPTION_NOTICE", "preemption"),
        ("NODE_MAINTENANCE_SCHEDULED", "maintenance"),
        ("NODE_REBALANCE_RECOMMENDED", "rebalance"),
    ),
    keeps=KEEPS,
)
