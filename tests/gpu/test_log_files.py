"""The kernel log files in the kernel journal: each file kept by its inode with a cursor, so a
long-lived agent reads and parses only what was written since its last read; a rotation keeps
what was read under the file's new name; a truncation, or growth past the window, reads the
file afresh; a line not yet ended is read again until it is. Whatever was read before, a read
gives what a fresh read of the file gives."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuprobe.gpu import kernel_events, kernel_log
from gpuprobe.gpu.journal.files import LogFiles, LogRead
from gpuprobe.gpu.journal.record import Entry, LogRecord, Span
from gpuprobe.gpu.kernel_sources import followed_files
from gpuprobe.host import Host, snapshot_host

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
PATHS = ["/var/log/kern.log.1", "/var/log/kern.log"]
WINDOW = 16 * 1024 * 1024
# Lines as rsyslog writes them to kern.log on an Ubuntu node.
XID = (
    "2026-11-29T09:40:{:02d}.511207+00:00 gpu-node-17 kernel: NVRM: Xid (PCI:0000:18:00): 79, "
    "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
)
NOISE = (
    "2026-11-29T09:39:{:02d}.101311+00:00 gpu-node-17 kernel: mlx5_core 0000:0c:00.0: "
    "Port module event: module 0, Cable unplugged\n"
)


def noise(count: int) -> str:
    return "".join(NOISE.format(i % 60) for i in range(count))


def node(tmp_path: Path, kern_log: str) -> tuple[Host, Path]:
    (tmp_path / "rootfs/var/log").mkdir(parents=True)
    log = tmp_path / "rootfs/var/log/kern.log"
    log.write_text(kern_log)
    return snapshot_host(str(tmp_path)), log


def append(path: Path, text: str | bytes) -> None:
    with open(path, "ab") as f:
        f.write(text.encode() if isinstance(text, str) else text)


def read(logs: LogFiles, host: Host, max_bytes: int = WINDOW) -> list[LogRead]:
    return [log for group in logs.read(host.fs, PATHS, max_bytes, NOW) for log in group]


def xids(reads: list[LogRead]) -> list[str]:
    """The XID lines a fold of the reads finds, as the xid check folds them."""
    items = [item for log in reads for item in log.items]
    return [x.line for x in kernel_log.fold(items, boot=None).xids]


def texts(reads: list[LogRead]) -> list[str]:
    """Every line the reads stand for (a kept span: its first and last)."""
    return [r.text for log in reads for item in log.items for r in item.records()]


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The lines made entries (parsed by every parser), as they are made."""
    made: list[str] = []
    real: Callable[[LogRecord], Entry] = kernel_events.entry_of

    def counted(record: LogRecord) -> Entry:
        made.append(record.text)
        return real(record)

    monkeypatch.setattr(kernel_events, "entry_of", counted)
    return made


def test_a_grown_log_is_read_from_its_cursor_and_each_line_parsed_once(
    tmp_path: Path, parsed: list[str]
) -> None:
    host, log = node(tmp_path, noise(500) + XID.format(1) + noise(10))
    logs = LogFiles()
    first = read(logs, host)
    assert [r.path for r in first] == ["/var/log/kern.log"]
    assert xids(first) == [XID.format(1).strip()]
    assert len(parsed) == 1
    append(log, noise(20) + XID.format(2))
    second = read(logs, host)
    assert xids(second) == [XID.format(1).strip(), XID.format(2).strip()]
    assert parsed == [XID.format(1).strip(), XID.format(2).strip()]  # the new line alone
    assert xids(second) == xids(read(LogFiles(), host))  # what a fresh read gives
    parsed.clear()
    assert xids(read(logs, host)) == xids(second)  # nothing new: the kept items, not parsed
    assert parsed == []


def test_a_run_of_lines_no_parser_reads_is_kept_as_its_first_and_last(tmp_path: Path) -> None:
    """A fold asks a run of lines no parser reads only for its times, which grow along a log:
    the run is cut to its first and last line as it is read; since when the log holds
    records is still its first stamped line."""
    unstamped = "kernel: a line without a stamp\n"
    host, _ = node(tmp_path, unstamped * 2 + noise(300) + XID.format(1) + noise(40))
    (read_,) = read(LogFiles(), host)
    assert [i.lines for i in read_.items if isinstance(i, Span)] == [
        [unstamped.strip(), NOISE.format(299 % 60).strip()],
        [NOISE.format(0).strip(), NOISE.format(39).strip()],
    ]
    assert read_.since == datetime(2026, 11, 29, 9, 39, 0, 101311, tzinfo=UTC)


