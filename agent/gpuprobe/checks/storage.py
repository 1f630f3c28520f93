"""Check `storage`: can the node's scratch and shared filesystems take data, and how fast?

For every configured host path (`storage.paths`, `--storage-path`): the mount it is on
(device, filesystem type, options, shared or local), whether it exists, is writable and has
room (bytes and inodes), then a measured sequential write and read (see
`gpuprobe.measure.throughput`). A path that cannot take the test is STORAGE_UNAVAILABLE;
throughput below a configured floor is STORAGE_THROUGHPUT_LOW.

The measurement is active: it is skipped (said so, no finding) while a GPU runs a process,
unless `storage.force`. On a snapshot nothing is replayed: a snapshot's path that exists on
this machine is measured here, live; one that does not is reported not measured.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NotRequired, TypedDict, cast

from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.record import Check
from gpuprobe.config import Config
from gpuprobe.errors import ConfigError
from gpuprobe.families import Family, mappings, number, text
from gpuprobe.host import Host, default_node_name
from gpuprobe.measure import mounts, testfile
from gpuprobe.measure.hostpath import host_root, local_path
from gpuprobe.measure.throughput import MeasureError, Plan, Throughput, measure
from gpuprobe.report import Action, CheckResult, Finding, Severity

NAME = "storage"
CODE_UNAVAILABLE = "STORAGE_UNAVAILABLE"
CODE_LOW = "STORAGE_THROUGHPUT_LOW"
# The check measures for a while: its deadline is at least this unless set per check.
LEAST_DEADLINE = 120.0
# The share of the check's deadline the I/O may use: the rest is for set-up and removal.
DEADLINE_SHARE = 0.75


class StoragePath(TypedDict):
    """One configured path in `data.paths` (docs/checks.md, check `storage`)."""

    path: str
    measured: bool
    not_measured: str | None
    write_bytes_per_second: float | None
    read_bytes_per_second: float | None
    method: str | None
    direct_io_refused: str | None  # why O_DIRECT was refused, when it was
    block_size_bytes: int
    size_bytes: int
    jobs: int
    bytes_written: int
    bytes_read: int
    write_seconds: float | None
    read_seconds: float | None
    duration_seconds: float | None
    time_limited: bool
    stale_files_removed: int
    filesystem_type: str | None
    device: str | None
    mount_point: str | None
    mount_options: list[str]
    shared_filesystem: bool | None
    total_bytes: int | None
    free_bytes: int | None
    total_inodes: int | None
    free_inodes: int | None


class StorageData(TypedDict):
    """The check's data (docs/checks.md, check `storage`)."""

    paths: list[StoragePath]
    # False when no path is configured: the check did not run (absent once one is).
    ran: NotRequired[bool]
    # Once a path is configured:
    gpus_with_processes: NotRequired[list[int]]
    forced: NotRequired[bool]
    time_limit_seconds: NotRequired[float]


def run(ctx: CheckContext, config: Config) -> CheckResult:
    """Examine and measure every configured storage path."""
    host = ctx.host
    cfg = config.section(NAME, StorageConfig)
    paths = list(dict.fromkeys(cfg.paths))  # a path given twice is measured once
    data: StorageData = {"paths": []}
    if not paths:
        data["ran"] = False
        return CheckResult(
            NAME, "no storage path configured (storage.paths, --storage-path)", data=data
        )
    busy = ctx.gpus.nvidia.busy(graphics=False)
    data["gpus_with_processes"] = sorted(busy)
    data["forced"] = cfg.force
    blocked = None
    if busy and not cfg.force:
        gpus = ("GPUs " if len(busy) > 1 else "GPU ") + ", ".join(str(i) for i in sorted(busy))
        blocked = f"GPU processes are active on {gpus} (storage.force measures anyway)"
    seconds = min(cfg.time_limit_seconds, DEADLINE_SHARE * CHECK.deadline(config))
    data["time_limit_seconds"] = round(seconds, 3)
    end = time.monotonic() + seconds
    owner = host.node_name if not host.is_snapshot else default_node_name()
    findings: list[Finding] = []
    probes = []
    for left, path in zip(range(len(paths), 0, -1), paths, strict=True):
        share = max(0.0, (end - time.monotonic()) / left)
        probe = _PathProbe(host, cfg, path, owner)
        findings += probe.run(blocked, share)
        data["paths"].append(probe.entry)
        probes.append(probe)
    return CheckResult(NAME, "; ".join(p.brief() for p in probes), findings, data)


