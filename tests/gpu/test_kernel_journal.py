"""The kernel journal: each record read once and parsed once into the vendors' typed events,
kept per boot with cursors; journald read through real journal files.

The journal files are made by systemd's own `systemd-journal-remote` from a stream in the
Journal Export Format (systemd.io/JOURNAL_EXPORT_FORMATS), the fields those journald keeps for
a kernel record (systemd.journal-fields(7): `_TRANSPORT=kernel`, `SYSLOG_FACILITY=0`,
`SYSLOG_IDENTIFIER=kernel`, `_KERNEL_SUBSYSTEM`, `_KERNEL_DEVICE`), and read back with the real
`journalctl`. The messages are the driver's lines the other kernel-log tests carry (XID 79 as
NVIDIA's driver logs it, an NVSwitch SXid from the Fabric Manager guide, amdgpu's reset line,
the AER driver's received line)."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import require, require_tool, snapshot
from gpuprobe.gpu import aer, kernel_events, kernel_log
from gpuprobe.gpu.amd import faults
from gpuprobe.gpu.journal import journald
from gpuprobe.gpu.journal.journal import Cursor, KernelJournal
from gpuprobe.gpu.journal.record import Entry, LogRecord
from gpuprobe.gpu.kmsg import KmsgLog
from gpuprobe.host import snapshot_host
from gpuprobe.host.fs import HostFS
from gpuprobe.host.journald import read_kernel
from gpuprobe.host.kmsg import KmsgReader
from gpuprobe.pipeline import run_checks
from helpers import codes, config

BOOT = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
BOOT_ID = "3f0c2a9e8d7b4c1aa5e6f7081920abcd"
OTHER_BOOT = "9a8b7c6d5e4f40312a1b2c3d4e5f6071"
MACHINE_ID = "0123456789abcdef0123456789abcdef"
XID = "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
SXID = (
    "nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 28006, Non-fatal, Link 46 MC TS crumbstore "
    "MCTO (First)"
)
AMD = "amdgpu 0000:c5:00.0: amdgpu: GPU reset(3) succeeded!"
AER = "pcieport 0000:17:01.0: AER: Uncorrected (Fatal) error received: 0000:18:00.0"
NOISE = "mlx5_core 0000:0c:00.0: Port module event: module 0, Cable unplugged"
# Records as the kernel prints them to /dev/kmsg (priority, sequence, usec, flags; message).
RING = [
    "5,0,0,-;Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103) #49-Ubuntu SMP",
    f"6,1,21337118,-;{NOISE}",
    f"4,2,4361822917,-;{XID}\n SUBSYSTEM=pci\n DEVICE=+pci:0000:18:00.0",
]


def write_ring(root: Path, records: list[str], mode: str = "w") -> None:
    path = root / "dev" / "kmsg"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode) as f:
        f.write("".join(r + "\n" for r in records))


def journal_of(root: Path, boot_id: str = BOOT_ID) -> KernelJournal:
    return KernelJournal(
        KmsgLog(KmsgReader(HostFS(root, snapshot=True))), boot=BOOT, boot_id=boot_id
    )


def texts(entries: list[Entry]) -> list[str]:
    return [e.record.text for e in entries]


def test_each_record_is_parsed_once_by_every_registered_parser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record is parsed once when first read, whoever reads it (the follower or a round),
    however often the boot is read after: a full ring is not parsed again every run."""
    calls: Counter[str] = Counter()

    def counted(name: str, read):  # type: ignore[no-untyped-def]
        def wrapper(record: LogRecord) -> object | None:
            calls[f"{name}:{record.text[:12]}"] += 1
            return read(record)

        return wrapper

    readers = tuple(counted(p.__name__, p.event_of) for p in kernel_events.PARSERS)
    monkeypatch.setattr(kernel_events, "READERS", readers)
    write_ring(tmp_path, RING)
    journal = journal_of(tmp_path)
    assert texts(journal.follow()) == [
        RING[0].partition(";")[2],
        NOISE,
        XID,
    ]  # the follower took them
    for _ in range(3):
        assert len(journal.this_boot(BOOT, BOOT_ID, known=True).entries) == 3
    assert set(calls.values()) == {1} and len(calls) == 3 * len(kernel_events.PARSERS)
    write_ring(tmp_path, [f"4,3,4361900000,-;{AMD}"], mode="a")
    assert texts(journal.this_boot().entries)[-1] == AMD
    assert set(calls.values()) == {1} and len(calls) == 4 * len(kernel_events.PARSERS)


