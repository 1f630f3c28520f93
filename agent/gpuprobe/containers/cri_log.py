"""The tails of the kubelet's container logs, in the CRI log format.

The kubelet keeps each container's output under
`/var/log/pods/<namespace>_<pod name>_<pod uid>/<container>/<n>.log`, `n` the container's
restart count (the previous instance's log stays beside the current one), and rotates a log
to `<n>.log.<YYYYMMDD-hhmmss>` (older rotations gzip-compressed, `.gz`, and not read here;
the kubelet's container log manager, pkg/kubelet/logs).
Each line is `<RFC 3339 nano time> <stdout|stderr> <P|F> <text>`: the runtime splits long
lines into partial (`P`) pieces ended by a full (`F`) one, which are joined back here.

Only a bounded tail is read: at most `max_bytes` per container, newest first (the current
instance, then the rotated files of the same instance, then the previous instance), so a
log of any size costs the same time and memory. Facts only: the `pods` check classifies
the lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from gpuprobe.host import Host
from gpuprobe.host.fs import HostFS

POD_LOG_DIR = "/var/log/pods"
MAX_TAIL_BYTES = 64 * 1024
_INSTANCE = re.compile(r"^(\d+)\.log$")
_ROTATED = re.compile(r"^(\d+)\.log\.(\d{8}-\d{6})$")
STREAMS = frozenset({"stdout", "stderr"})
TAGS = frozenset({"P", "F"})
# RFC 3339 with up to nine fractional digits; Python reads six.
_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


@dataclass(frozen=True)
class LogLine:
    """One logical line a container wrote (partial pieces joined); `stamp` is the runtime's
    RFC 3339 time of its first piece, parsed only when asked (`time`)."""

    stamp: str
    stream: str
    text: str
    file: str

    @property
    def time(self) -> datetime | None:
        """When the runtime received the line's first piece."""
        return parse_time(self.stamp)


@dataclass
class ContainerLog:
    """A container's log directory: who it is, how often it restarted, and its tail."""

    namespace: str
    pod: str
    pod_uid: str
    container: str
    restarts: int
    files: list[str] = field(default_factory=list)  # the files read, newest first
    lines: list[LogLine] = field(default_factory=list)  # oldest first
    bytes_read: int = 0


@dataclass(frozen=True)
class LogDir:
    """One container's log directory before it is read."""

    namespace: str
    pod: str
    pod_uid: str
    container: str
    path: str
    restarts: int
    newest_first: tuple[str, ...]


def list_logs(fs: HostFS) -> list[LogDir]:
    """Every container's log directory, with its files newest first (no file is read)."""
    found: list[LogDir] = []
    for entry in fs.listdir(POD_LOG_DIR):
        parts = entry.split("_")
        if len(parts) != 3 or not all(parts):
            continue
        namespace, pod, uid = parts
        for container in fs.listdir(f"{POD_LOG_DIR}/{entry}"):
            path = f"{POD_LOG_DIR}/{entry}/{container}"
            names = fs.listdir(path)
            order = _newest_first(names)
            if not order:
                continue
            instances = [int(m.group(1)) for n in names if (m := _INSTANCE.match(n))]
            restarts = max(instances, default=0)
            found.append(LogDir(namespace, pod, uid, container, path, restarts, tuple(order)))
    return found


def read_pod_logs(
    host: Host, first: set[tuple[str, str]], max_logs: int
) -> tuple[list[ContainerLog], int]:
    """The tails of the logs of the pods `first` names (namespace, pod), then of restarted
    containers (most restarts first), at most `max_logs` of them; and how many were left
    unread."""
    chosen = [
        log for log in list_logs(host.fs) if (log.namespace, log.pod) in first or log.restarts > 0
    ]
    chosen.sort(key=lambda log: ((log.namespace, log.pod) not in first, -log.restarts))
    logs = [read_tail(host.fs, log) for log in chosen[:max_logs]]
    return logs, max(0, len(chosen) - max_logs)


def _newest_first(names: list[str]) -> list[str]:
    keyed: list[tuple[int, str, str]] = []
    for name in names:
        if m := _INSTANCE.match(name):
            keyed.append((int(m.group(1)), "99999999-999999", name))  # the live file is newest
        elif m := _ROTATED.match(name):
            keyed.append((int(m.group(1)), m.group(2), name))
    return [name for _, _, name in sorted(keyed, reverse=True)]


def read_tail(fs: HostFS, log: LogDir, max_bytes: int = MAX_TAIL_BYTES) -> ContainerLog:
    """The last `max_bytes` the container wrote, across its files newest first."""
    out = ContainerLog(log.namespace, log.pod, log.pod_uid, log.container, log.restarts)
    budget = max_bytes
    chunks: list[list[LogLine]] = []
    for name in log.newest_first:
        if budget <= 0:
            break
        path = f"{log.path}/{name}"
        try:
            data = fs.read_tail(path, budget)
        except OSError:
            continue
        out.files.append(path)
        out.bytes_read += len(data)
        cut = len(data) >= budget
        budget -= len(data)
        chunks.append(parse(data, path, cut=cut))
    for chunk in reversed(chunks):
        out.lines.extend(chunk)
    return out


def parse(data: bytes, file: str, *, cut: bool = False) -> list[LogLine]:
    """CRI log lines as logical lines; `cut`: the data starts mid-file, so its first
    (possibly partial) line is dropped."""
    raw = data.decode("utf-8", errors="replace").split("\n")
    if cut and raw:
        raw = raw[1:]
    lines: list[LogLine] = []
    pending: dict[str, tuple[str, list[str]]] = {}
    for record in raw:
        parts = record.rstrip("\r").split(" ", 3)
        if len(parts) < 3 or parts[1] not in STREAMS or parts[2] not in TAGS:
            continue
        stamp, stream, tag = parts[0], parts[1], parts[2]
        start, pieces = pending.pop(stream, (stamp, []))
        pieces.append(parts[3] if len(parts) == 4 else "")
        if tag == "P":
            pending[stream] = (start, pieces)
        else:
            lines.append(LogLine(start, stream, "".join(pieces), file))
    for stream, (start, pieces) in pending.items():  # a partial line the log ends with
        lines.append(LogLine(start, stream, "".join(pieces), file))
    return lines


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 (nano) time as the runtimes write it, or None."""
    found = _TIME.match(text)
    if found is None:
        return None
    fraction = (found.group(2) or "0")[:6].ljust(6, "0")
    zone = "+00:00" if found.group(3) == "Z" else found.group(3)
    try:
        return datetime.fromisoformat(f"{found.group(1)}.{fraction}{zone}")
    except ValueError:
        return None
