"""gpuprobe's own configuration: a YAML (or JSON) file, one section per concern.

The sections of the agent as a whole (how checks run, the daemon, Kubernetes, the bandwidth
tests it serves) are the dataclasses below; each check's own section is a dataclass beside
the check, which its record names (`gpuprobe.checks.record.Check.section`), read under the
check's name. Every key is checked against the dataclasses: an unknown key or a wrong type is
a `ConfigError` naming the key, so a typo never silently turns a check off. See
docs/configuration.md for every key.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gpuprobe.errors import ConfigError
from gpuprobe.files import MAX_NESTING, FileRefused, nesting_depth, read_regular

T = TypeVar("T")


@dataclass(frozen=True)
class ChecksConfig:
    """How checks are run."""

    deadline_seconds: float = 10.0
    # Per-check deadlines, e.g. {"storage": 120}.
    deadlines: dict[str, float] = field(default_factory=dict)

    def deadline(self, check: str, least: float = 0.0) -> float:
        """The deadline of one check, in seconds: as set in `deadlines`, else
        `deadline_seconds` or the `least` the check needs (its record says), whichever is
        longer."""
        if check in self.deadlines:
            return self.deadlines[check]
        return max(self.deadline_seconds, least)


# Bounds on the daemon's counts: each watcher holds a gRPC worker thread, and a burst beyond a
# thousand calls is no rate limit.
MAX_WATCHERS = 256
MAX_CALLS_BURST = 1000


@dataclass(frozen=True)
class ServeConfig:
    """How the agent daemon (`gpuprobe serve`) schedules checks and guards its API."""

    # How often each check runs (`--interval` overrides), in seconds.
    interval_seconds: float = 60.0
    # Per-check intervals, e.g. {"xid": 10}; they win over interval_seconds.
    intervals: dict[str, float] = field(default_factory=dict)
    # How often the active checks (storage: they load the node) run, unless `intervals` says.
    active_interval_seconds: float = 3600.0
    # Each next run comes up to this fraction of its interval early or late, so the nodes of
    # a fleet do not all run (and load shared storage) at the same moment.
    jitter_fraction: float = 0.1
    # RunChecks and ClearFindings per caller: a burst of this many calls, then this many per
    # minute (a token bucket; beyond it the call fails with RESOURCE_EXHAUSTED).
    calls_burst: int = 3
    calls_per_minute: float = 6.0
    # At most this many WatchReports streams at once.
    max_watchers: int = 16
    # The most threads each end of a TCP bandwidth test uses on this node (its CPU budget);
    # unset: one per stream, up to the cores the agent may use.
    bandwidth_threads: int | None = None
    # The event path: NVML's event stream and the kernel log, followed as they grow, re-run
    # the xid check at once (within seconds, whatever the interval); false: rounds only.
    follow_events: bool = True

    def __post_init__(self) -> None:
        positive = [
            ("interval_seconds", self.interval_seconds),
            ("active_interval_seconds", self.active_interval_seconds),
            ("calls_per_minute", self.calls_per_minute),
        ] + [(f"intervals.{k}", v) for k, v in self.intervals.items()]
        for key, value in positive:
            if not value > 0:  # NaN too
                raise ConfigError(f"{key}: {value:g} must be above 0")
        if not 0 <= self.jitter_fraction <= 0.5:
            raise ConfigError(f"jitter_fraction: {self.jitter_fraction:g} is not within 0-0.5")
        for key, count, most in [
            ("calls_burst", self.calls_burst, MAX_CALLS_BURST),
            ("max_watchers", self.max_watchers, MAX_WATCHERS),
        ]:
            if count < 1:
                raise ConfigError(f"{key}: {count} must be at least 1")
            if count > most:
                raise ConfigError(f"{key}: {count} is more than {most}")
        if self.bandwidth_threads is not None and not 1 <= self.bandwidth_threads <= 64:
            raise ConfigError(
                f"bandwidth_threads: {self.bandwidth_threads} is not between 1 and 64"
            )

    def interval(self, check: str, active: bool) -> float:
        """How often the named check runs, in seconds."""
        if check in self.intervals:
            return self.intervals[check]
        return self.active_interval_seconds if active else self.interval_seconds


# Taints: the codes that mean "this node cannot run GPU work" when CRITICAL (an XID is CRITICAL
# only when NVIDIA's catalog says reset or reboot: the uncontained ones).
DEFAULT_TAINT_CODES = (
    "GPU_LOST",
    "DRIVER_NOT_LOADED",
    "DRIVER_LIBRARY_MISMATCH",
    "RUNTIME_NOT_CONFIGURED",
    "XID",
)
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# A label selector's equality and existence terms (`a=b`, `a==b`, `a!=b`, `a`, `!a`), with
# keys and values as the API server validates them (apimachinery's validation: a label name
# of at most 63 characters, alphanumeric at both ends, with `-`, `_`, `.` inside; an optional
# DNS-subdomain prefix of at most 253 characters and `/`; a value empty or a label name).
# Set-based terms (`in`, `notin`) are not taken.
_LABEL_NAME = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(
    r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
)
_SELECTOR_TERM = re.compile(r"(?P<negate>!?)(?P<key>[^=!]+)(?:(?P<op>==|=|!=)(?P<value>.*))?")
_SET_BASED = re.compile(r"\s(?:not)?in\s*\(")
_LABEL_NAME_SYNTAX = "at most 63 characters, alphanumeric at both ends with - _ . inside"


@dataclass(frozen=True)
class SelectorTerm:
    """One term of a label selector: `op` is `=`, `!=`, `exists` or `!exists`."""

    key: str
    op: str
    value: str = ""

    def picks(self, labels: Mapping[str, str]) -> bool:
        """Whether an object with these labels satisfies the term (as the API server says)."""
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op == "!=":
            return labels.get(self.key) != self.value
        return labels.get(self.key) == self.value


def selector_terms(text: str) -> tuple[SelectorTerm, ...]:
    """The terms of a label selector of equality and existence terms (`a=b,c!=d,e,!f`, each
    key once). Raises ConfigError naming the first term gpuprobe does not take or the API
    server would refuse, so a bad selector is refused when the config loads, never later by
    the API server (which left the taint and the events silently off)."""
    terms: list[SelectorTerm] = []
    for raw in text.split(","):
        term = raw.strip()
        match = _SELECTOR_TERM.fullmatch(term)
        if match is None or (match["negate"] and match["op"]) or _SET_BASED.search(term):
            raise ConfigError(
                f"node_selector: cannot read {term!r} in {text!r} (equality and existence "
                "terms only: key=value, key!=value, key, !key)"
            )
        key, op, value = match["key"], match["op"], match["value"] or ""
        if not _label_key(key):
            raise ConfigError(
                f"node_selector: {key!r} is not a label key (an optional DNS-subdomain prefix "
                f"and /, then a name of {_LABEL_NAME_SYNTAX})"
            )
        if value and not _LABEL_NAME.fullmatch(value):
            raise ConfigError(
                f"node_selector: {value!r} is not a label value (empty, or {_LABEL_NAME_SYNTAX})"
            )
        if any(t.key == key for t in terms):
            raise ConfigError(f"node_selector: {key!r} is named twice in {text!r}")
        if op is None:
            terms.append(SelectorTerm(key, "!exists" if match["negate"] else "exists"))
        else:
            terms.append(SelectorTerm(key, "!=" if op == "!=" else "=", value))
    return tuple(terms)


def _label_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return _LABEL_NAME.fullmatch(name) is not None


@dataclass(frozen=True)
class TaintConfig:
    """The opt-in taint `gpuprobe.io/unhealthy=<CODE>:<effect>` and its fleet brake."""

    enabled: bool = False
    effect: str = "NoSchedule"
    # Finding codes that taint the node while one of them is CRITICAL.
    codes: tuple[str, ...] = DEFAULT_TAINT_CODES
    # The taint goes once its codes have been clear this long.
    clear_after_seconds: float = 300.0
    # No new taint while at least this fraction of the selected nodes already carry it.
    max_unhealthy_fraction: float = 0.2
    # The nodes that run gpuprobe (the DaemonSet's nodeSelector), for the brake.
    node_selector: str = "nvidia.com/gpu.present=true"

    def __post_init__(self) -> None:
        if self.effect not in TAINT_EFFECTS:
            raise ConfigError(f"effect: {self.effect!r} is not one of {', '.join(TAINT_EFFECTS)}")
        if self.clear_after_seconds < 0:
            raise ConfigError(f"clear_after_seconds: {self.clear_after_seconds:g} is negative")
        if not 0 < self.max_unhealthy_fraction <= 1:
            raise ConfigError(
                f"max_unhealthy_fraction: {self.max_unhealthy_fraction:g} is not within 0-1"
            )
        if not self.node_selector.strip():
            raise ConfigError("node_selector: must select the nodes that run gpuprobe")
        selector_terms(self.node_selector)


# A device taint's effects (resource.k8s.io DeviceTaint): None is a dry run.
DEVICE_TAINT_EFFECTS = ("None", "NoSchedule", "NoExecute")


@dataclass(frozen=True)
class DeviceTaintConfig:
    """DeviceTaintRules for the failed GPUs a DRA driver publishes (docs/kubernetes.md)."""

    enabled: bool = False
    # None: a dry run (the rule's status tells the pods NoExecute would evict); NoSchedule:
    # no new claim gets the device; NoExecute: Kubernetes also evicts the pods using it.
    effect: str = "NoSchedule"
    # A rule is deleted once its finding has been gone this long.
    clear_after_seconds: float = 300.0
    # No new rule while at least this fraction of the fleet's published GPUs is quarantined
    # by gpuprobe's rules (the brake, counting GPUs).
    max_quarantined_fraction: float = 0.1

    def __post_init__(self) -> None:
        if self.effect not in DEVICE_TAINT_EFFECTS:
            raise ConfigError(
                f"effect: {self.effect!r} is not one of {', '.join(DEVICE_TAINT_EFFECTS)}"
            )
        if self.clear_after_seconds < 0:
            raise ConfigError(f"clear_after_seconds: {self.clear_after_seconds:g} is negative")
        if not 0 < self.max_quarantined_fraction <= 1:
            raise ConfigError(
                f"max_quarantined_fraction: {self.max_quarantined_fraction:g} is not within 0-1"
            )


@dataclass(frozen=True)
class RemediationConfig:
    """What the agent may do to workloads on a failed GPU (docs/kubernetes.md, "Eviction")."""

    # Evict (policy/v1 Eviction, PodDisruptionBudgets honoured) the pods holding a failed GPU.
    evict_pods: bool = False
    # Pods evicted from one GPU per boot of the node, at most (kept across agent restarts).
    max_evictions_per_gpu: int = 3
    # Eviction requests for the pods of one GPU per boot, at most, whatever their answer (a
    # PodDisruptionBudget that refuses for good ends in a finding, not endless retries).
    max_eviction_requests_per_gpu: int = 30
    # The fleet's circuit breaker: no eviction while the GPU nodes together show this many
    # evictions by gpuprobe within the window.
    fleet_max_evictions: int = 10
    fleet_window_seconds: float = 3600.0
    # Where the per-GPU count is kept across restarts (the DaemonSet's host state directory).
    state_dir: str = "/var/lib/gpuprobe"

    def __post_init__(self) -> None:
        if not 1 <= self.max_evictions_per_gpu <= 100:
            raise ConfigError(
                f"max_evictions_per_gpu: {self.max_evictions_per_gpu} is not between 1 and 100"
            )
        if not 1 <= self.max_eviction_requests_per_gpu <= 10000:
            raise ConfigError(
                f"max_eviction_requests_per_gpu: {self.max_eviction_requests_per_gpu} is not "
                "between 1 and 10000"
            )
        if not 1 <= self.fleet_max_evictions <= 100000:
            raise ConfigError(
                f"fleet_max_evictions: {self.fleet_max_evictions} is not between 1 and 100000"
            )
        if self.fleet_window_seconds <= 0:
            raise ConfigError(
                f"fleet_window_seconds: {self.fleet_window_seconds:g} must be above 0"
            )
        if not self.state_dir.startswith("/"):
            raise ConfigError(f"state_dir: {self.state_dir!r} is not an absolute path")


@dataclass(frozen=True)
class KubernetesConfig:
    """Node conditions, events and taints written to the Kubernetes API (docs/kubernetes.md)."""

    # auto: on when the pod has in-cluster credentials (or --kubeconfig is given).
    enabled: bool | str = "auto"
    # Condition type -> checks; rename the types to those a node-repair controller watches.
    # Unset: the checks' own groups (each check's record names its condition); the file
    # cannot set it to null (`conditions:` with every entry commented out is refused).
    conditions: dict[str, tuple[str, ...]] | None = field(
        default=None, metadata={"nullable": False}
    )
    # One Event on the node when a CRITICAL or WARNING finding appears or clears.
    events: bool = True
    taint: TaintConfig = field(default_factory=TaintConfig)
    device_taints: DeviceTaintConfig = field(default_factory=DeviceTaintConfig)
    # The first write of a starting agent comes at a random moment within this window, so a
    # fleet restarting at once does not stampede the API server.
    start_jitter_seconds: float = 30.0
    # Each API request's own bound.
    timeout_seconds: float = 10.0
    # The most node updates (publishing attempts that write) in a burst, then per minute: a
    # token bucket, so a flapping source cannot load the API server (docs/kubernetes.md).
    update_burst: int = 6
    updates_per_minute: float = 12.0

    def __post_init__(self) -> None:
        if not 1 <= self.update_burst <= 100:
            raise ConfigError(f"update_burst: {self.update_burst} is not between 1 and 100")
        if not 0 < self.updates_per_minute <= 600:
            raise ConfigError(
                f"updates_per_minute: {self.updates_per_minute:g} is not above 0 and at most 600"
            )
        if self.enabled not in (True, False, "auto"):
            raise ConfigError(f"enabled: {self.enabled!r} is not auto, true or false")
        for name, checks in (self.conditions or {}).items():
            if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", name) or len(name) > 316:
                raise ConfigError(f"conditions: {name!r} is not a condition type (CamelCase)")
            if not checks:
                raise ConfigError(f"conditions.{name}: names no check")
        if self.start_jitter_seconds < 0:
            raise ConfigError(f"start_jitter_seconds: {self.start_jitter_seconds:g} is negative")
        if self.timeout_seconds <= 0:
            raise ConfigError(f"timeout_seconds: {self.timeout_seconds:g} must be above 0")


# The address ranges pod networks are drawn from (RFC 1918, RFC 6598 shared space, IPv6
# unique local): every common CNI's default pod CIDR lies within them, so the default follows
# the DaemonSet's pod network (and, for the hostNetwork overlay, private node networks).
PRIVATE_NETWORKS = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")


@dataclass(frozen=True)
class BandwidthConfig:
    """Where and how much an agent takes part in peer-to-peer bandwidth tests."""

    # The networks peer agents' addresses must lie in: this agent sends test traffic only to,
    # and opens sinks only for, addresses within them.
    peer_networks: tuple[str, ...] = PRIVATE_NETWORKS
    # How many sinks may be open at once (beyond: RESOURCE_EXHAUSTED).
    max_sinks: int = 4
    # The most this agent sends in a TCP test, in bytes per second (50e9: a 400 Gbit/s NIC's
    # line rate); with the test's length it also bounds the bytes sent.
    max_send_bytes_per_second: float = 50e9

    def __post_init__(self) -> None:
        for network in self.peer_networks:
            try:
                ipaddress.ip_network(network)
            except ValueError:
                raise ConfigError(
                    f"peer_networks: {network!r} is not a network (address/prefix)"
                ) from None
        if not 1 <= self.max_sinks <= 64:
            raise ConfigError(f"max_sinks: {self.max_sinks} is not between 1 and 64")
        if not self.max_send_bytes_per_second > 0:
            raise ConfigError(
                f"max_send_bytes_per_second: {self.max_send_bytes_per_second:g} must be above 0"
            )

    def allows(self, address: str) -> bool:
        """Whether `address` (an IP address) lies within the peer networks."""
        try:
            ip = ipaddress.ip_address(address.split("%")[0])
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in ipaddress.ip_network(n) for n in self.peer_networks)


@dataclass(frozen=True)
class Config:
    """The whole configuration: the sections of the agent as a whole, and each check's own."""

    checks: ChecksConfig = field(default_factory=ChecksConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    kubernetes: KubernetesConfig = field(default_factory=KubernetesConfig)
    bandwidth: BandwidthConfig = field(default_factory=BandwidthConfig)
    remediation: RemediationConfig = field(default_factory=RemediationConfig)
    # The checks' own sections, by check name: a check's record names its section type, and
    # `load_config` reads the check's key into it. Not a key itself.
    sections: Mapping[str, object] = field(default_factory=dict, metadata={"key": False})

    def section(self, name: str, kind: type[T]) -> T:
        """The named check's section: as configured, else `kind`'s defaults."""
        value = self.sections.get(name)
        return value if isinstance(value, kind) else kind()

    def with_section(self, name: str, value: object) -> Config:
        """This configuration with the named check's section replaced (a flag that overrides
        the file: `--expect-gpus`, `--storage-path`)."""
        return dataclasses.replace(self, sections={**self.sections, name: value})


# A configuration is a page or two of YAML: a file far bigger is a wrong path (and PyYAML
# would take minutes and gigabytes to parse 100 MB).
MAX_CONFIG_BYTES = 1024 * 1024


def load_config(path: str | None, sections: Mapping[str, type[Any]]) -> Config:
    """The configuration in `path` (defaults when None); raises ConfigError.

    `sections` are the checks' section types by check name (the registry's `sections()`):
    their keys are read into `Config.sections`.
    """
    if path is None:
        return Config()
    import yaml

    try:
        text = read_regular(path, MAX_CONFIG_BYTES).decode("utf-8")
        if nesting_depth(text) > MAX_NESTING:
            raise RecursionError  # refused before PyYAML recurses into it
        raw = yaml.load(text, Loader=_unique_key_loader())  # a SafeLoader: safe types only
    except OSError as exc:
        raise ConfigError(f"config {path}: {exc.strerror or exc}") from None
    except FileRefused as exc:
        raise ConfigError(f"config {path}: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config {path}: not UTF-8 text") from None
    except RecursionError:
        raise ConfigError(f"config {path}: nested too deeply") from None
    except ValueError:  # Python's 4300-digit limit on an integer's text
        raise ConfigError(f"config {path}: a number too long to read") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}:" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"config {path}:{where} {problem}") from None
    if raw is None:
        return Config()
    try:
        return build(Config, raw, f"config {path}", sections)
    except ConfigError as exc:
        raise ConfigError(_with_line(str(exc), path)) from None