def test_a_records_events_are_typed_and_timed_from_the_record(tmp_path: Path) -> None:
    """The XID's time is the boot time plus the record's monotonic stamp, to the microsecond:
    no text printed and read back."""
    write_ring(tmp_path, [*RING, f"4,3,4361900000,-;{AMD}", f"3,4,4362000000,-;{AER}"])
    entries = journal_of(tmp_path).this_boot().entries
    xid = entries[2].event(kernel_log.NvrmEvent)
    assert xid is not None and isinstance(xid.found, kernel_log.XidLine)
    assert (xid.found.pci, xid.found.xid, xid.found.time) == (
        "0000:18:00",
        79,
        datetime(2026, 11, 29, 9, 12, 41, 822917, tzinfo=UTC),
    )
    assert entries[2].record.cursor == f"kmsg;b={BOOT_ID};s=2"
    amd = entries[3].event(faults.AmdgpuEvent)
    assert amd is not None and amd.fault is not None
    assert (amd.fault.pci, amd.fault.cause) == ("0000:c5:00.0", faults.GPU_RESET)
    found = entries[4].event(aer.AerEvent)
    assert found is not None
    assert (found.port, found.source, found.severity, found.multiple) == (
        "0000:17:01.0",
        "0000:18:00.0",
        "Uncorrected (Fatal)",
        False,
    )
    assert entries[1].events == ()  # a NIC's line: no parser reads it
    log = kernel_log.fold(entries, boot=BOOT, boots=False)
    assert [(x.pci, x.xid) for x in log.xids] == [("0000:18:00", 79)]


def test_since_a_cursor_gives_only_the_new_records_across_a_restart(tmp_path: Path) -> None:
    """A reader that kept its cursor, restarted (a new journal on the same ring), gets only
    what came after it."""
    write_ring(tmp_path, RING)
    first = journal_of(tmp_path).this_boot()
    assert first.cursor == f"kmsg;b={BOOT_ID};s=2"
    write_ring(tmp_path, [f"4,3,4361900000,-;{AMD}", f"3,4,4362000000,-;{AER}"], mode="a")
    restarted = journal_of(tmp_path)  # reads the whole ring again, from its start
    since = restarted.since(first.cursor)
    assert texts(since.entries) == [AMD, AER]
    assert since.cursor == f"kmsg;b={BOOT_ID};s=4"
    assert restarted.since(since.cursor).entries == []
    assert len(restarted.since(None).entries) == 5


def test_a_rounds_read_does_not_take_a_record_from_the_event_path(tmp_path: Path) -> None:
    """The event path's `follow` gives every record that arrived since it last asked, even one
    a check's round read from the ring first (the pods check reads the kernel log too)."""
    write_ring(tmp_path, RING)
    journal = journal_of(tmp_path)
    assert len(journal.follow()) == 3  # the event path starts: what is there is taken
    write_ring(tmp_path, [f"4,3,4361900000,-;{AMD}"], mode="a")
    assert texts(journal.this_boot().entries)[-1] == AMD  # a round read it first
    assert texts(journal.follow()) == [AMD]
    assert journal.follow() == []


