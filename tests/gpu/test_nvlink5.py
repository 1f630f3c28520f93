"""The NVLink5 XIDs (144-150) decoded by unit, Fatal/Nonfatal word and error status.

The lines are in the driver's format (NVIDIA's catalog: `<unit> <fatal vs nonfatal>
<Crosscontain> <injected> Link <n> (<intrInfo> <errorStatus> <errorDebugData[0..4]>)`), as
GB200 and B200 nodes log them in published bug reports.
"""

from __future__ import annotations

import pytest

from gpuprobe.gpu import nvlink5
from gpuprobe.gpu.xid_catalog import classify
from gpuprobe.report import Action, Severity

_W, _C = Severity.WARNING, Severity.CRITICAL


@pytest.mark.parametrize(
    ("xid", "message", "recovery", "severity", "action"),
    [
        # GB200, link down caused by the peer (reason 0b100001): reset the GPU.
        (149, "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x00000000 "
              "0x00000000 0x00000000 0x00000000)", "RESET_GPU", _C, Action.RESET_GPU),
        # The same unit, link-down reason 0b100110 (software / user): the sheet says IGNORE.
        (149, "NETIR_LINK_EVT Fatal XC0 i0 Link 04 (0x026025c6 0x00000000 0x00000000 "
              "0x00000000 0x00000000 0x00000000)", "IGNORE", _W, Action.NONE),
        # Bit error rate event: informational.
        (149, "NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x00086226 0x00000001 0x00000000 "
              "0x00000000 0x00000000 0x00000000)", "IGNORE", _W, Action.NONE),
        (149, "NETIR_MFDE_EVENT Fatal XC0 i0 Link 00 (0x00000014 0x00000004 0x00000000 "
              "0x00000000)", "RESET_GPU", _C, Action.RESET_GPU),
        (144, "SAW_MVB Nonfatal XC0 i0 Link 00 (0x00000001 0x00000001 0x00000000 0x00000000)",
         "IGNORE", _W, Action.NONE),
        (144, "SAW_MVB Fatal XC0 i0 Link 00 (0x00000001 0x00000002 0x00000000 0x00000000)",
         "RESET_GPU", _C, Action.RESET_GPU),
        (145, "RLW_CTRL Nonfatal XC0 i0 Link 00 (0x00000003 0x80000000 0x00000000 0x00000000)",
         "IGNORE", _W, Action.NONE),
        # Remap errors: restart the application unless an Xid 154 asks for more.
        (145, "RLW_REMAP Nonfatal XC0 i0 Link 00 (0x00000004 0x00000001 0x00000000 0x00000000)",
         "XID_154_EVAL", _W, Action.RESTART_APP),
        (145, "RLW_SRC_TRACK Fatal XC0 i0 Link 03 (0x00000007 0x00000010 0x00000000 0x00000000)",
         "RESET_GPU", _C, Action.RESET_GPU),
        # RLW_RXPIPE status 0x2 is IGNORE, unless IntrInfo carries the "action 2" decode.
        (145, "RLW_RXPIPE Nonfatal XC0 i0 Link 05 (0x00000006 0x00000002 0x00000000 0x00000000)",
         "IGNORE", _W, Action.NONE),
        (145, "RLW_RXPIPE Nonfatal XC0 i0 Link 05 (0x00000086 0x00000002 0x00000000 0x00000000)",
         "RESET_GPU", _C, Action.RESET_GPU),
        (146, "TLW_RX_PIPE1 Nonfatal XC0 i0 Link 03 (0x0000000b 0x00000002 0x00000000 "
              "0x00000000)", "IGNORE", _W, Action.NONE),
        (146, "TLW_TX/TLW_TX_PIPE0 Fatal XC0 i0 Link 07 (0x0000000c 0x00000004 0x00000000 "
              "0x00000000)", "RESET_GPU", _C, Action.RESET_GPU),
        (148, "NVLPW_CTRL Nonfatal XC0 i0 Link 00 (0x0000000f 0x80000000 0x00000000 0x00000000)",
         "IGNORE", _W, Action.NONE),
        (150, "MSE_WATCHDOG Fatal XC0 i0 Link 00 (0x00000000 0x00000000 0x00000000 0x00000000)",
         "RESET_GPU", _C, Action.RESET_GPU),
    ],
)  # fmt: skip
def test_lines_are_classified_by_the_decode_table(
    xid: int, message: str, recovery: str, severity: Severity, action: Action
) -> None:
    verdict = nvlink5.decode(xid, message)
    assert verdict is not None
    assert (verdict.recovery, verdict.decoded_by) == (recovery, "decode table")
    info = classify(xid, message)
    assert (info.severity, info.action) == (severity, action)


def test_the_unit_link_and_status_are_kept_for_the_message_and_data() -> None:
    message = (
        "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000 0x00000000 0x00000000 "
        "0x00000000 0x00000000)"
    )
    verdict = nvlink5.decode(149, message)
    assert verdict is not None
    assert verdict.to_data() == {
        "unit": "NETIR_LINK_EVT",
        "fatal": True,
        "link": 1,
        "intr_info": "0x021425c6",
        "error_status": "0x00000000",
        "recovery": "RESET_GPU",
        "catalog_severity": "Link Fatal",
        "decoded_by": "decode table",
    }
    assert classify(149, message).description == (
        "NVLink5 NETIR error (NETIR_LINK_EVT Fatal, link 1, error status 0x00000000, "
        "decoded RESET_GPU)"
    )


def test_a_line_without_registers_is_judged_by_its_word() -> None:
    # B200 HGX (TensorRT-LLM issue 4816): no register list after the link.
    verdict = nvlink5.decode(145, "RLW_REMAP Nonfatal XC0 i0 Link 02")
    assert verdict is not None
    assert (verdict.decoded_by, verdict.severity, verdict.action) == (
        "Fatal/Nonfatal word",
        _W,
        Action.NONE,
    )
    fatal = nvlink5.decode(145, "RLW_REMAP Fatal XC0 i0 Link 02")
    assert fatal is not None and (fatal.severity, fatal.action) == (_C, Action.RESET_GPU)


def test_an_unlisted_status_is_judged_by_its_word() -> None:
    verdict = nvlink5.decode(144, "SAW_MVB Nonfatal XC0 i0 Link 00 (0x00000001 0x00000400)")
    assert verdict is not None
    assert (verdict.decoded_by, verdict.severity) == ("Fatal/Nonfatal word", _W)


def test_the_pre_r575_spelling_with_spaces_and_brackets_is_read() -> None:
    line = nvlink5.parse("NETIR_LINK_EVT Fatal XC 1 i 2 Link 01 [0x0000000a]")
    assert line == nvlink5.Nvlink5Line("NETIR_LINK_EVT", True, 1, True, 0x0A, None)


def test_a_line_with_neither_word_falls_back_to_the_catalog() -> None:
    assert nvlink5.decode(146, "pid=1, name=x, unexpected text") is None
    info = classify(146, "pid=1, name=x, unexpected text")
    assert (info.bucket, info.severity, info.action) == (
        "WORKFLOW_NVLINK5_ERR",
        _C,
        Action.RESET_GPU,
    )
    assert nvlink5.decode(74, "SAW_MVB Fatal XC0 i0 Link 00") is None  # not an NVLink5 XID