def test_a_read_is_made_items_a_chunk_at_a_time_and_loses_no_line(tmp_path: Path) -> None:
    """Three MiB of a NIC's lines with XIDs among them: every XID read, in order, whatever
    chunk it falls in; the runs between are kept cut."""
    parts = [noise(3000) + XID.format(n % 60) for n in range(10)]
    host, _ = node(tmp_path, "".join(parts))
    (read_,) = read(LogFiles(), host)
    assert xids([read_]) == [XID.format(n % 60).strip() for n in range(10)]
    assert all(len(i.lines) <= 2 for i in read_.items if isinstance(i, Span))


def test_reading_a_full_window_holds_its_bytes_and_little_more(tmp_path: Path) -> None:
    """The first read of a log with 16 MiB of a NIC's lines: at its peak it holds the window's
    bytes and a chunk's lines (not the window's lines, nor a second copy of the window), and
    what it keeps is the entries and each run's first and last line."""
    host, _ = node(tmp_path, noise(16 * 1024 * 1024 // len(NOISE)) + XID.format(1))
    tracemalloc.start()
    try:
        reads = read(LogFiles(), host)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert xids(reads) == [XID.format(1).strip()]
    assert peak < 1.5 * WINDOW
    assert held < 1024 * 1024


def test_a_rotated_log_keeps_what_was_read_under_its_new_name(
    tmp_path: Path, parsed: list[str]
) -> None:
    host, log = node(tmp_path, noise(50) + XID.format(1))
    logs = LogFiles()
    read(logs, host)
    os.rename(log, log.with_name("kern.log.1"))  # logrotate: renamed, a new one created
    log.write_text(noise(5) + XID.format(2))
    rotated = read(logs, host)
    assert [r.path for r in rotated] == ["/var/log/kern.log.1", "/var/log/kern.log"]
    assert xids(rotated) == [XID.format(1).strip(), XID.format(2).strip()]
    assert parsed == [XID.format(1).strip(), XID.format(2).strip()]
    assert xids(rotated) == xids(read(LogFiles(), host))
    assert len(logs.inodes()) == 2
    os.unlink(log.with_name("kern.log.1"))  # the next rotation dropped it
    assert xids(read(logs, host)) == [XID.format(2).strip()]
    assert len(logs.inodes()) == 1  # what was kept of the gone file is let go


def test_a_truncated_log_is_read_afresh(tmp_path: Path) -> None:
    host, log = node(tmp_path, noise(50) + XID.format(1))
    logs = LogFiles()
    read(logs, host)
    os.truncate(log, 0)  # copytruncate
    append(log, noise(2))
    assert xids(read(logs, host)) == []
    append(log, XID.format(3))
    assert xids(read(logs, host)) == [XID.format(3).strip()]


def test_a_log_grown_past_the_window_is_read_afresh(tmp_path: Path, parsed: list[str]) -> None:
    host, log = node(tmp_path, XID.format(1) + noise(10))
    logs = LogFiles()
    read(logs, host, max_bytes=4096)
    append(log, noise(100) + XID.format(2))  # more than 4096 bytes since the cursor
    grown = read(logs, host, max_bytes=4096)
    assert xids(grown) == [XID.format(2).strip()]
    assert texts(grown) == texts(read(LogFiles(), host, max_bytes=4096))


def test_the_kept_window_lets_go_of_reads_the_later_ones_reach_past(tmp_path: Path) -> None:
    host, log = node(tmp_path, XID.format(1) + noise(10))
    logs = LogFiles()
    read(logs, host, max_bytes=8192)
    for second in range(2, 7):  # five reads of about 2.7 KiB each
        append(log, noise(20) + XID.format(second))
        assert xids(read(logs, host, max_bytes=8192))[-1] == XID.format(second).strip()
    kept = xids(read(logs, host, max_bytes=8192))
    fresh = xids(read(LogFiles(), host, max_bytes=8192))
    # the kept reads reach back at least the window and at most one read past it
    assert kept[-len(fresh) :] == fresh
    assert kept == [XID.format(s).strip() for s in range(7 - len(kept), 7)]
    assert len(kept) in (len(fresh), len(fresh) + 1)


def test_a_line_being_written_is_read_once_it_has_ended(tmp_path: Path, parsed: list[str]) -> None:
    """rsyslog writes its buffer out when it fills, mid-line: the part of an XID 79 line
    written so far (`...): 7`) is no XID 7, whether the file is read afresh or followed."""
    line = XID.format(4)
    cut = line.index("): 79") + len("): 7")
    host, log = node(tmp_path, noise(3) + line[:cut])
    logs = LogFiles()
    assert xids(read(logs, host)) == []
    assert xids(read(LogFiles(), host)) == []  # a one-shot read too
    assert line[:cut] not in texts(read(logs, host))
    append(log, line[cut:])
    ended = read(logs, host)
    assert xids(ended) == [line.strip()]
    assert texts(ended).count(line.strip()) == 1
    assert xids(read(logs, host)) == [line.strip()]
    assert parsed.count(line.strip()) == 1


def test_a_line_too_long_to_be_the_kernels_is_passed_over_across_reads(tmp_path: Path) -> None:
    host, log = node(tmp_path, XID.format(1))
    logs = LogFiles()
    read(logs, host)
    append(log, b"x" * (100 * 1024))  # a program's 100 KiB "line", not ended yet
    assert [r.lost for r in read(logs, host)] == [1]
    append(log, b"y" * 1024 + b"\n" + XID.format(2).encode())
    after = read(logs, host)
    assert xids(after) == [XID.format(1).strip(), XID.format(2).strip()]
    assert [r.lost for r in after] == [1]
    assert xids(after) == xids(read(LogFiles(), host))


def test_a_rounds_read_does_not_take_a_new_line_from_the_event_path(tmp_path: Path) -> None:
    """The event path's `follow` gives the entries of every line a parser read that was
    written since it last asked, even one a check's round read first; another program's
    line that only looks like the driver's is none (its tag is not the kernel's)."""
    host, log = node(tmp_path, noise(5) + XID.format(1))
    logs = LogFiles()
    entries, lost = logs.follow(host.fs, PATHS, WINDOW, NOW)  # what is there: taken
    assert ([e.record.text for e in entries], lost) == ([XID.format(1).strip()], 0)
    forged = "2026-11-29T09:40:02.5+00:00 gpu-node-17 myapp[4242]: NVRM: Xid (PCI:0000:2a:00): 79"
    append(log, forged + "\n" + XID.format(2))
    assert xids(read(logs, host))[-1] == XID.format(2).strip()  # a round read it first
    entries, lost = logs.follow(host.fs, PATHS, WINDOW, NOW)
    assert ([e.record.text for e in entries], lost) == ([XID.format(2).strip()], 0)
    assert entries[0].kinds == {"nvrm"}
    assert logs.follow(host.fs, PATHS, WINDOW, NOW) == ([], 0)


def test_the_event_path_is_given_a_line_once_it_has_ended(tmp_path: Path) -> None:
    """A line cut short by the write in progress (`...): 7`, the start of XID 79) is given to
    the event path only once its newline is written, then whole."""
    line = XID.format(5)
    cut = line.index("): 79") + len("): 7")
    host, log = node(tmp_path, noise(2))
    logs = LogFiles()
    logs.follow(host.fs, PATHS, WINDOW, NOW)
    append(log, line[:cut])
    assert logs.follow(host.fs, PATHS, WINDOW, NOW) == ([], 0)
    append(log, line[cut:])
    entries, _ = logs.follow(host.fs, PATHS, WINDOW, NOW)
    assert [e.record.text for e in entries] == [line.strip()]


def test_the_host_keeps_one_set_of_followed_files(tmp_path: Path) -> None:
    host, _ = node(tmp_path, XID.format(1))
    assert followed_files(host) is followed_files(host)
