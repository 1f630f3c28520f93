"""Which CUDA toolkits a driver runs: NVIDIA's toolkit-to-minimum-driver table as data.

Source: NVIDIA CUDA Toolkit Release Notes, "CUDA Toolkit and Corresponding Driver Versions"
(Table 3, Linux x86_64 minimum driver for each toolkit release), and "CUDA Minor Version
Compatibility" (Table 2: the minimum driver for a whole major release family)
https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

Version = tuple[int, ...]


def parse_version(text: str) -> Version:
    """A dotted version as a tuple of ints (`"550.54.15"` → (550, 54, 15)); ValueError if not."""
    text = text.strip()
    if not re.fullmatch(r"\d+(\.\d+)*", text):
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(p) for p in text.split("."))


def format_version(version: Version) -> str:
    """A version tuple as dotted text."""
    return ".".join(str(p) for p in version)


@dataclass(frozen=True)
class ToolkitRelease:
    """One CUDA toolkit release and the oldest Linux driver that fully supports it."""

    version: Version  # the toolkit's own version: 12.4 Update 1 is 12.4.1
    label: str
    min_driver: Version
    min_driver_text: str  # as NVIDIA writes it, zero-padded: "580.65.06"


def _release(version: str, label: str, min_driver: str) -> ToolkitRelease:
    return ToolkitRelease(parse_version(version), label, parse_version(min_driver), min_driver)


# Newest first. The toolkit version of "Update N" is X.Y.N, except 11.0 Update 1 (11.0.3).
RELEASES: tuple[ToolkitRelease, ...] = (
    _release("13.2.2", "13.2 Update 2", "595.71.05"),
    _release("13.2.1", "13.2 Update 1", "595.58.03"),
    _release("13.2", "13.2 GA", "595.45.04"),
    _release("13.1.1", "13.1 Update 1", "590.48.01"),
    _release("13.1", "13.1 GA", "590.44.01"),
    _release("13.0.2", "13.0 Update 2", "580.95.05"),
    _release("13.0.1", "13.0 Update 1", "580.82.07"),
    _release("13.0", "13.0 GA", "580.65.06"),
    _release("12.9.1", "12.9 Update 1", "575.57.08"),
    _release("12.9", "12.9 GA", "575.51.03"),
    _release("12.8.1", "12.8 Update 1", "570.124.06"),
    _release("12.8", "12.8 GA", "570.26"),
    _release("12.6.3", "12.6 Update 3", "560.35.05"),
    _release("12.6.2", "12.6 Update 2", "560.35.03"),
    _release("12.6.1", "12.6 Update 1", "560.35.03"),
    _release("12.6", "12.6 GA", "560.28.03"),
    _release("12.5.1", "12.5 Update 1", "555.42.06"),
    _release("12.5", "12.5 GA", "555.42.02"),
    _release("12.4.1", "12.4 Update 1", "550.54.15"),
    _release("12.4", "12.4 GA", "550.54.14"),
    _release("12.3.1", "12.3 Update 1", "545.23.08"),
    _release("12.3", "12.3 GA", "545.23.06"),
    _release("12.2.2", "12.2 Update 2", "535.104.05"),
    _release("12.2.1", "12.2 Update 1", "535.86.09"),
    _release("12.2", "12.2 GA", "535.54.03"),
    _release("12.1", "12.1 GA", "530.30.02"),
    _release("12.0.1", "12.0 Update 1", "525.85.12"),
    _release("12.0", "12.0 GA", "525.60.13"),
    _release("11.8", "11.8 GA", "520.61.05"),
    _release("11.7.1", "11.7 Update 1", "515.48.07"),
    _release("11.7", "11.7 GA", "515.43.04"),
    _release("11.6.1", "11.6 Update 1", "510.47.03"),
    _release("11.6", "11.6 GA", "510.39.01"),
    _release("11.5", "11.5 GA", "495.29.05"),
    _release("11.4.3", "11.4 Update 3", "470.82.01"),
    _release("11.4.1", "11.4 Update 1", "470.57.02"),
    _release("11.4", "11.4 GA", "470.42.01"),
    _release("11.3", "11.3 GA", "465.19.01"),
    _release("11.2.1", "11.2 Update 1", "460.32.03"),
    _release("11.2", "11.2 GA", "460.27.03"),
    _release("11.1.1", "11.1 Update 1", "455.32"),
    _release("11.1", "11.1 GA", "455.23"),
    _release("11.0.3", "11.0 Update 1", "450.51.06"),
    _release("11.0.2", "11.0 GA", "450.51.05"),
    _release("10.2", "10.2", "440.33"),
)

# Minor-version compatibility (release notes, Table 2): a toolkit from the first version of a
# row up to the next row runs, with a limited feature set (no PTX JIT of newer code, no newer
# driver APIs), on a driver of at least this version. Newest first. CUDA 11.0 shipped with an
# earlier driver; the rest of 11.x needs the 450.80.02 recommended driver.
MINOR_VERSION_MIN_DRIVER: tuple[tuple[Version, Version], ...] = (
    ((13, 0), (580,)),
    ((12, 0), (525, 60, 13)),
    ((11, 1), (450, 80, 2)),
    ((11, 0), (450, 36, 6)),
)


def minor_version_min_driver(toolkit: Version) -> Version | None:
    """The oldest driver that runs `toolkit` under minor-version compatibility (None before
    CUDA 11, which had none)."""
    for first, driver in MINOR_VERSION_MIN_DRIVER:
        if _pad(toolkit)[:2] >= first:
            return driver if toolkit[0] == first[0] else None
    return None


def release_for(toolkit: Version) -> ToolkitRelease | None:
    """The table's row that governs `toolkit`: the newest row of its major.minor not newer
    than it (12.6.2 → 12.6 Update 2, 11.4.4 → 11.4 Update 3), else that major.minor's GA
    ("11.0" → 11.0 GA, whose toolkit version is 11.0.2); None for a major.minor the table
    does not list (a toolkit newer than this table, or a version that never shipped).
    """
    wanted = _pad(toolkit)
    rows = [r for r in RELEASES if _pad(r.version)[:2] == wanted[:2]]
    older = [r for r in rows if _pad(r.version) <= wanted]
    if older:
        return older[0]
    return rows[-1] if rows else None


def _pad(version: Version) -> Version:
    return (*version, 0, 0, 0)[:3]


def newest_supported(driver: Version) -> ToolkitRelease | None:
    """The newest toolkit release this driver fully supports."""
    return next((r for r in RELEASES if driver >= r.min_driver), None)


class Support(enum.StrEnum):
    """How a driver supports a toolkit: fully, under minor-version compatibility, or not."""

    FULL = "full"
    MINOR_VERSION_COMPATIBILITY = "minor-version-compatibility"
    NONE = "none"
    UNKNOWN = "unknown"


def support(
    driver: Version, toolkit: Version, driver_cuda: Version | None = None
) -> tuple[Support, ToolkitRelease | None]:
    """Whether `driver` runs code built with CUDA `toolkit`, and the table row that says so.

    For a toolkit the table does not list, the CUDA version the driver reports
    (`driver_cuda`, from NVML) decides: at least the toolkit's major.minor is full support.
    """
    release = release_for(toolkit)
    if release is not None:
        full = driver >= release.min_driver
    elif driver_cuda is not None:
        full = driver_cuda[:2] >= _pad(toolkit)[:2]
    else:
        return Support.UNKNOWN, None
    if full:
        return Support.FULL, release
    family = minor_version_min_driver(toolkit)
    if family is not None and driver >= family:
        return Support.MINOR_VERSION_COMPATIBILITY, release
    return Support.NONE, release


def cuda_version_text(encoded: int) -> str:
    """NVML's encoded CUDA driver version as text: 12040 → "12.4"."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"