class _PathProbe:
    """One configured path: its facts (`entry`), then its findings from `run`."""

    def __init__(self, host: Host, cfg: StorageConfig, path: str, owner: str) -> None:
        self.host = host
        self.cfg = cfg
        self.path = path
        self.owner = owner
        self.resource = f"path:{path}"
        self.state = "not measured"
        self.size = Plan(cfg.block_size_bytes, cfg.size_bytes, cfg.jobs, 0.0).total_bytes
        self.entry: StoragePath = {
            "path": path,
            "measured": False,
            "not_measured": None,
            "write_bytes_per_second": None,
            "read_bytes_per_second": None,
            "method": None,
            "direct_io_refused": None,
            "block_size_bytes": cfg.block_size_bytes,
            "size_bytes": self.size,
            "jobs": cfg.jobs,
            "bytes_written": 0,
            "bytes_read": 0,
            "write_seconds": None,
            "read_seconds": None,
            "duration_seconds": None,
            "time_limited": False,
            "stale_files_removed": 0,
            "filesystem_type": None,
            "device": None,
            "mount_point": None,
            "mount_options": [],
            "shared_filesystem": None,
            "total_bytes": None,
            "free_bytes": None,
            "total_inodes": None,
            "free_inodes": None,
        }

    def run(self, blocked: str | None, seconds: float) -> list[Finding]:
        """Look at the path; measure it unless it is unusable or `blocked` says why not."""
        local = self._locate()
        if local is None:
            self.state = "not on this machine"
            return []
        unusable = self._examine(local)
        if unusable is not None:
            self.entry["not_measured"] = unusable.message
            self.state = "unavailable"
            return [unusable]
        if blocked is not None:
            self.entry["not_measured"] = blocked
            self.state = "not measured, GPU processes are active"
            return []
        self.entry["stale_files_removed"] = len(testfile.remove_stale(local, self.owner))
        plan = Plan(self.cfg.block_size_bytes, self.cfg.size_bytes, self.cfg.jobs, seconds)
        try:
            result = measure(local, plan, self.owner)
        except MeasureError as exc:
            finding = self._measure_failed(exc)
            self.entry["not_measured"] = finding.message
            self.state = "unavailable"
            return [finding]
        self._record(result)
        return self._floors(result)

    def brief(self) -> str:
        """The path's part of the check's summary line."""
        w, r = self.entry["write_bytes_per_second"], self.entry["read_bytes_per_second"]
        if not self.entry["measured"]:
            return f"{self.path}: {self.state}"
        write = _rate_text(w) if w is not None else "nothing written"
        read = _rate_text(r) if r is not None else "nothing read"
        return f"{self.path}: write {write}, read {read}"

    def _locate(self) -> Path | None:
        """Where the path is on this machine; None (said so in `entry`) when not here."""
        if not self.host.is_snapshot:
            return local_path(self.host, self.path)
        # Active measurements are not replayed: a snapshot's path is measured live, here.
        local = Path(self.path)
        if not local.is_dir():
            self.entry["not_measured"] = (
                "replaying a snapshot: the path is not a directory on this machine"
            )
            return None
        return local

    def _examine(self, local: Path) -> Finding | None:
        """The reason the path cannot take the test, as a finding; None when it can."""
        path = self.path
        outside = self._outside_root(local)  # before stat: a dangling host link is no absence
        if outside is not None:
            return outside
        try:
            st = os.stat(local)
        except FileNotFoundError:
            return self._unavailable(
                Severity.CRITICAL,
                f"storage path {path} does not exist: the volume that belongs there is not "
                "mounted. Mount it, or correct storage.paths",
            )
        except OSError as exc:
            return self._cannot_examine(exc)
        if not stat.S_ISDIR(st.st_mode):
            return self._unavailable(
                Severity.CRITICAL,
                f"storage path {path} is not a directory. Correct storage.paths",
                Action.FIX_CONFIG,
            )
        try:
            space = mounts.space_of(local)
        except OSError as exc:
            return self._cannot_examine(exc)
        self._record_mount(local, space)
        where = self._where()
        if space.read_only:
            return self._unavailable(
                Severity.CRITICAL,
                f"storage path {path} is on a read-only mount{where}: nothing can be written "
                "there. Remount it read-write; a filesystem remounted read-only after errors "
                "needs its disk inspected",
            )
        if space.free_bytes == 0 or space.free_inodes == 0:
            what = "no free space" if space.free_bytes == 0 else "no free inodes"
            return self._unavailable(
                Severity.CRITICAL,
                f"storage path {path} is full{where}: {what}. Free space there",
            )
        if not os.access(local, os.W_OK | os.X_OK):
            return self._unavailable(
                Severity.WARNING,
                f"storage path {path} is not writable by gpuprobe (uid {os.geteuid()}): "
                "not measured. Run gpuprobe as a user that may write there, or measure "
                "another path",
                Action.FIX_CONFIG,
            )
        if space.free_bytes is not None and space.free_bytes < 2 * self.size:
            return self._unavailable(
                Severity.WARNING,
                f"storage path {path} has {_bytes(space.free_bytes)} free{where}, under twice "
                f"the {_bytes(self.size)} test: not measured. Free space there, or lower "
                "storage.size_bytes",
            )
        return None

    def _cannot_examine(self, exc: OSError) -> Finding:
        if exc.errno in (errno.EACCES, errno.EPERM):
            return self._unavailable(
                Severity.WARNING,
                f"storage path {self.path} cannot be examined by gpuprobe (uid {os.geteuid()}): "
                "permission denied. Run gpuprobe as a user that may write there, or measure "
                "another path",
                Action.FIX_CONFIG,
            )
        return self._unavailable(
            Severity.CRITICAL,
            f"storage path {self.path} cannot be examined: {exc.strerror or exc}. Check the "
            "filesystem (a stale file handle means its server went away)",
        )

    def _outside_root(self, local: Path) -> Finding | None:
        """Under `--root`, a path whose links lead out of the host's tree is not the host's."""
        root = os.path.realpath(host_root(self.host))
        resolved = os.path.realpath(local)
        if (
            self.host.is_snapshot
            or root == "/"
            or resolved == root
            or resolved.startswith(root + "/")
        ):
            return None
        return self._unavailable(
            Severity.WARNING,
            f"storage path {self.path} is a link that leads out of the host's root "
            f"{host_root(self.host)} (to {resolved}): not measured. Configure the link's target",
            Action.FIX_CONFIG,
        )

    def _record_mount(self, local: Path, space: mounts.Space) -> None:
        self.entry.update(
            {
                "total_bytes": space.total_bytes,
                "free_bytes": space.free_bytes,
                "total_inodes": space.total_inodes,
                "free_inodes": space.free_inodes,
            }
        )
        mount = mounts.mount_of(local)
        if mount is None:
            return
        self.entry.update(
            {
                "filesystem_type": mount.fstype,
                "device": mount.device,
                "mount_point": self._host_path(mount.mount_point),
                "mount_options": list(mount.options),
                "shared_filesystem": mount.shared,
            }
        )

    def _host_path(self, point: str) -> str | None:
        """A mount point as a host path (None when it lies outside `--root`)."""
        if self.host.is_snapshot:
            return point
        root = str(host_root(self.host)).rstrip("/")
        if not root:
            return point
        if point == root:
            return "/"
        return point[len(root) :] if point.startswith(root + "/") else None

    def _where(self) -> str:
        fstype, point = self.entry["filesystem_type"], self.entry["mount_point"]
        if fstype is None:
            return ""
        return f" ({fstype} mounted on {point})" if point else f" ({fstype})"

    def _measure_failed(self, exc: MeasureError) -> Finding:
        path, where = self.path, self._where()
        if exc.errno == errno.EROFS:
            return self._unavailable(
                Severity.CRITICAL,
                f"storage path {path} refused the test's {exc.phase} as read-only{where}. "
                "Remount it read-write",
            )
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            what = "its quota" if exc.errno == errno.EDQUOT else "space"
            return self._unavailable(
                Severity.CRITICAL,
                f"storage path {path} ran out of {what} during the test's {exc.phase}{where}. "
                "Free space there",
            )
        if exc.errno in (errno.EACCES, errno.EPERM):
            return self._unavailable(
                Severity.WARNING,
                f"storage path {path} refused the test's {exc.phase}: permission denied. "
                "Run gpuprobe as a user that may write there, or measure another path",
                Action.FIX_CONFIG,
            )
        return self._unavailable(
            Severity.CRITICAL,
            f"storage path {path} failed the test's {exc.phase}{where}: {exc.strerror}. Check the "
            "filesystem and its device (kernel log)",
        )

    def _unavailable(
        self, severity: Severity, message: str, action: Action = Action.CHECK_STORAGE
    ) -> Finding:
        return Finding(CODE_UNAVAILABLE, severity, message, action, self.resource)

    def _record(self, result: Throughput) -> None:
        write_seconds, read_seconds = round(result.write_seconds, 6), round(result.read_seconds, 6)
        self.entry.update(
            {
                "measured": True,
                "method": result.method,
                "direct_io_refused": result.direct_refused,
                "bytes_written": result.bytes_written,
                "bytes_read": result.bytes_read,
                "write_seconds": write_seconds,
                "read_seconds": read_seconds,
                "duration_seconds": round(write_seconds + read_seconds, 6),  # adds up in the data
                "time_limited": result.time_limited,
                "write_bytes_per_second": _rate(result.bytes_written, result.write_seconds),
                "read_bytes_per_second": _rate(result.bytes_read, result.read_seconds),
            }
        )

    def _floors(self, result: Throughput) -> list[Finding]:
        """One STORAGE_THROUGHPUT_LOW for the path, naming each direction below its floor."""
        low = []
        for op, floor, rate in (
            ("write", self.cfg.min_write_bytes_per_second, self.entry["write_bytes_per_second"]),
            ("read", self.cfg.min_read_bytes_per_second, self.entry["read_bytes_per_second"]),
        ):
            if floor is not None and rate is not None and rate < floor:
                low.append(f"{op} {_rate_text(rate)} is below its floor of {_rate_text(floor)}")
        if not low:
            return []
        method = "O_DIRECT" if result.method == "direct" else "buffered I/O"
        return [
            Finding(
                CODE_LOW,
                Severity.WARNING,
                f"storage path {self.path}{self._where()}: sequential {' and '.join(low)} "
                f"({_bytes(self.cfg.block_size_bytes)} blocks, {self.cfg.jobs} jobs, {method}). "
                "Check the disk's health and the load on it, or the network to the storage",
                Action.CHECK_STORAGE,
                self.resource,
            )
        ]


