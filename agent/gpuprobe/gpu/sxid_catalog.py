"""NVIDIA's NVSwitch SXid catalog: which SXids are non-fatal, fatal, or always fatal.

Source: NVIDIA Fabric Manager User Guide (DU-09883-001), appendix "NVSwitch SXid Errors":
"Non-Fatal NVSwitch SXid Errors", "Fatal NVSwitch SXid Errors", "Always Fatal NVSwitch SXid
Errors" and "Other Notable NVSwitch SXid Errors"
(https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/). The driver prints each
SXid with its own `Fatal` / `Non-fatal` word, which decides for that line; the catalog adds the
name and whether the error is always fatal to the whole fabric. gpuprobe's verdicts on a bare
metal HGX/DGX node (the guide's recovery there):

| what the line and the catalog say   | severity | action       | recovery                       |
| ----------------------------------- | -------- | ------------ | ------------------------------ |
| Non-fatal                           | WARNING  | NONE         | none (corrected, or retried)   |
| Fatal (on this port)                | CRITICAL | RESET_GPU    | reset the GPUs and NVSwitches  |
| Always fatal (entire fabric)        | CRITICAL | REBOOT_NODE  | restart the host               |
| thermal event (10004)               | WARNING  | HARDWARE_INSPECTION | check the system cooling |

A fatal SXid stops the NVLink traffic through that switch: on an HGX baseboard every GPU has
links to every NVSwitch, so every GPU of the fabric loses it until the reset.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.report import Action, Severity

GUIDE_URL = "https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/"
NON_FATAL, FATAL, ALWAYS_FATAL, NOTABLE = "non-fatal", "fatal", "always fatal", "notable"


@dataclass(frozen=True)
class SxidInfo:
    """One SXid: its number and name, the catalog's class, and gpuprobe's verdict on a line."""

    sxid: int
    name: str
    catalog_class: str
    severity: Severity
    action: Action

    @property
    def critical(self) -> bool:
        """Critical SXids stay reported this boot until cleared."""
        return self.severity is Severity.CRITICAL


_SBE = "Single bit ECC errors"
_NAMES: dict[str, dict[int, str]] = {
    NON_FATAL: {
        11004: "Ingress invalid ACL",
        **{
            n: _SBE
            for n in (11012, 11021, 11022, 11023, 12021, 12023, 15008, 15011, 19049, 19055,
                      19057, 19059, 19062, 19065, 19068, 19071, 24001, 24002, 24003)
        },
        12028: "egress nonposted PRIV error",
        19084: "AN1 Heartbeat Timeout Error",
        20001: "TX Replay Error",
        20012: "Broken/inconsistent connection",
        22013: "Minion Link DLREQ interrupt",
    },
    FATAL: {
        11001: "ingress invalid command",
        11009: "ingress invalid VCSet",
        11013: "ingress header DBE",
        11018: "ingress RID DBE",
        11019: "ingress RLAN DBE",
        11020: "ingress control parity",
        12001: "egress crossbar overflow",
        12002: "egress packet route",
        12022: "egress input ECC DBE error",
        12024: "egress output ECC DBE error",
        12025: "egress credit overflow",
        12026: "egress destination request ID error",
        12027: "egress destination response ID error",
        12030: "egress control parity error",
        12031: "egress credit parity error",
        12032: "egress flit type mismatch",
        14017: "TS ATO timeout",
        15001: "route buffer over/underflow",
        15006: "route transdone over/underflow",
        15009: "route GLT DBE",
        15010: "route parity",
        15012: "route incoming DBE",
        15013: "route credit parity",
        19047: "NCISOC HDR ECC DBE Error",
        19048: "NCISOC DAT ECC DBE Error",
        19054: "HDR RAM ECC DBE Error",
        19056: "DAT0 RAM ECC DBE Error",
        19058: "DAT1 RAM ECC DBE Error",
        19060: "CREQ RAM HDR ECC DBE Error",
        19061: "CREQ RAM DAT ECC DBE Error",
        19063: "Response RAM HDR ECC DBE Error",
        19064: "Response RAM DAT ECC DBE Error",
        19066: "COM RAM HDR ECC DBE Error",
        19067: "COM RAM DAT ECC DBE Error",
        19069: "RSP1 RAM HDR ECC DBE Error",
        19070: "RSP1 RAM DAT ECC DBE Error",
        20034: "LTSSM Fault Up",
        22012: "Minion Link NA interrupt",
        24004: "sourcetrack TCEN0 crumbstore DBE",
        24005: "sourcetrack TCEN0 TD crumbstore DBE",
        24006: "sourcetrack TCEN1 crumbstore DBE",
        24007: "sourcetrack timeout error",
    },
    ALWAYS_FATAL: {
        10003: "Host_unhandled_interrupt",
        12020: "egress sequence ID error",
        22003: "Minion Halt",
        22011: "Minion exterror",
        23001: "ingress SRC-VC buffer overflow",
        23002: "ingress SRC-VC buffer underflow",
        23003: "egress DST-VC credit overflow",
        23004: "egress DST-VC credit underflow",
        23005: "ingress packet burst error",
        23006: "ingress packet sticky error",
        23007: "possible bubbles at ingress",
        23008: "ingress packet invalid dst error",
        23009: "ingress packet parity error",
        23010: "ingress SRC-VC buffer overflow",
        23011: "ingress SRC-VC buffer underflow",
        23012: "egress DST-VC credit overflow",
        23013: "egress DST-VC credit underflow",
        23014: "ingress packet burst error",
        23015: "ingress packet sticky error",
        23016: "possible bubbles at ingress",
        23017: "ingress credit parity error",
    },
    NOTABLE: {
        10001: "Host_priv_error",
        10002: "Host_priv_timeout",
        10004: "Host_thermal_event_start",
        10005: "Host_thermal_event_end",
    },
}  # fmt: skip
THERMAL_START = 10004

CATALOG: dict[int, tuple[str, str]] = {
    sxid: (name, catalog_class)
    for catalog_class, names in _NAMES.items()
    for sxid, name in names.items()
}


def classify(sxid: int, fatal: bool) -> SxidInfo:
    """The verdict on one SXid line: its word (`fatal`) and the catalog's class."""
    name, catalog_class = CATALOG.get(sxid, ("not in gpuprobe's SXid catalog", "unknown"))
    if catalog_class == ALWAYS_FATAL:
        return SxidInfo(sxid, name, catalog_class, Severity.CRITICAL, Action.REBOOT_NODE)
    if fatal:
        return SxidInfo(sxid, name, catalog_class, Severity.CRITICAL, Action.RESET_GPU)
    if sxid == THERMAL_START:
        return SxidInfo(sxid, name, catalog_class, Severity.WARNING, Action.HARDWARE_INSPECTION)
    return SxidInfo(sxid, name, catalog_class, Severity.WARNING, Action.NONE)
