"""The kernel log's readers held against what an attacker (or a broken program) puts in the
host's tree: `/dev/kmsg` and the followed files resolved inside the root and bounded in what
they read, a follower that never loses an XID behind a burst or a 100 MB line, only the
kernel's syslog lines counted, and forged kmsg sequence numbers that hide nothing.

Line shapes: the rsyslog lines are the two file formats rsyslog writes (rsyslog's
`RSYSLOG_FileFormat`, RFC 3339, the default of Ubuntu 24.04 and of the synthetic snapshots'
kern.log; `RSYSLOG_TraditionalFileFormat`, `Nov 29 20:58:01`), a program's line is what
`logger -i -t myapp` (util-linux logger(1)) gets written (`myapp[4242]: ...`), the XID line is
the driver's own (NVIDIA's XID catalog, "Xid 79: GPU has fallen off the bus"), and the kmsg
records follow Documentation/ABI/testing/dev-kmsg.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import require_root, snapshot
from gpuprobe.capture import prepare_target, write_snapshot
from gpuprobe.config import Config
from gpuprobe.gpu import kernel_log
from gpuprobe.gpu.amd import faults
from gpuprobe.gpu.journal.files import LogFiles
from gpuprobe.gpu.journal.record import Entry
from gpuprobe.gpu.kernel_follow import MAX_BYTES, KernelLogFollower
from gpuprobe.gpu.kmsg import KmsgLog, KmsgRecord, SeenRecords
from gpuprobe.host import recording_host, snapshot_host
from gpuprobe.host.fs import HostFS
from gpuprobe.host.kmsg import MAX_OVERRUNS, READ_BYTES, KmsgReader
from gpuprobe.host.nvml import RecordingNvml, ReplayNvml, load_record
from gpuprobe.pipeline import run_checks
from helpers import codes, config

BOOT = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)  # the synthetic snapshots' btime
NOW = datetime(2026, 11, 30, tzinfo=UTC)
HEALTHY = "synthetic-h100-8gpu-healthy"
GPU0 = "gpu:0:GPU-5f1c0000-8e2b-4c1d-9a7e-000000000000"
# The driver's XID 79 line as rsyslog writes it to kern.log (RSYSLOG_FileFormat).
XID_LINE = (
    "2026-11-29T09:40:02.511207+00:00 gpu-node-17 kernel: NVRM: Xid (PCI:0000:18:00): 79, "
    "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
)
# An ordinary kernel line, as a burst repeats it (a NIC flapping).
NOISE = (
    "2026-11-29T09:40:01.000000+00:00 gpu-node-17 kernel: mlx5_core 0000:0c:00.0: "
    "mlx5_port_module_event:1131:(pid 0): Port module event: module 0, Cable unplugged\n"
)
RING = [
    "5,0,0,-;Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103) #49-Ubuntu SMP",
    "6,1,0,-;Command line: BOOT_IMAGE=/vmlinuz-6.8.0-49-generic root=/dev/nvme0n1p2 ro",
    "6,2,21512731,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
]
FALLEN_RECORD = (
    "4,{seq},4361822917,-;NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.\n SUBSYSTEM=pci\n DEVICE=+pci:0000:18:00.0"
)
SECRET = "4,7,100,-;NVRM: Xid (PCI:0000:18:00): 79, AGENT-ONLY-c0ffee"


def write_ring(path: Path, records: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(r + "\n" for r in records))


def node(tmp_path: Path, name: str = HEALTHY) -> Path:
    dest = tmp_path / "node"
    shutil.copytree(snapshot(name), dest)
    return dest


# --- item 2: confined to the root, bounded ---------------------------------------------------


@pytest.mark.parametrize("link", ["absolute", "climbing"])
def test_a_kmsg_linked_out_of_the_root_reads_nothing_of_the_agents_files(
    tmp_path: Path, link: str
) -> None:
    outside = tmp_path / "outside" / "ring"
    write_ring(outside, [SECRET])
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    target = str(outside) if link == "absolute" else "../../../../../../../.." + str(outside)
    (root / "dev" / "kmsg").symlink_to(target)
    batch = KmsgReader(HostFS(root, snapshot=True)).read()
    assert batch.error == "absent" and batch.records == []
    # The same link's target inside the root is what is read (as a chroot would).
    write_ring(root / str(outside).lstrip("/"), [FALLEN_RECORD.format(seq=3)])
    inside = KmsgReader(HostFS(root, snapshot=True)).read()
    assert inside.error is None and [r.split(",")[1] for r in inside.records] == ["3"]


def test_a_kmsg_linked_to_dev_zero_is_not_read(tmp_path: Path) -> None:
    """Under a root the link leads to the root's /dev/zero (absent here); where it is there
    (the DaemonSet's /host/dev), a character device that is not the kernel's log device
    (1:11) is not read at all."""
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "kmsg").symlink_to("/dev/zero")
    assert KmsgReader(HostFS(tmp_path)).read().error == "absent"
    zero = KmsgReader(HostFS("/"), path="/dev/zero")
    assert zero.read().error == "not the kernel's log device (char 1:5)"
    assert zero.fileno() is None


def endless(monkeypatch: pytest.MonkeyPatch, answer: Exception | bytes) -> KmsgReader:
    """A reader of the kernel's log device whose every read gives `answer` (played through
    os.read on a device opened for it: /dev/null stands in for /dev/kmsg's numbers)."""
    real_fstat, real_read = os.fstat, os.read
    opened: list[int] = []

    def fstat(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        if not opened:
            opened.append(fd)
            fields = list(st)
            fields[6] = os.makedev(1, 11)  # st_rdev
            return os.stat_result(fields, {"st_rdev": os.makedev(1, 11)})
        return st

    def read(fd: int, size: int) -> bytes:
        if opened and fd == opened[0]:
            if isinstance(answer, Exception):
                raise answer
            return answer
        return real_read(fd, size)

    monkeypatch.setattr(os, "fstat", fstat)
    monkeypatch.setattr(os, "read", read)
    return KmsgReader(HostFS("/"), path="/dev/null")


def test_a_device_that_never_runs_dry_costs_a_bounded_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kernel's log device answering without end (as /dev/zero would): one read takes
    READ_BYTES, the log's read a bounded number of those, and memory stays near one read's."""
    reader = endless(monkeypatch, b"\0" * 8192)
    try:
        batch = reader.read()
        assert batch.more and sum(len(r) for r in batch.records) <= READ_BYTES + 8192
        del batch
        tracemalloc.start()
        log = KmsgLog(reader)
        view = log.read()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    finally:
        reader.close()
    assert view.records == 0 and log.kept() == []  # zeros are no records
    assert peak < 3 * READ_BYTES


def test_a_device_that_only_ever_overruns_ends_each_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device answering every read with EPIPE (the ring overran this reader) must not
    hold the reader for ever: a read takes a bounded number of overruns."""
    reader = endless(monkeypatch, OSError(errno.EPIPE, "Broken pipe"))
    try:
        batch = reader.read()
        view = KmsgLog(reader).read()
    finally:
        reader.close()
    assert batch.more and batch.overruns == MAX_OVERRUNS and batch.records == []
    assert view.records == 0 and view.error is None


def test_capture_under_root_keeps_no_kmsg_from_outside_it(short_tmp: Path) -> None:
    secret = short_tmp / "agent-only-ring"
    write_ring(secret, [SECRET])
    secret.chmod(0o600)
    source = Path(snapshot(HEALTHY))
    root = short_tmp / "host"
    shutil.copytree(source / "rootfs", root)
    (root / "dev").mkdir(exist_ok=True)
    (root / "dev" / "kmsg").symlink_to(secret)
    host = recording_host(str(root), "gpu-node-17")
    host.nvml = RecordingNvml(ReplayNvml(load_record(str(source / "nvml.json"))))
    live = run_checks(host, Config(), ["xid"])
    snap = short_tmp / "snap"
    write_snapshot(prepare_target(snap), host, live)
    kept = b"".join(p.read_bytes() for p in sorted(snap.rglob("*")) if p.is_file())
    assert b"AGENT-ONLY-c0ffee" not in kept
    assert not (snap / "rootfs" / "dev" / "kmsg").exists()
    (kmsg,) = [s for s in live.checks[0].data["sources"]["kernel"] if s["kind"] == "kmsg"]
    assert kmsg["error"] == "absent"


def test_the_follower_reads_its_files_inside_the_root(tmp_path: Path) -> None:
    outside = tmp_path / "outside.log"
    outside.write_text("")
    root = tmp_path / "root"
    (root / "var" / "log").mkdir(parents=True)
    (root / "var" / "log" / "kern.log").symlink_to(outside)
    follower = KernelLogFollower(
        HostFS(root, snapshot=True), ["/var/log/kern.log"], kmsg=None, files=LogFiles()
    )
    follower.start()
    try:
        with open(outside, "a") as f:
            f.write(XID_LINE)
        assert follower.new_entries() == []
    finally:
        follower.close()


@pytest.mark.parametrize("kind", ["zero device", "fifo"])
def test_a_log_that_is_no_regular_file_is_not_read(tmp_path: Path, kind: str) -> None:
    """A device (/dev/zero's numbers, as under the DaemonSet's /host/dev) or a FIFO in
    kern.log's place: the check does not read it (a device has no end, a FIFO would hold the
    reader) and the follower passes it over."""
    dest = node(tmp_path)
    kern = dest / "rootfs" / "var" / "log" / "kern.log"
    kern.unlink()
    if kind == "fifo":
        os.mkfifo(kern)
    else:
        require_root()
        os.mknod(kern, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    result = run_checks(snapshot_host(str(dest)), config(), ["xid"]).checks[0]
    assert "/var/log/kern.log" not in result.data["sources"]["kernel_logs"]
    fs = HostFS(dest / "rootfs", snapshot=True)
    follower = KernelLogFollower(fs, ["/var/log/kern.log"], None, LogFiles())
    follower.start()
    try:
        assert follower.new_entries() == []
    finally:
        follower.close()


# --- item 3: the follower never loses an XID -----------------------------------------------


def followed(tmp_path: Path) -> tuple[KernelLogFollower, Path]:
    log = tmp_path / "var" / "log" / "kern.log"
    log.parent.mkdir(parents=True)
    log.write_text(NOISE)
    follower = KernelLogFollower(
        HostFS(tmp_path, snapshot=True), ["/var/log/kern.log"], None, LogFiles()
    )
    follower.start()
    return follower, log


def xids_within(follower: KernelLogFollower, seconds: float) -> list[str]:
    """The XID lines the follower gives within `seconds`, waiting as the event path does."""
    found: list[str] = []
    deadline = time.monotonic() + seconds
    while not found and time.monotonic() < deadline:
        follower.wait(max(deadline - time.monotonic(), 0.0))
        found = xid_texts(follower.new_entries())
    return found


def xid_texts(entries: list[Entry]) -> list[str]:
    return [e.record.text for e in entries if "NVRM: Xid" in e.record.text]


def test_an_xid_after_a_20_mb_burst_is_noticed_within_two_seconds(tmp_path: Path) -> None:
    follower, log = followed(tmp_path)
    try:
        with open(log, "a") as f:
            f.write(NOISE * (20 * 1024 * 1024 // len(NOISE)))
            f.write(XID_LINE)
        started = time.monotonic()
        found = xids_within(follower, 10.0)
        elapsed = time.monotonic() - started
    finally:
        follower.close()
    assert found == [XID_LINE.rstrip("\n")]
    assert elapsed < 2.0 * float(os.environ.get("GPUPROBE_TIME_FACTOR", "1"))


def test_a_100_mb_line_is_passed_over_and_said_and_the_xids_around_it_are_given(
    tmp_path: Path,
) -> None:
    follower, log = followed(tmp_path)
    try:
        with open(log, "a") as f:
            f.write(XID_LINE)
            chunk = b"A" * (1024 * 1024)
        with open(log, "ab") as fb:
            for _ in range(100):
                fb.write(chunk)
            fb.write(b"\n")
            fb.write(XID_LINE.replace("79,", "48,").encode())
        tracemalloc.start()
        lines = xid_texts(follower.new_entries())  # the log read afresh: its last 16 MiB
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert [line.split("): ")[1][:2] for line in lines] == ["79", "48"]
        assert follower.lost == 1
        # the window's bytes, never the line: the line alone is 100 MiB
        assert peak < 3 * MAX_BYTES
        # and following goes on
        with open(log, "a") as f:
            f.write(XID_LINE)
        assert xids_within(follower, 5.0) == [XID_LINE.rstrip("\n")]
    finally:
        follower.close()


def test_the_check_reads_past_a_100_mb_line_to_the_xid_before_it(tmp_path: Path) -> None:
    dest = node(tmp_path)
    kern = dest / "rootfs" / "var" / "log" / "kern.log"
    with open(kern, "ab") as f:
        f.write(XID_LINE.encode())
        for _ in range(100):
            f.write(b"B" * (1024 * 1024))
        f.write(b"\n")
    result = run_checks(snapshot_host(str(dest)), config(), ["xid"]).checks[0]
    assert codes(result) == [("XID", "CRITICAL", "REBOOT_NODE", GPU0)]
    (entry,) = [s for s in result.data["sources"]["kernel"] if s["source"].endswith("kern.log")]
    assert entry["lost"] == 1


def test_a_kmsg_file_line_longer_than_any_record_is_skipped_and_counted(tmp_path: Path) -> None:
    ring = tmp_path / "dev" / "kmsg"
    write_ring(ring, RING)
    with open(ring, "a") as f:
        f.write("6,3,22000000,-;" + "x" * (10 * 1024 * 1024) + "\n")
        f.write(FALLEN_RECORD.format(seq=4) + "\n")
    log = KmsgLog(KmsgReader(HostFS(tmp_path, snapshot=True)))
    view = log.read()
    assert log.kept()[-1].message.endswith("GPU has fallen off the bus.")
    assert view.records == 4 and view.lost == 1  # the record it held (3): a gap


# --- item 4: only the kernel's lines --------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "kernel"),
    [
        (XID_LINE.rstrip("\n"), True),
        (
            "Nov 29 09:40:02 gpu-node-17 kernel: [ 6002.511207] NVRM: Xid (PCI:0000:18:00): 79,",
            True,
        ),
        ("2026-11-29T09:40:02+0000 gpu-node-17 kernel: NVRM: Xid (PCI:0000:18:00): 79,", True),
        ("Nov 29 09:40:02.511207 gpu-node-17 kernel: NVRM: Xid (PCI:0000:18:00): 79,", True),
        ("2026-11-29T09:40:02Z kernel: NVRM: Xid (PCI:0000:18:00): 79, x", True),  # kmsg's
        ("kernel: [ 6002.511207] NVRM: Xid (PCI:0000:18:00): 79, x", True),
        ("[ 6002.511207] NVRM: Xid (PCI:0000:18:00): 79, x", True),  # dmesg
        ("[Sun Nov 29 09:40:02 2026] NVRM: Xid (PCI:0000:18:00): 79, x", True),  # dmesg -T
        (
            "2026-11-29T09:12:40.104217+00:00 gpu-node-17 kernel: python3[41000]: segfault at 0",
            True,
        ),
        (
            "2026-11-29T09:40:02.5+00:00 gpu-node-17 myapp[4242]: NVRM: Xid (PCI:0000:2a:00): 79",
            False,
        ),
        ("Nov 29 09:40:02 gpu-node-17 myapp[4242]: NVRM: Xid (PCI:0000:2a:00): 79, x", False),
        ("Nov 29 09:40:02 gpu-node-17 myapp: kernel: Linux version 6.6.0", False),
        ("2026-11-29T09:40:02Z myapp: kernel: Linux version 6.6.0", False),
        ("myapp[4242]: NVRM: Xid (PCI:0000:2a:00): 79, x", False),
    ],
)
def test_a_line_is_the_kernels_only_under_the_kernels_tag(line: str, kernel: bool) -> None:
    assert kernel_log.is_kernel_line(line) is kernel


def test_a_programs_xid_line_in_syslog_is_not_an_xid(tmp_path: Path) -> None:
    dest = node(tmp_path)
    (dest / "rootfs" / "var" / "log" / "syslog").write_text(
        "2026-11-29T09:40:02.511207+00:00 gpu-node-17 myapp[4242]: NVRM: Xid (PCI:0000:2a:00): "
        "79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
        "2026-11-29T09:40:03.000000+00:00 gpu-node-17 myapp[4242]: NVRM: GPU 0000:2a:00.0: "
        "RmInitAdapter failed! (0x62:0x65:2522)\n"
    )
    result = run_checks(snapshot_host(str(dest)), config(), ["xid"]).checks[0]
    assert codes(result) == []
    assert result.data["xids"] == []


def test_a_programs_boot_line_does_not_end_the_boot(tmp_path: Path) -> None:
    """A host whose kernel log is only in syslog: a program's `kernel: Linux version` line
    after the driver's XID must not read as a new boot."""
    dest = node(tmp_path)
    (dest / "rootfs" / "var" / "log" / "kern.log").unlink()
    (dest / "rootfs" / "var" / "log" / "syslog").write_text(
        XID_LINE + "2026-11-29T09:41:00.000000+00:00 gpu-node-17 myapp: kernel: Linux version "
        "6.6.0 (buildd@lcy02-amd64-103) #49-Ubuntu SMP\n"
    )
    result = run_checks(snapshot_host(str(dest)), config(), ["xid"]).checks[0]
    assert codes(result) == [("XID", "CRITICAL", "REBOOT_NODE", GPU0)]


def test_a_programs_amdgpu_lines_are_no_faults() -> None:
    text = (
        "2026-11-29T09:40:02.5+00:00 gpu-node-17 myapp[4242]: amdgpu 0000:c5:00.0: amdgpu: "
        "GPU reset(2) failed\n"
        "2026-11-29T09:40:03.5+00:00 gpu-node-17 kernel: amdgpu 0000:c5:00.0: amdgpu: "
        "GPU reset(3) succeeded!\n"
    )
    found = faults.read_faults([text], boot=BOOT, now=NOW)
    assert [(f.pci, f.cause) for f in found] == [("0000:c5:00.0", faults.GPU_RESET)]


def test_the_follower_gives_only_the_kernels_lines(tmp_path: Path) -> None:
    follower, log = followed(tmp_path)
    try:
        with open(log, "a") as f:
            f.write(
                "2026-11-29T09:40:02.5+00:00 gpu-node-17 myapp[4242]: NVRM: Xid "
                "(PCI:0000:2a:00): 79, forged\n" + XID_LINE
            )
        assert xids_within(follower, 5.0) == [XID_LINE.rstrip("\n")]
    finally:
        follower.close()


# --- item 5: forged kmsg sequence numbers ---------------------------------------------------


def test_a_forged_huge_sequence_number_hides_no_later_record(tmp_path: Path) -> None:
    dest = node(tmp_path)
    (dest / "rootfs" / "var" / "log" / "kern.log").unlink()
    forged = [
        "4,18446744073709551615,5,-;a record numbered the highest u64",
        "4,99999999999999999999999,5,-;past u64: no record",
        "4,3,18446744073709551615,-;stamped the highest u64 microseconds",
    ]
    write_ring(dest / "rootfs" / "dev" / "kmsg", [*RING, *forged, FALLEN_RECORD.format(seq=4)])
    result = run_checks(snapshot_host(str(dest)), config(), ["xid"]).checks[0]
    assert codes(result) == [("XID", "CRITICAL", "REBOOT_NODE", GPU0)]
    (kmsg,) = result.data["sources"]["kernel"]
    # six records: the three of the ring, two forged ones that parse, the XID; no gap of
    # 2^64 counted as lost
    assert (kmsg["records"], kmsg["lost"]) == (6, 0)


def test_another_record_under_a_number_already_read_is_not_hidden(tmp_path: Path) -> None:
    """A damaged copy of the XID record (cut short, same number) before the record itself:
    both are records; the intact one is still read. The same record read again is not."""
    ring = tmp_path / "dev" / "kmsg"
    xid = FALLEN_RECORD.format(seq=3).split("\n")[0]
    write_ring(ring, [*RING, xid[:60], xid])
    log = KmsgLog(KmsgReader(HostFS(tmp_path, snapshot=True)))
    log.read()
    assert [r.message.endswith("GPU has fallen off the bus.") for r in log.kept()] == [
        False,
        False,
        False,
        False,
        True,
    ]
    write_ring(ring, [*RING, xid[:60], xid])  # the same file again, a new inode
    assert log.follow() == []


def test_seen_records_are_bounded() -> None:
    seen = SeenRecords(limit=3)
    records = [KmsgRecord(0, 6, n, n, "-", f"m{n}") for n in range(5)]
    assert [seen.add(r) for r in records] == [True] * 5
    assert len(seen) == 3
    assert not seen.add(records[4])  # among the last three: known
    assert seen.add(records[0])  # forgotten past the bound


def test_the_follower_gives_the_entries_of_new_kernel_lines_a_parser_reads(
    tmp_path: Path,
) -> None:
    log = tmp_path / "var" / "log" / "kern.log"
    log.parent.mkdir(parents=True)
    log.write_text("")
    fs = HostFS(tmp_path, snapshot=True)
    follower = KernelLogFollower(fs, ["/var/log/kern.log"], None, LogFiles())
    follower.start()
    try:
        with open(log, "a") as f:
            f.write(NOISE * 3 + XID_LINE + NOISE)
        (entry,) = follower.new_entries()
        assert (entry.record.text, entry.kinds) == (XID_LINE.rstrip("\n"), {"nvrm"})
        with open(log, "a") as f:
            f.write(NOISE * 3)
        assert follower.new_entries() == []
    finally:
        follower.close()
