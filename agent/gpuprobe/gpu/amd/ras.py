"""RAS facts of one AMD GPU: error counts per IP block and retired VRAM pages.

The formats are the driver's own (drivers/gpu/drm/amd/amdgpu/amdgpu_ras.c):

- `ras/<block>_err_count`: one `<kind>: <count>` line per kind, `ue` (uncorrectable) and
  `ce` (correctable), newer kernels add `de` (deferred); while RAS cannot be queried (during
  a reset) the file reads `Query currently inaccessible`.
- `ras/gpu_vram_bad_pages`: one line per retired page, `<pfn> : <page size> : <flag>` in hex,
  the flag `R` (reserved: retired), `P` (pending: marked bad, reserved at the next window) or
  `F` (the driver failed to reserve it).

The driver's retirement threshold is the `bad_page_threshold` module parameter when it is a
page count, else (-1, the default, or -2) one page per 100 MiB of VRAM (`RAS_BAD_PAGE_COVER`,
amdgpu_ras_validate_threshold), capped by the size of the board's RAS EEPROM table (which
sysfs does not show). Past it, AMD's service guide calls for the GPU's replacement; with a
page count set, the driver refuses the GPU at its next load (amdgpu_ras_eeprom.c).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

INACCESSIBLE = "Query currently inaccessible"
RAS_BAD_PAGE_COVER = 100 * 1024 * 1024
_COUNT = re.compile(r"^\s*(ue|ce|de)\s*:\s*(\d+)\s*$")
_BAD_PAGE = re.compile(r"^\s*0x([0-9a-fA-F]+)\s*:\s*0x([0-9a-fA-F]+)\s*:\s*([RPF])\s*$")


class RasFormatError(ValueError):
    """A RAS file whose text is not the driver's format."""


@dataclass(frozen=True)
class ErrorCount:
    """One IP block's RAS error counts (`umc` is the memory controller: VRAM ECC)."""

    block: str
    uncorrectable: int
    correctable: int
    deferred: int | None = None


@dataclass(frozen=True)
class BadPages:
    """The GPU's retired VRAM pages by state."""

    reserved: int
    pending: int
    failed: int

    @property
    def total(self) -> int:
        """Every page the driver marked bad, whatever its state."""
        return self.reserved + self.pending + self.failed


def parse_error_count(block: str, text: str) -> ErrorCount | None:
    """A `<block>_err_count` file's counts; None while the driver says the query is
    inaccessible. Raises RasFormatError on text of another shape."""
    if text.strip() == INACCESSIBLE:
        return None
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _COUNT.match(line)
        if match is None:
            raise RasFormatError(f"{block}_err_count: unexpected line {line.strip()[:60]!r}")
        counts[match.group(1)] = int(match.group(2))
    if "ue" not in counts or "ce" not in counts:
        raise RasFormatError(f"{block}_err_count: no ue and ce counts")
    return ErrorCount(block, counts["ue"], counts["ce"], counts.get("de"))


def parse_bad_pages(text: str) -> BadPages:
    """The `gpu_vram_bad_pages` file's pages by flag. Raises RasFormatError on text of another
    shape (the file is binary-backed: a truncated read shows as a short last line)."""
    states = {"R": 0, "P": 0, "F": 0}
    for line in text.splitlines():
        if not line.strip("\x00 \t"):
            continue
        match = _BAD_PAGE.match(line)
        if match is None:
            raise RasFormatError(f"gpu_vram_bad_pages: unexpected line {line.strip()[:60]!r}")
        states[match.group(3)] += 1
    return BadPages(states["R"], states["P"], states["F"])


def bad_page_threshold(parameter: str | None, vram_bytes: int | None) -> int | None:
    """How many bad pages the driver retires before it gives up on the GPU: the module
    parameter when it is set (0 turns retirement off: None), else the driver's own formula,
    one page per 100 MiB of VRAM. None when neither can be known."""
    value: int | None
    try:
        value = int(parameter.strip()) if parameter is not None else None
    except ValueError:
        value = None
    if value is not None and value > 0:
        return value
    if value == 0:
        return None
    if vram_bytes is None or vram_bytes <= 0:
        return None
    return vram_bytes // RAS_BAD_PAGE_COVER