def test_a_boot_change_starts_a_new_boots_records(tmp_path: Path) -> None:
    """The boot id changed: the new boot's records only; a cursor of the old boot gives the
    whole new boot; the old boot is kept as the previous one."""
    write_ring(tmp_path, RING)
    journal = journal_of(tmp_path)
    old = journal.this_boot()
    write_ring(tmp_path, [f"4,0,1000,-;{AMD}"], mode="a")  # the new boot's ring restarts at 0
    new = journal.this_boot(BOOT, OTHER_BOOT, known=True)
    assert texts(new.entries) == [AMD]
    assert new.entries[0].record.cursor == f"kmsg;b={OTHER_BOOT};s=0"
    assert texts(journal.since(old.cursor).entries) == [AMD]
    previous = journal.previous_boot()
    assert previous is not None and previous[0] == BOOT_ID and len(previous[1]) == 3


def test_an_unreadable_ring_says_so(tmp_path: Path) -> None:
    read = journal_of(tmp_path).this_boot()
    assert read.ring.error == "absent" and read.entries == [] and read.cursor is None


@pytest.mark.parametrize("text", ["", "kmsg;b=x", "kmsg;s=3", "journal;b=x;s=1", "kmsg;b=-;s=-1"])
def test_what_is_no_cursor_reads_as_none(text: str) -> None:
    assert Cursor.parse(text) is None


# journald, through real journal files

JOURNAL_REMOTE = "/lib/systemd/systemd-journal-remote"


def export_entry(message: str, usec: int, *, boot_id: str = BOOT_ID, kernel: bool = True) -> str:
    """One entry in the Journal Export Format, with the fields journald keeps for a kernel
    record (or for a process's record written to the journal, `kernel` False)."""
    realtime = int(BOOT.timestamp() * 1_000_000) + usec
    fields = [
        f"__REALTIME_TIMESTAMP={realtime}",
        f"__MONOTONIC_TIMESTAMP={usec}",
        f"_BOOT_ID={boot_id}",
        f"_MACHINE_ID={MACHINE_ID}",
        "_HOSTNAME=gpu-node-17",
    ]
    if kernel:
        fields += [
            "_TRANSPORT=kernel",
            "SYSLOG_FACILITY=0",
            "SYSLOG_IDENTIFIER=kernel",
            "PRIORITY=4",
            f"_SOURCE_MONOTONIC_TIMESTAMP={usec}",
        ]
    else:
        fields += ["_TRANSPORT=syslog", "SYSLOG_IDENTIFIER=myapp", "_PID=4242", "PRIORITY=4"]
    return "\n".join([*fields, f"MESSAGE={message}"]) + "\n\n"


def make_journal(root: Path, entries: list[str], name: str = "system.journal") -> Path:
    """A real journal file under the root's /var/log/journal/<machine id>/, written by
    systemd-journal-remote from the export stream."""
    require(Path(JOURNAL_REMOTE).exists(), "systemd-journal-remote is not installed")
    require_tool("journalctl")
    directory = root / "var" / "log" / "journal" / MACHINE_ID
    directory.mkdir(parents=True, exist_ok=True)
    stream = root / "export.txt"
    stream.write_text("".join(entries))
    target = directory / name
    subprocess.run(
        [JOURNAL_REMOTE, f"--output={target}", str(stream)], check=True, capture_output=True
    )
    return target