def _unique_key_loader() -> type[Any]:
    """PyYAML's SafeLoader refusing a key given twice in one mapping (PyYAML keeps the last
    silently: a second `serve:` would drop the first's settings unseen), naming the key and
    the lines of both."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[tuple[str, str], int] = {}
            for key, _ in node.value:
                # `<<` merges another mapping in; its keys may be overridden, as YAML says.
                if not isinstance(key, yaml.ScalarNode) or key.tag == MERGE_TAG:
                    continue
                first = seen.get((key.tag, key.value))
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"duplicate key {key.value!r} (first at line {first})",
                        key.start_mark,
                    )
                seen[(key.tag, key.value)] = key.start_mark.line + 1
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


MERGE_TAG = "tag:yaml.org,2002:merge"


def _with_line(message: str, path: str) -> str:
    """An `xid: policy[i]` error with the line of its rule in the file: `config F: line 7:
    xid: policy[0]: ...` (a typo in an override names where it is)."""
    prefix = f"config {path}: "
    match = re.match(r"xid: policy\[(\d+)\]", message[len(prefix) :])
    if not message.startswith(prefix) or match is None:
        return message
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            root = yaml.compose(f)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return message
    node = _child(_child(root, "xid"), "policy")
    index = int(match.group(1))
    if not isinstance(node, yaml.SequenceNode) or index >= len(node.value):
        return message
    line = node.value[index].start_mark.line + 1
    return f"{prefix}line {line}: {message[len(prefix) :]}"


def _child(node: Any, key: str) -> Any:
    import yaml

    if isinstance(node, yaml.MappingNode):
        for name, value in node.value:
            if isinstance(name, yaml.ScalarNode) and name.value == key:
                return value
    return None


def build(cls: type[T], raw: Any, where: str, sections: Mapping[str, type[Any]] | None = None) -> T:
    """An instance of the dataclass `cls` from a mapping, every key and type checked.

    `sections` (for `Config`: the checks' section types by name) are keys read beside the
    dataclass's own fields, each into its type, and passed as its `sections` field."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {_kind(raw)}")
    extra = sections or {}
    hints = {**typing.get_type_hints(cls), **extra}
    fields = {
        f.name
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if f.metadata.get("key", True)
    } | extra.keys()
    unknown = sorted(str(k) for k in raw if k not in fields)
    if unknown:
        known = ", ".join(sorted(fields))
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {known})")
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in raw and raw[f.name] is None and not f.metadata.get("nullable", True):
            # Unset means a default the file cannot write: null is refused as its type would.
            (kind,) = [a for a in typing.get_args(hints[f.name]) if a is not type(None)]
            _convert(kind, None, f"{where}: {f.name}")
    values = {key: _convert(hints[key], value, f"{where}: {key}") for key, value in raw.items()}
    own = {key: value for key, value in values.items() if key not in extra}
    if extra:
        own["sections"] = {key: value for key, value in values.items() if key in extra}
    try:
        built = cls(**own)
    except ConfigError as exc:  # raised by a section's own validation
        raise ConfigError(f"{where}: {exc}") from None
    for key, value in values.items():  # what the section's own validation left to all
        _in_range(key, value, f"{where}: {key}")
    return built


