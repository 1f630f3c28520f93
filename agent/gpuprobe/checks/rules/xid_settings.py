"""The `xid` check's section of the config file: where it reads XIDs from, where it keeps its
state, and the operators' overrides of NVIDIA's verdicts (docs/configuration.md, `xid`).

Its own module, not the end of the check's: the check's parts (`kernel`, `policy`, `sticky`,
`aer`, ...) read it, and the check's package imports them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuprobe.config import Config
from gpuprobe.errors import ConfigError

# The `xid` check's name (`model.NAME`), under which the config file holds this section.
SECTION = "xid"

_SEVERITIES = ("WARNING", "CRITICAL")
_ACTIONS = (
    "NONE", "RESTART_APP", "RESET_GPU", "REBOOT_NODE", "DRAIN_NODE", "FIX_CONFIG",
    "HARDWARE_INSPECTION", "CHECK_NETWORK", "CHECK_STORAGE",
)  # fmt: skip
_NUMBERS = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")
_VERSION_BOUND = re.compile(r"^\s*(>=|<=|>|<)\s*(\d+(?:\.\d+)*)\s*$")


def version_tuple(version: str) -> tuple[int, ...]:
    """A dotted driver version as numbers (`550.54.15` → (550, 54, 15)); () when not one."""
    parts = version.strip().split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()


@dataclass(frozen=True)
class XidPolicyRule:
    """One override of the built-in verdict on an XID or SXid number (or range): its severity,
    action, or ignoring it; only under a driver version range; only once it was seen `count`
    times within `window_seconds` (this boot when unset). docs/configuration.md, xid.policy."""

    xid: int | str | None = None
    sxid: int | str | None = None
    severity: str | None = None
    action: str | None = None
    ignore: bool = False
    driver: str | None = None
    count: int = 1
    window_seconds: float | None = None

    def __post_init__(self) -> None:
        if (self.xid is None) == (self.sxid is None):
            raise ConfigError("name one of xid or sxid (a number or a range such as 144-150)")
        self.numbers()  # validates the number or range
        if self.severity is not None and self.severity not in _SEVERITIES:
            raise ConfigError(f"severity: {self.severity!r} is not one of {', '.join(_SEVERITIES)}")
        if self.action is not None and self.action not in _ACTIONS:
            raise ConfigError(f"action: {self.action!r} is not one of {', '.join(_ACTIONS)}")
        if self.driver is not None:
            self.driver_bounds()
        if self.count < 1:
            raise ConfigError(f"count: {self.count} is below 1")
        if self.window_seconds is not None and self.window_seconds <= 0:
            raise ConfigError(f"window_seconds: {self.window_seconds:g} must be above 0")
        if self.window_seconds is not None and self.count == 1:
            raise ConfigError("window_seconds: needs a count above 1 to count within it")
        if self.ignore and (self.severity or self.action):
            raise ConfigError("ignore: an ignored number takes no severity or action")
        if not (self.ignore or self.severity or self.action or self.count > 1):
            raise ConfigError("says nothing: give severity, action, ignore or a count above 1")

    @property
    def kind(self) -> str:
        """`xid` or `sxid`."""
        return "xid" if self.xid is not None else "sxid"

    def numbers(self) -> range:
        """The XID or SXid numbers the rule covers."""
        value = self.xid if self.xid is not None else self.sxid
        if isinstance(value, bool):  # YAML's true is no XID 1
            raise ConfigError(f"{self.kind}: {value!r} is not a number or a range like 144-150")
        if isinstance(value, int):
            if value < 0:
                raise ConfigError(f"{self.kind}: {value} is negative")
            return range(value, value + 1)
        match = _NUMBERS.match(str(value))
        if match is None:
            raise ConfigError(f"{self.kind}: {value!r} is not a number or a range like 144-150")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) else low
        if high < low:
            raise ConfigError(f"{self.kind}: {value!r} ends below its start")
        return range(low, high + 1)

    def driver_bounds(self) -> list[tuple[str, tuple[int, ...]]]:
        """The version bounds: `>=550.54.15,<560` → [(">=", (550, 54, 15)), ("<", (560,))]."""
        bounds = []
        for part in (self.driver or "").split(","):
            if part.strip().startswith("=="):
                # An exact version is ambiguous: ==550 would never hold for 550.54.15.
                raise ConfigError(
                    f"driver: {self.driver!r}: == is not supported (550 would never equal "
                    "550.54.15); give a range such as >=550,<551"
                )
            match = _VERSION_BOUND.match(part)
            if match is None:
                raise ConfigError(
                    f"driver: {self.driver!r} is not a version range like >=550.54.15,<560"
                )
            bounds.append((match.group(1), version_tuple(match.group(2))))
        return bounds

    def applies_to_driver(self, version: str | None) -> bool:
        """Whether the rule holds for this driver version (a rule with a range holds for no
        driver when the version is unknown)."""
        if self.driver is None:
            return True
        have = version_tuple(version or "")
        if not have:
            return False
        tests = {
            ">=": have.__ge__, ">": have.__gt__, "<=": have.__le__, "<": have.__lt__,
        }  # fmt: skip
        return all(tests[op](bound) for op, bound in self.driver_bounds())


@dataclass(frozen=True)
class XidConfig:
    """Where the `xid` check reads XIDs from and keeps its state."""

    # The agent's own directory for sticky XIDs and operators' clearings (not a host path;
    # a hostPath mount in the DaemonSet). Unset: /var/lib/gpuprobe on the live node, and no
    # state file at all when a snapshot is replayed (so a replay never depends on this machine).
    state_dir: str | None = None
    # Host kernel log files read for `NVRM: Xid` lines; a rotated `.1` is read before its log.
    kernel_logs: tuple[str, ...] = (
        "/var/log/kern.log.1",
        "/var/log/kern.log",
        "/var/log/syslog.1",
        "/var/log/syslog",
        "/var/log/messages.1",
        "/var/log/messages",
    )
    # Read /dev/kmsg too (this boot's kernel ring; followed by sequence number in the daemon).
    kmsg: bool = True
    # Read the kernel's records of this boot from the host's systemd journal too
    # (/var/log/journal, /run/log/journal, with journalctl; followed by cursor in the daemon).
    journald: bool = False
    # How much of each log's end is read.
    kernel_log_max_bytes: int = 16 * 1024 * 1024
    # In the daemon, a WARNING XID (an application's) stays reported this long after it was
    # last seen to grow; critical XIDs stay until a reboot or a clear.
    warning_window_seconds: float = 3600.0
    # Overrides of the built-in verdicts (NVIDIA's XID and SXid catalogs), first match wins.
    policy: tuple[XidPolicyRule, ...] = ()
    # PCIe AER: correctable errors on one device rising faster than this (per hour, over the
    # daemon's rounds within aer_window_seconds) are a marginal link.
    aer_correctable_per_hour: float = 60.0
    aer_window_seconds: float = 3600.0

    def __post_init__(self) -> None:
        if self.state_dir is not None and not self.state_dir:
            raise ConfigError("state_dir: must name a directory")
        for path in self.kernel_logs:
            if not path.startswith("/"):
                raise ConfigError(f"kernel_logs: {path!r} is not an absolute host path")
        if self.kernel_log_max_bytes < 4096:
            raise ConfigError(f"kernel_log_max_bytes: {self.kernel_log_max_bytes} is below 4096")
        if self.warning_window_seconds <= 0:
            raise ConfigError(
                f"warning_window_seconds: {self.warning_window_seconds:g} must be above 0"
            )
        if self.aer_correctable_per_hour <= 0 or self.aer_window_seconds <= 0:
            raise ConfigError("aer_correctable_per_hour and aer_window_seconds must be above 0")


def xid_settings(config: Config) -> XidConfig:
    """The `xid` section of the configuration."""
    return config.section(SECTION, XidConfig)