def test_journald_gives_this_boots_kernel_records_with_cursors(tmp_path: Path) -> None:
    make_journal(
        tmp_path,
        [
            export_entry(XID, 1_000_000, boot_id=OTHER_BOOT),  # an earlier boot's
            export_entry("Linux version 6.8.0-49-generic", 0),
            export_entry(XID, 4_361_822_917, kernel=False),  # a process planting the text
            export_entry(XID, 4_361_822_917),
            export_entry(SXID, 4_361_900_000),
        ],
    )
    fs = HostFS(tmp_path, snapshot=True)
    boot = journald.read_boot(fs, BOOT_ID)
    assert boot.errors == {"/var/log/journal": None, "/run/log/journal": "absent"}
    assert journald.read_boot(fs, "00000000000000000000000000000000").errors == {
        "/var/log/journal": "no kernel records of this boot",
        "/run/log/journal": "absent",
    }
    assert [r.text for r in boot.records] == ["Linux version 6.8.0-49-generic", XID, SXID]
    xid = boot.records[1]
    assert xid.time == datetime(2026, 11, 29, 9, 12, 41, 822917, tzinfo=UTC)
    assert (xid.usec, xid.boot_id, xid.zoned) == (4_361_822_917, BOOT_ID, True)
    assert xid.cursor is not None and f"b={BOOT_ID}" in xid.cursor
    entries = [kernel_events.entry_of(r) for r in boot.records]
    log = kernel_log.fold(entries, boot=BOOT, boots=False)  # a journal's boot is one boot
    assert [(x.pci, x.xid, x.time) for x in log.xids] == [("0000:18:00", 79, xid.time)]
    assert [(s.device, s.sxid, s.link) for s in log.sxids] == [("nvidia-nvswitch3", 28006, 46)]
    # since the XID's cursor: the SXid only; since the last: nothing new
    after = journald.read_boot(fs, BOOT_ID, after_cursor=xid.cursor)
    assert [r.text for r in after.records] == [SXID]
    assert journald.read_boot(fs, BOOT_ID, after_cursor=after.cursor).records == []
    assert [r.text for r in journald.read_boot(fs, OTHER_BOOT).records] == [XID]


def test_journald_new_records_after_a_cursor_survive_a_restart(tmp_path: Path) -> None:
    """journald rotated its file (a new file beside the archived one): a cursor kept across
    the restart gives only the records after it."""
    make_journal(tmp_path, [export_entry(XID, 4_361_822_917)], "system@archived.journal")
    fs = HostFS(tmp_path, snapshot=True)
    cursor = journald.read_boot(fs, BOOT_ID).cursor
    make_journal(tmp_path, [export_entry(AMD, 4_400_000_000)])
    assert [r.text for r in journald.read_boot(fs, BOOT_ID, after_cursor=cursor).records] == [AMD]


