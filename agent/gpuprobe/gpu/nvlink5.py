"""The NVLink5 XIDs (144-150) decoded by their unit, `Fatal`/`Nonfatal` word and error status.

Source: NVIDIA, "Analyzing Xid Errors with the Xid Catalog"
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), its "XID 144-150
Decode" sheet and the WORKFLOW_NVLINK5_ERR guidance. The driver logs these XIDs as

    NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6
        0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)   (one line in the log)
    NVRM: Xid (PCI:0000:5f:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 02

that is `<unit> <Fatal|Nonfatal> <cross-containment> <instance> Link <n> (<intrInfo>
<errorStatus> <errorDebugData[0..4]>)`, the register list sometimes absent (the second line,
from a B200 HGX in a public bug report). The decode sheet gives, per unit and error status, the
"Data Center Recovery Action" (IGNORE, RESET_GPU, XID_154_EVAL) and the severity (Non-fatal,
Fatal, Link Fatal). Units print under their V1 (< R575) or V2 (>= R575) name, or both joined by
`/` (`NETIR_LINK_EVT/NETIR_LINK_DOWN`); the table accepts each. NETIR_LINK_EVT has no error
status: the link-down reason is IntrInfo bits 20-25, two of whose values the sheet files under
IGNORE. RLW_RXPIPE's statuses 0x1, 0x2 and 0x4 take the sheet's "action 2" (RESET_GPU) when
IntrInfo carries its decode bit (V1 IntrInfo[10:0] = 0b10011000010, V2 IntrInfo[7:0] =
0b10000110).

gpuprobe's verdicts: IGNORE → WARNING, no action; XID_154_EVAL ("take the action of an Xid 154
seen with it, else RESTART_APP") → WARNING, RESTART_APP (an Xid 154 is judged by itself);
RESET_GPU → CRITICAL, RESET_GPU. A line whose unit or status the sheet does not list is judged
by its word (Fatal → CRITICAL, RESET_GPU; Nonfatal → WARNING, no action); a line with neither
word falls back to the catalog's WORKFLOW_NVLINK5_ERR default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuprobe.report import Action, Severity

FIRST, LAST = 144, 150

_LINE = re.compile(
    r"(?P<unit>[A-Z][A-Z0-9_]*(?:/[A-Z][A-Z0-9_]*)?)\s+(?P<word>Fatal|Nonfatal|Non-fatal)\b"
    r"(?:\s+XC\s?(?P<xc>\d))?(?:\s+i\s?(?P<instance>\d+))?(?:\s+Link\s+(?P<link>\d+))?"
    r"(?:\s*[(\[](?P<registers>[^)\]]*)[)\]])?"
)
_HEX = re.compile(r"0x[0-9a-fA-F]+")

IGNORE, RESET, EVAL = "IGNORE", "RESET_GPU", "XID_154_EVAL"
NF, FATAL, LINK_FATAL = "Non-fatal", "Fatal", "Link Fatal"
SW_STATUS = 0x80000000  # "Local: none; Remote: none": a software-reported status

# (XID, unit names as printed) → {error status: (recovery action, severity)}.
_BY_STATUS: list[tuple[int, tuple[str, ...], dict[int, tuple[str, str]]]] = [
    (144, ("SAW_MVB",), {
        0x1: (IGNORE, NF), 0x2: (RESET, FATAL), 0x4: (IGNORE, NF), 0x8: (IGNORE, NF),
        0x10: (RESET, FATAL), 0x20: (IGNORE, NF),
    }),
    (145, ("RLW_CTRL",), {SW_STATUS: (IGNORE, NF)}),
    (145, ("RLW_REMAP",), {
        **{s: (EVAL, NF) for s in (0x1, 0x2, 0x4, 0x8, 0x10, 0x20)},
        0x40: (RESET, FATAL), 0x80: (RESET, FATAL), 0x100: (IGNORE, NF), 0x200: (IGNORE, NF),
        SW_STATUS: (IGNORE, NF),
    }),
    (145, ("RLW_RSPCOL",), {0x1: (IGNORE, NF), 0x2: (RESET, FATAL), SW_STATUS: (IGNORE, NF)}),
    (145, ("RLW_RXPIPE",), {
        0x1: (IGNORE, NF), 0x2: (IGNORE, NF), 0x4: (IGNORE, NF), 0x8: (IGNORE, NF),
        SW_STATUS: (IGNORE, NF),
    }),
    (145, ("RLW_SRC_TRACK",), {
        0x1: (RESET, FATAL), 0x2: (IGNORE, NF), 0x4: (EVAL, NF), 0x8: (EVAL, NF),
        0x10: (RESET, FATAL), 0x20: (RESET, FATAL), SW_STATUS: (IGNORE, NF),
    }),
    (145, ("RLW_TAGSTATE",), {
        0x1: (IGNORE, NF), 0x2: (RESET, FATAL), 0x10000: (IGNORE, NF), 0x20000: (RESET, FATAL),
        0x100000: (RESET, FATAL), SW_STATUS: (IGNORE, NF),
    }),
    *[
        (146, names, {
            0x1: (IGNORE, NF), 0x2: (IGNORE, NF), 0x4: (RESET, FATAL), SW_STATUS: (IGNORE, NF),
        })
        for names in (
            ("TLW_CTRL",),
            ("TLW_RX", "TLW_RX_PIPE0", "TLW_RX_PIPE1"),
            ("TLW_TX", "TLW_TX_PIPE0", "TLW_TX_PIPE1"),
        )
    ],
    (147, ("TREX",), {0x1: (IGNORE, NF), SW_STATUS: (IGNORE, NF)}),
    (148, ("NVLPW_CTRL", "NVLPW"), {SW_STATUS: (IGNORE, NF)}),
    (149, ("NETIR_BER_EVENT",), {s: (IGNORE, NF) for s in (0x0, 0x1, 0x2, 0x3)}),
    (149, ("NETIR_MFDE_EVENT",), {
        0x1: (RESET, FATAL), 0x3: (IGNORE, NF), 0x4: (RESET, FATAL), 0x5: (RESET, FATAL),
        0x7: (RESET, FATAL),
    }),
]  # fmt: skip
# Units whose action does not depend on the status (and every unit of Xid 150, MSE: see
# _lookup).
_WHOLE_UNIT: dict[tuple[int, str], tuple[str, str]] = {
    (149, "NETIR"): (RESET, LINK_FATAL),
    (149, "NETIR_INT"): (RESET, LINK_FATAL),
}
_LINK_EVENT_UNITS = frozenset({"NETIR_LINK_EVT", "NETIR_LINK_DOWN"})
# NETIR_LINK_EVT link-down reasons (IntrInfo[25:20]) the sheet files under IGNORE: 0b100110
# (INVESTIGATE_SW/USER) and 0b101000 (INVESTIGATE_HOST); every other listed reason is RESET_GPU.
_LINK_EVENT_IGNORED = frozenset({0b100110, 0b101000})
_RXPIPE_ACTION2 = ((0x7FF, 0b10011000010), (0xFF, 0b10000110))  # (V1 mask, value), (V2 ...)

_STATUS_TABLE: dict[tuple[int, str], dict[int, tuple[str, str]]] = {
    (xid, name): statuses for xid, names, statuses in _BY_STATUS for name in names
}

_VERDICTS = {
    IGNORE: (Severity.WARNING, Action.NONE),
    EVAL: (Severity.WARNING, Action.RESTART_APP),
    RESET: (Severity.CRITICAL, Action.RESET_GPU),
}


@dataclass(frozen=True)
class Nvlink5Line:
    """What an Xid 144-150 line says: unit, word, link and the registers it printed."""

    unit: str
    fatal: bool
    link: int | None
    cross_contained: bool | None
    intr_info: int | None
    error_status: int | None


@dataclass(frozen=True)
class Nvlink5Verdict:
    """The decode of one line: the recovery action the sheet names (or the word's), its
    severity in the sheet's words, and gpuprobe's severity and action."""

    line: Nvlink5Line
    recovery: str
    catalog_severity: str
    decoded_by: str  # "decode table" or "Fatal/Nonfatal word"
    severity: Severity
    action: Action

    def to_data(self) -> dict[str, object]:
        """The decode as the xid check's data keeps it."""
        return {
            "unit": self.line.unit,
            "fatal": self.line.fatal,
            "link": self.line.link,
            "intr_info": _hex(self.line.intr_info),
            "error_status": _hex(self.line.error_status),
            "recovery": self.recovery,
            "catalog_severity": self.catalog_severity,
            "decoded_by": self.decoded_by,
        }

    def summary(self) -> str:
        """A few words for the finding's message: `NETIR_LINK_EVT Fatal, link 1, status ...`."""
        parts = [f"{self.line.unit} {'Fatal' if self.line.fatal else 'Nonfatal'}"]
        if self.line.link is not None:
            parts.append(f"link {self.line.link}")
        if self.line.error_status is not None:
            parts.append(f"error status {_hex(self.line.error_status)}")
        parts.append(f"decoded {self.recovery}")
        return ", ".join(parts)


def _hex(value: int | None) -> str | None:
    return None if value is None else f"0x{value:08x}"


def parse(message: str) -> Nvlink5Line | None:
    """The unit, word, link and registers of an Xid 144-150 message (text after `N, `)."""
    match = _LINE.search(message)
    if match is None:
        return None
    registers = [int(h, 16) for h in _HEX.findall(match.group("registers") or "")]
    xc = match.group("xc")
    return Nvlink5Line(
        unit=match.group("unit"),
        fatal=match.group("word") == "Fatal",
        link=int(match.group("link")) if match.group("link") else None,
        cross_contained=None if xc is None else xc != "0",
        intr_info=registers[0] if registers else None,
        error_status=registers[1] if len(registers) > 1 else None,
    )


def decode(xid: int, message: str) -> Nvlink5Verdict | None:
    """The verdict on an Xid 144-150 line; None when the line carries no Fatal/Nonfatal word
    (or `xid` is no NVLink5 XID): the catalog's default then holds."""
    if not FIRST <= xid <= LAST:
        return None
    line = parse(message)
    if line is None:
        return None
    found = _lookup(xid, line)
    if found is None:
        recovery, severity = (RESET, FATAL) if line.fatal else (IGNORE, NF)
        return Nvlink5Verdict(line, recovery, severity, "Fatal/Nonfatal word", *_VERDICTS[recovery])
    recovery, severity = found
    return Nvlink5Verdict(line, recovery, severity, "decode table", *_VERDICTS[recovery])


def _lookup(xid: int, line: Nvlink5Line) -> tuple[str, str] | None:
    """The sheet's (recovery action, severity) for a line, or None when it lists neither its
    unit nor its status."""
    names = line.unit.split("/")
    if xid == LAST:  # MSE Degraded, MSE_WATCHDOG: both RESET_GPU, Fatal (firmware)
        return RESET, FATAL
    for name in names:
        whole = _WHOLE_UNIT.get((xid, name))
        if whole is not None:
            return whole
        if xid == 149 and name in _LINK_EVENT_UNITS:
            if line.intr_info is None:
                return None
            reason = (line.intr_info >> 20) & 0x3F
            return (IGNORE if reason in _LINK_EVENT_IGNORED else RESET), LINK_FATAL
        statuses = _STATUS_TABLE.get((xid, name))
        if statuses is None or line.error_status is None:
            continue
        found = statuses.get(line.error_status)
        if found is None:
            continue
        if name == "RLW_RXPIPE" and line.error_status in (0x1, 0x2, 0x4) and _action2(line):
            return RESET, found[1]
        return found
    return None


def _action2(line: Nvlink5Line) -> bool:
    """Whether RLW_RXPIPE's IntrInfo carries the decode for the sheet's action 2."""
    intr = line.intr_info
    return intr is not None and any((intr & mask) == value for mask, value in _RXPIPE_ACTION2)