# The longest duration any setting takes (a year): beyond it a timer overflows (Event.wait
# raises OverflowError past about 292 years) and nothing would ever run.
MAX_SECONDS = 366 * 24 * 3600.0
# Settings of seconds whose names do not end in `_seconds`: mappings of check name → seconds.
DURATION_MAPPINGS = frozenset({"intervals", "deadlines"})
# Spans of seconds where 0 means "at once" (no jitter, no wait), not a timer that never ends.
MAY_BE_ZERO_SECONDS = frozenset({"start_jitter_seconds", "clear_after_seconds"})
# No count or size gpuprobe takes comes near this; from it on a float loses whole numbers.
# An integer must be below it (docs/configuration.md).
MAX_INTEGER = 2**53


def _in_range(key: str, value: Any, where: str) -> None:
    """The ranges every number in the configuration keeps, by what its key names: durations
    (`*_seconds`, `intervals`, `deadlines`) above 0 and at most a year; every other number not
    negative and, as an integer, below 2^53. Raises ConfigError naming the key."""
    if isinstance(value, dict):
        for name, item in value.items():
            duration = key in DURATION_MAPPINGS
            _number_in_range(item, f"{where}.{name}", duration)
    elif isinstance(value, tuple):
        for i, item in enumerate(value):
            _number_in_range(item, f"{where}[{i}]", duration=False)
    elif key in MAY_BE_ZERO_SECONDS:
        _number_in_range(value, where, duration=True, zero=True)
    else:
        _number_in_range(value, where, key.endswith("_seconds"))