def test_unreadable_journals_say_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No journal directory, a file where it should be, no journalctl: each says why, never
    an empty boot read as all clear."""
    fs = HostFS(tmp_path, snapshot=True)
    assert read_kernel(fs, "/var/log/journal", boot_id=BOOT_ID).error == "absent"
    (tmp_path / "var" / "log").mkdir(parents=True)
    (tmp_path / "var" / "log" / "journal").write_text("not a directory")
    assert read_kernel(fs, "/var/log/journal", boot_id=BOOT_ID).error == "absent"
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert journald.read_boot(fs, BOOT_ID).errors == {
        "/var/log/journal": "journalctl not found",
        "/run/log/journal": "journalctl not found",
    }


def test_a_damaged_journal_file_is_no_empty_boot(tmp_path: Path) -> None:
    """A journal file cut short (a node that lost power): journalctl passes over it without
    a word; a boot with no kernel record at all says so rather than reading as all clear."""
    target = make_journal(tmp_path, [export_entry(XID, 4_361_822_917)])
    target.write_bytes(target.read_bytes()[:4096])
    read = read_kernel(HostFS(tmp_path, snapshot=True), "/var/log/journal", boot_id=BOOT_ID)
    assert (read.records, read.error) == ([], "no kernel records of this boot")


# the xid check reading the journal

NODE_BOOT = "3f0c5a8e-6a1d-4f0b-9a57-2b8c1e7d4f10"  # synthetic-h100-8gpu-healthy's boot_id


def journald_node(tmp_path: Path, entries: list[str]) -> Path:
    """synthetic-h100-8gpu-healthy as a journald-only node (no kernel log file), its journal
    holding `entries`."""
    node = tmp_path / "node"
    shutil.copytree(snapshot("synthetic-h100-8gpu-healthy"), node)
    (node / "rootfs" / "var" / "log" / "kern.log").unlink()
    make_journal(node / "rootfs", entries)
    return node


def test_the_xid_check_reads_its_xid_from_the_journal(tmp_path: Path) -> None:
    boot = NODE_BOOT.replace("-", "")
    node = journald_node(
        tmp_path,
        [
            export_entry(XID, 1_000_000, boot_id=OTHER_BOOT),
            export_entry(XID, 4_361_822_917, boot_id=boot),
        ],
    )
    cfg = config(xid={"journald": True, "kmsg": False})
    result = run_checks(snapshot_host(str(node)), cfg, ["xid"]).checks[0]
    assert [(c[0], c[1]) for c in codes(result)] == [("XID", "CRITICAL")]
    (entry,) = result.data["xids"]
    assert (entry["gpu"], entry["xid"], entry["count"], entry["source"]) == (0, 79, 1, "kernel-log")
    assert entry["last_seen"] == "2026-11-29T09:12:41Z"
    assert result.data["sources"]["kernel_logs"] == ["journald"]
    assert result.data["sources"]["kernel"][0] == {
        "source": "journald",
        "kind": "journald",
        "since": "2026-11-29T09:12:41Z",
        "records": 1,
    }


def test_a_journal_that_cannot_be_read_is_no_all_clear(tmp_path: Path) -> None:
    """journald the only kernel-log source, and no journal on the node: the check says it read
    no source of XIDs (UNKNOWN), naming why."""
    node = journald_node(tmp_path, [export_entry(XID, 4_361_822_917, boot_id=OTHER_BOOT)])
    cfg = config(xid={"journald": True, "kmsg": False})
    result = run_checks(snapshot_host(str(node)), cfg, ["xid"]).checks[0]
    assert result.status.value == "UNKNOWN" and result.data["xids"] == []
    assert result.data["sources"]["kernel"][0] == {
        "source": "journald",
        "kind": "journald",
        "since": None,
        "error": "/var/log/journal: no kernel records of this boot; /run/log/journal: absent",
    }
    assert result.data["sources"]["kernel_logs"] == []


def test_a_read_of_the_journal_is_bounded_to_the_newest_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A boot with more kernel records than the journal keeps: the newest are read (the
    XID last among them), not the whole boot into memory."""
    from gpuprobe.host import journald as host_journald

    make_journal(
        tmp_path,
        [export_entry(NOISE, 1_000), export_entry(AMD, 2_000), export_entry(XID, 3_000)],
    )
    monkeypatch.setattr(host_journald, "MAX_RECORDS", 2)
    boot = journald.read_boot(HostFS(tmp_path, snapshot=True), BOOT_ID)
    assert [r.text for r in boot.records] == [AMD, XID]


def test_the_followed_journal_parses_each_record_once_and_starts_anew_on_a_new_boot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's journal follower: a second read asks journalctl only for what came after
    its cursor (nothing parsed again), keeps the boot's records, and a new boot id starts
    that boot's records alone."""
    from gpuprobe.gpu.journal.journald import JournaldJournal

    make_journal(
        tmp_path,
        [
            export_entry(XID, 4_361_822_917),
            export_entry(AMD, 4_400_000_000),
            export_entry(SXID, 1_000_000, boot_id=OTHER_BOOT),
        ],
    )
    parsed: list[str] = []
    real = kernel_events.entry_of

    def counted(record: LogRecord) -> Entry:
        parsed.append(record.text)
        return real(record)

    monkeypatch.setattr(kernel_events, "entry_of", counted)
    journal = JournaldJournal(HostFS(tmp_path, snapshot=True))
    entries, errors = journal.this_boot(BOOT_ID)
    assert texts(entries) == [XID, AMD] and errors["/var/log/journal"] is None
    assert journal.this_boot(BOOT_ID)[0] == entries  # kept; journalctl gave nothing new
    assert parsed == [XID, AMD]
    assert texts(journal.this_boot(OTHER_BOOT)[0]) == [SXID]
    assert parsed == [XID, AMD, SXID]