def _rate(moved: int, seconds: float) -> float | None:
    return round(moved / seconds, 1) if moved > 0 and seconds > 0 else None


def _scaled(value: float, step: int, units: tuple[str, ...]) -> str:
    """A figure with three significant digits in the largest unit it fills."""
    unit = 0
    while value >= step - 0.5 and unit < len(units) - 1:
        value /= step
        unit += 1
    text = f"{value:.3g}" if value < 1000 else f"{value:.0f}"  # 1020 KiB, not 1.02e+03
    return f"{text} {units[unit]}"


def _bytes(value: int) -> str:
    """Sizes in binary units, as block and file sizes are set: 1 MiB, 12 MiB."""
    return _scaled(float(value), 1024, ("B", "KiB", "MiB", "GiB", "TiB", "PiB"))


def _rate_text(value: float) -> str:
    """Throughput in decimal units, as drives and fio's MB/s state it: 1.94 GB/s."""
    return _scaled(value, 1000, ("B", "kB", "MB", "GB", "TB", "PB")) + "/s"


RATES: tuple[tuple[str, Literal["write_bytes_per_second", "read_bytes_per_second"]], ...] = (
    ("write", "write_bytes_per_second"),
    ("read", "read_bytes_per_second"),
)


def families(data: StorageData) -> Iterator[Family]:
    """`gpuprobe_storage_throughput_bytes_per_second` from the check's data."""
    # `d[key] if key in d`, not `.get`: mypy holds an index to the TypedDict's keys. The
    # values are still held to numbers and text: a report may come from elsewhere.
    paths: object = data["paths"] if "paths" in data else None
    if not isinstance(paths, list):
        return
    family = Family(
        "gpuprobe_storage_throughput_bytes_per_second",
        "Measured sequential throughput of a storage path",
        ("path", "op"),
    )
    for entry in (cast(StoragePath, p) for p in mappings(paths)):
        path = text(entry["path"] if "path" in entry else None)
        if path is None:
            continue
        for op, key in RATES:
            value = number(entry[key] if key in entry else None)
            if value is not None:
                family.add([path, op], value)
    yield family