def _number_in_range(value: Any, where: str, duration: bool, zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    if duration and zero and not 0 <= value <= MAX_SECONDS:
        raise ConfigError(f"{where}: {value:g} must be 0 or more, at most a year")
    if duration and not zero and not 0 < value <= MAX_SECONDS:
        raise ConfigError(
            f"{where}: {value:g} must be above 0 and at most a year ({MAX_SECONDS:.0f} s)"
        )
    if value < 0:
        raise ConfigError(f"{where}: {brief(value)} must not be negative")
    if isinstance(value, int) and value >= MAX_INTEGER:
        raise ConfigError(f"{where}: {brief(value)} is beyond any sensible count or size")


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _convert(inner[0], value, where)
        for member in inner:  # int | str: the first that takes the value
            try:
                return _convert(member, value, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: expected a number or a string, got {_kind(value)}")
    if dataclasses.is_dataclass(hint):
        return build(hint, value, where)  # type: ignore[arg-type]
    if origin is tuple:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {_kind(value)}")
        return tuple(_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {_kind(value)}")
        return {
            _convert(args[0], k, where): _convert(args[1], v, f"{where}.{k}")
            for k, v in value.items()
        }
    return _scalar(hint, value, where)


def _scalar(hint: Any, value: Any, where: str) -> Any:
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true or false, got {_kind(value)}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected an integer, got {_kind(value)}")
    if hint is float:
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        # YAML 1.1 (PyYAML) reads 1.5e9 as a string: only 1.5e+9 is a number there.
        if not numeric and not (
            isinstance(value, str) and re.fullmatch(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+", value)
        ):
            raise ConfigError(f"{where}: expected a number, got {_kind(value)}")
        number = _float(value)
        # .nan would pass every `<=` bound below it (and turn a rate limit off); .inf never
        # comes: neither is a setting.
        if not math.isfinite(number):
            raise ConfigError(f"{where}: {brief(value)} is not a finite number")
        return number
    if hint is str:
        if isinstance(value, str):
            return value
        hint_text = ' (quote versions: "12.10")' if isinstance(value, float) else ""
        raise ConfigError(f"{where}: expected a string, got {_kind(value)}{hint_text}")
    raise ConfigError(f"{where}: unsupported setting type {hint!r}")  # a bug in this module


def brief(value: Any) -> str:
    """A number as the file wrote it, cut short when it runs to hundreds of digits."""
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}...({len(text)} digits)"


def _float(value: int | float | str) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer beyond a float's range: as infinite as .inf
        return math.inf


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)
