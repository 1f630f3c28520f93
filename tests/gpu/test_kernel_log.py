"""Reading XID lines from kernel log files: formats, stamps, boots, PCI addresses."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuprobe.gpu.kernel_log import boot_time, line_time, parse_xid, pci_prefix, read_stream

NOW = datetime(2026, 11, 29, 22, 0, 0, tzinfo=UTC)
BOOT = datetime(2026, 11, 29, 8, 0, 0, tzinfo=UTC)


def test_an_xid_line_with_its_pci_address_number_and_text() -> None:
    line = (
        "Nov 29 20:58:01 gpu-node-17 kernel: [45678.123456] NVRM: Xid (PCI:0000:3A:00): 79, "
        "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    )
    xid = parse_xid(line, boot=BOOT, now=NOW)
    assert xid is not None
    assert (xid.pci, xid.xid) == ("0000:3a:00", 79)
    assert xid.message == "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    assert xid.time == datetime(2026, 11, 29, 20, 58, 1, tzinfo=UTC)


def test_xid_line_variants() -> None:
    plain = parse_xid("NVRM: Xid (0000:3b:00): 13, Graphics Exception", boot=None, now=NOW)
    assert plain is not None and (plain.pci, plain.xid, plain.time) == ("0000:3b:00", 13, None)
    bare = parse_xid("NVRM: Xid (PCI:0000:cb:00): 63", boot=None, now=NOW)
    assert bare is not None and (bare.xid, bare.message) == (63, "")
    assert parse_xid("NVRM: GPU at PCI:0000:3a:00: GPU-5f1c", boot=None, now=NOW) is None
    assert parse_xid("kernel: Xid is not an NVRM line: 79", boot=None, now=NOW) is None


def test_stamps_rfc3339_syslog_and_ctime() -> None:
    assert line_time("2026-11-29T20:58:01.104217+01:00 h kernel: x", boot=None, now=NOW) == (
        datetime(2026, 11, 29, 19, 58, 1, 104217, tzinfo=UTC)
    )
    assert line_time("[Fri Aug 30 11:43:09 2024] NVRM: Xid", boot=None, now=NOW) == datetime(
        2024, 8, 30, 11, 43, 9, tzinfo=UTC
    )
    assert line_time("no stamp here", boot=None, now=NOW) is None


def test_syslog_stamps_take_the_year_that_puts_them_last_before_now() -> None:
    # A December line read in January belongs to last year.
    january = datetime(2027, 1, 5, tzinfo=UTC)
    assert line_time("Dec 31 23:59:59 h kernel:", boot=None, now=january) == datetime(
        2026, 12, 31, 23, 59, 59, tzinfo=UTC
    )
    # A boot on 30 December: a January line read in January is this year's.
    boot = datetime(2026, 12, 30, tzinfo=UTC)
    assert line_time("Jan  3 01:00:00 h kernel:", boot=boot, now=january) == datetime(
        2027, 1, 3, 1, 0, 0, tzinfo=UTC
    )
    assert line_time("Feb 29 01:00:00 h kernel:", boot=boot, now=january) is None
    # Read on 1 December after a reboot on 30 November, a 28 November line is this year's (it
    # was once dated next year: never in a window's past, never to clear itself).
    december = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    reboot = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert line_time("Nov 28 14:22:51 h kernel:", boot=reboot, now=december) == datetime(
        2026, 11, 28, 14, 22, 51, tzinfo=UTC
    )
    # A local stamp up to 14 hours ahead (UTC+14) is this year's, held at now; further ahead
    # it is last year's.
    assert line_time("Dec  1 20:00:00 h kernel:", boot=None, now=december) == december
    assert line_time("Dec  2 09:00:01 h kernel:", boot=None, now=december) == datetime(
        2025, 12, 2, 9, 0, 1, tzinfo=UTC
    )


def test_only_the_current_boot_counts() -> None:
    old = "kern.log.1\n" + (
        "2026-11-28T23:10:04+00:00 h kernel: NVRM: Xid (PCI:0000:3a:00): 48, DBE\n"
        "2026-11-29T08:00:02+00:00 h kernel: [    0.000000] Linux version 6.8.0-45-generic\n"
        "2026-11-29T08:00:11+00:00 h kernel: NVRM: GPU at PCI:0000:3a:00: GPU-5f1c0002-8e2b\n"
    )
    new = "2026-11-29T14:22:51+00:00 h kernel: NVRM: Xid (PCI:0000:3a:00): 63, Row Remapper\n"
    log = read_stream([old, new], boot=BOOT, now=NOW)
    assert [(x.xid, x.pci) for x in log.xids] == [(63, "0000:3a:00")]
    assert log.uuids == {"0000:3a:00": "GPU-5f1c0002-8e2b"}


def test_lines_stamped_before_the_boot_are_an_earlier_boots_without_a_marker() -> None:
    text = (
        "2026-11-28T23:10:04+00:00 h kernel: NVRM: Xid (PCI:0000:3a:00): 48, DBE\n"
        "2026-11-29T07:58:00+00:00 h kernel: NVRM: Xid (PCI:0000:3a:00): 13, within the slack\n"
        "Nov 28 23:10:04 h kernel: NVRM: Xid (PCI:0000:3a:00): 31, a local-time stamp\n"
    )
    log = read_stream([text], boot=BOOT, now=NOW)
    # Zone-less syslog stamps could be hours off, so only the boot marker rules them out.
    assert [x.xid for x in log.xids] == [13, 31]


def test_pci_addresses_normalize() -> None:
    assert pci_prefix("00000000:3A:00.0") == "0000:3a:00"
    assert pci_prefix("0000:3a:00") == "0000:3a:00"
    assert pci_prefix("3a:00.0") == "0000:3a:00"
    assert pci_prefix("zz:yy:xx") == "zz:yy:xx"


def test_boot_time_from_proc_stat() -> None:
    assert boot_time("cpu 1 2 3\nbtime 1795939200\n") == BOOT
    assert boot_time("cpu 1 2 3\n") is None
    assert boot_time("btime soon\n") is None
    assert boot_time(None) is None


# --- faults the driver logs without an XID number, and SXids ---------------------------------


def _log(*lines: str) -> str:
    return "".join(
        f"2026-11-29T{clock}.104217+00:00 gpu-node-17 kernel: {text}\n" for clock, text in lines
    )


def test_a_multi_line_fallen_off_the_bus_message_is_xid_79_for_its_gpu() -> None:
    text = _log(
        ("20:58:01", "NVRM: The NVIDIA GPU 0000:5d:00.0"),
        ("20:58:01", "NVRM: (PCI ID: 10de:2330) installed in this system has"),
        ("20:58:01", "NVRM: fallen off the bus and is not responding to commands."),
    )
    (xid,) = read_stream([text], boot=BOOT, now=NOW).xids
    assert (xid.pci, xid.xid, xid.logged_xid) == ("0000:5d:00", 79, False)
    assert xid.message == (
        "The NVIDIA GPU 0000:5d:00.0 (PCI ID: 10de:2330) installed in this system has "
        "fallen off the bus and is not responding to commands."
    )
    assert xid.time == datetime(2026, 11, 29, 20, 58, 1, 104217, tzinfo=UTC)


def test_the_two_line_and_one_line_variants_are_read_too() -> None:
    text = _log(
        ("20:58:01", "NVRM: The NVIDIA GPU 0000:05:00.0 (PCI ID: 10de:2f04)"),
        ("20:58:01", "NVRM: fallen off the bus and is not responding to commands."),
        ("20:58:02", "nvidia 0000:05:00.0: probe with driver nvidia failed with error -1"),
        ("21:00:00", "NVRM: GPU 0000:29:00.0: GPU has fallen off the bus."),
    )
    found = read_stream([text], boot=BOOT, now=NOW).xids
    assert [(x.pci, x.xid, x.logged_xid) for x in found] == [
        ("0000:05:00", 79, False),
        ("0000:29:00", 79, False),
    ]


def test_an_xid_less_line_beside_the_numbered_xid_counts_once() -> None:
    text = _log(
        ("20:58:01", "NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU has "
                     "fallen off the bus."),
        ("20:58:01", "NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus."),
    )  # fmt: skip
    (xid,) = read_stream([text], boot=BOOT, now=NOW).xids
    assert (xid.xid, xid.logged_xid) == (79, True)


def test_rm_init_adapter_failed_is_the_gpu_initialization_error() -> None:
    text = _log(
        ("09:12:00", "NVRM: GPU 0000:3a:00.0: RmInitAdapter failed! (0x62:0x65:2522)"),
        ("09:12:00", "NVRM: GPU 0000:3a:00.0: rm_init_adapter failed, device minor number 2"),
        # An old driver names no PCI address: no GPU to tie it to.
        ("09:13:00", "NVRM: RmInitAdapter failed! (0x30:0xffffffff:720)"),
    )
    (xid,) = read_stream([text], boot=BOOT, now=NOW).xids
    assert (xid.pci, xid.xid, xid.message, xid.logged_xid) == (
        "0000:3a:00",
        143,
        "RmInitAdapter failed! (0x62:0x65:2522)",
        False,
    )


def test_sxid_lines_with_their_switch_word_and_port_detail_lines_skipped() -> None:
    text = (
        "[131453.740743] nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): 20034, Fatal, Link 30 LTSSM "
        "Fault Up\n"
        "[131453.740754] nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): 20034, Severity 1 Engine "
        "instance 30 Sub-engine instance 00\n"
        "[131453.740758] nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): 20034, Data {0x50610002, "
        "0x10100030, 0x00000000, 0x10100030, 0x00000000, 0x00000000, 0x00000000, 0x00000000}\n"
        "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted "
        "PRIV error (First)\n"
    )
    log = read_stream([text], boot=None, now=NOW)
    assert log.xids == []
    assert [(s.pci, s.device, s.sxid, s.fatal, s.link) for s in log.sxids] == [
        ("0000:a9:00.0", "nvidia-nvswitch0", 20034, True, 30),
        ("0000:05:00.0", "nvidia-nvswitch3", 12028, False, 32),
    ]
    assert log.sxids[0].message == "Link 30 LTSSM Fault Up"