def test_a_changed_boot_time_re_times_the_kept_records_once(tmp_path: Path) -> None:
    """/proc/stat's btime moved (the clock was stepped): the kept records are timed from the
    new boot time, each made again once, none twice."""
    write_ring(tmp_path, RING)
    journal = journal_of(tmp_path)
    assert journal.this_boot().entries[2].record.time == datetime(
        2026, 11, 29, 9, 12, 41, 822917, tzinfo=UTC
    )
    later = datetime(2026, 11, 29, 8, 0, 1, tzinfo=UTC)
    entries = journal.this_boot(later, BOOT_ID, known=True).entries
    assert texts(entries) == [RING[0].partition(";")[2], NOISE, XID]
    assert entries[2].record.time == datetime(2026, 11, 29, 9, 12, 42, 822917, tzinfo=UTC)
    assert entries[2].record.cursor == f"kmsg;b={BOOT_ID};s=2"


def test_a_files_lines_no_parser_reads_are_kept_as_text_and_still_move_the_log_on() -> None:
    """A log file's lines holding none of the parsers' cheap tests make no record (a 16 MiB
    log is mostly such lines); an amdgpu reset left open is still found unfinished when the
    log moves on past it in them (NixOS/nixpkgs#176915's shape: a blocked task three minutes
    on), as when every line is a record."""
    from gpuprobe.gpu.journal.record import Span

    log = [
        "[Wed Jun  8 16:35:32 2022] amdgpu 0000:03:00.0: amdgpu: GPU reset begin!",
        "[Wed Jun  8 16:35:40 2022] EXT4-fs (nvme0n1p2): re-mounted. Quota mode: none.",
        "[Wed Jun  8 16:38:26 2022] INFO: task InputThread:1375 blocked for more than 122 seconds.",
        "[Wed Jun  8 16:38:27 2022] NVRM: GPU at PCI:0000:18:00: GPU-5f1c0a4e-9d7b",
    ]
    now = datetime(2022, 6, 8, 17, 0, tzinfo=UTC)
    items = kernel_events.items_of(log, now)
    assert [type(i).__name__ for i in items] == ["Entry", "Span", "Entry"]
    span = items[1]
    assert isinstance(span, Span) and span.lines == log[1:3] and span.events == ()
    found = faults.fold(items, boot=None, boots=True)
    assert found == faults.read_faults(["\n".join(log)], boot=None, now=now)
    assert [(f.pci, f.cause) for f in found] == [("0000:03:00.0", faults.GPU_RESET_UNFINISHED)]
    assert kernel_log.fold(items, boot=None).uuids == {"0000:18:00": "GPU-5f1c0a4e-9d7b"}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        # journalctl writes a message that is not UTF-8 as its bytes (JSON output, journalctl(1))
        ({"MESSAGE": [0xFF, 0x41], "__CURSOR": "c"}, ("\ufffdA", None, None)),
        ({"MESSAGE": [72, 300]}, None),  # no byte: no message
        ({"MESSAGE": None}, None),
        ({"MESSAGE": "m", "__REALTIME_TIMESTAMP": "9" * 20}, ("m", None, None)),  # past 9999
        ({"MESSAGE": "m", "__MONOTONIC_TIMESTAMP": "-5"}, ("m", None, None)),
        (
            {
                "MESSAGE": "m",
                "__REALTIME_TIMESTAMP": "1764403961822917",
                "__MONOTONIC_TIMESTAMP": "7",
            },
            ("m", datetime(2025, 11, 29, 8, 12, 41, 822917, tzinfo=UTC), 7),
        ),
    ],
)
def test_a_journal_entry_with_odd_fields_is_read_or_passed_over(
    fields: dict[str, object], expected: tuple[str, datetime | None, int | None] | None
) -> None:
    record = journald.record_of(fields)
    if expected is None:
        assert record is None
    else:
        assert record is not None and (record.text, record.time, record.usec) == expected
