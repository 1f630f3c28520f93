"""The SXid catalog, the kernel's AER counter files, and IMEX's fabric cluster test."""

from __future__ import annotations

from gpuprobe.gpu import aer, sxid_catalog
from gpuprobe.gpu.nvidia import fabric as imex
from gpuprobe.report import Action, Severity

# aer_dev_correctable / aer_dev_fatal as the kernel writes them
# (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats).
CORRECTABLE = (
    "RxErr 12\nBadTLP 3\nBadDLLP 0\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\n"
    "HeaderOF 0\nTOTAL_ERR_COR 15\n"
)
FATAL = (
    "Undefined 0\nDLP 0\nSDES 1\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\nUnxCmplt 0\nRxOF 0\n"
    "MalfTLP 0\nECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\n"
    "AtomicOpBlocked 0\nTLPBlockedErr 0\nPoisonTLPBlocked 0\nTOTAL_ERR_FATAL 1\n"
)


def test_aer_files_give_the_total_and_the_errors_above_zero() -> None:
    assert aer.parse(CORRECTABLE, "correctable") == aer.AerCounts(15, {"RxErr": 12, "BadTLP": 3})
    assert aer.parse(FATAL, "fatal") == aer.AerCounts(1, {"SDES": 1})
    # Older kernels print no total line: the sum stands in for it.
    assert aer.parse("RxErr 2\nBadTLP 1\n", "correctable") == aer.AerCounts(
        3, {"RxErr": 2, "BadTLP": 1}
    )
    assert aer.parse("garbage\n", "fatal") is None


def test_sxids_by_their_word_and_the_catalogs_class() -> None:
    fatal = sxid_catalog.classify(20034, fatal=True)
    assert (fatal.name, fatal.catalog_class, fatal.severity, fatal.action) == (
        "LTSSM Fault Up",
        "fatal",
        Severity.CRITICAL,
        Action.RESET_GPU,
    )
    # A fatal-class SXid the driver logged as Non-fatal on this port is a warning.
    assert sxid_catalog.classify(20034, fatal=False).severity is Severity.WARNING
    always = sxid_catalog.classify(22003, fatal=True)
    assert (always.catalog_class, always.action) == ("always fatal", Action.REBOOT_NODE)
    ecc = sxid_catalog.classify(11012, fatal=False)
    assert (ecc.name, ecc.severity, ecc.action) == (
        "Single bit ECC errors",
        Severity.WARNING,
        Action.NONE,
    )
    hot = sxid_catalog.classify(10004, fatal=False)
    assert hot.action is Action.HARDWARE_INSPECTION
    unknown = sxid_catalog.classify(28006, fatal=False)
    assert (unknown.name, unknown.catalog_class) == ("not in gpuprobe's SXid catalog", "unknown")


def test_a_fabric_cluster_is_a_non_zero_uuid() -> None:
    single_node = {"clusterUuid": [0] * 16, "cliqueId": 0, "state": 3}
    assert imex.cluster(single_node) is None
    member = {"clusterUuid": [0x7C, 0x3A] + [0] * 13 + [0x14], "cliqueId": 32766, "state": 3}
    assert imex.cluster(member) == ("7c3a0000-0000-0000-0000-000000000014", 32766)
    assert imex.cluster({"clusterUuid": "00000000-0000-0000-0000-000000000000"}) is None
    assert imex.cluster(None) is None