MIB = 1024 * 1024
# O_DIRECT needs buffers, offsets and lengths aligned to the device's logical block size
# (512 or 4096 bytes): multiples of 4096 fit every device.
IO_ALIGNMENT = 4096


@dataclass(frozen=True)
class StorageConfig:
    """What the `storage` check measures, how hard, and what it holds the figures against."""

    # Host paths (directories) whose throughput is measured; `--storage-path` adds to them.
    paths: tuple[str, ...] = ()
    # Bytes per read and write call (a multiple of 4096).
    block_size_bytes: int = MIB
    # Bytes of the test file, shared out among the jobs.
    size_bytes: int = 1024 * MIB
    # Threads writing (then reading) their own slice of the file at once.
    jobs: int = 4
    # Bound on the I/O of one run of the check, all paths together (write and read phases).
    time_limit_seconds: float = 60.0
    # Floors: a measured throughput below them is STORAGE_THROUGHPUT_LOW.
    min_write_bytes_per_second: float | None = None
    min_read_bytes_per_second: float | None = None
    # Measure even while GPU processes are running (they would feel the load).
    force: bool = False

    def __post_init__(self) -> None:
        for path in self.paths:
            if not path.startswith("/"):
                raise ConfigError(f"paths: {path!r} is not an absolute host path")
        bs = self.block_size_bytes
        if bs <= 0 or bs % IO_ALIGNMENT or bs > 64 * MIB:
            raise ConfigError(
                f"block_size_bytes: {bs} is not a multiple of {IO_ALIGNMENT} up to 64 MiB"
            )
        if not 1 <= self.jobs <= 64:
            raise ConfigError(f"jobs: {self.jobs} is not between 1 and 64")
        if self.size_bytes < bs * self.jobs:
            raise ConfigError(
                f"size_bytes: {self.size_bytes} is less than one block per job ({bs} x {self.jobs})"
            )
        if self.time_limit_seconds <= 0:
            raise ConfigError(f"time_limit_seconds: {self.time_limit_seconds} is not positive")
        for key in ("min_write_bytes_per_second", "min_read_bytes_per_second"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                raise ConfigError(f"{key}: {value} is not positive")


CHECK: Check[StorageData] = Check(
    NAME,
    run,
    section=StorageConfig,
    active=True,
    condition="GPUStorageReady",
    least_deadline=lambda config: LEAST_DEADLINE,
    metrics=families,
)
