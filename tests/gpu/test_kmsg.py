"""`/dev/kmsg`: its records parsed, followed by sequence number (a snapshot's file and the
live device), overruns counted, and the xid check reading it beside the log files."""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conftest import require_root, snapshot
from gpuprobe.gpu.journal.record import LogRecord
from gpuprobe.gpu.kmsg import KmsgLog, parse_record
from gpuprobe.host import snapshot_host
from gpuprobe.host.fs import HostFS
from gpuprobe.host.kmsg import KmsgReader
from gpuprobe.pipeline import run_checks
from helpers import codes, config

BOOT = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)  # the synthetic snapshots' btime
# Records as the kernel prints them: priority 4 (warning) and facility 0 (kernel); the
# driver's XID line with the PCI subsystem's dictionary under it.
FALLEN = (
    "4,4,4361822917,-;NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.\n SUBSYSTEM=pci\n DEVICE=+pci:0000:18:00.0"
)
RING = [
    "5,0,0,-;Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103) (x86_64-linux-gnu-gcc-13 "
    "(Ubuntu 13.2.0-23ubuntu4) 13.2.0, GNU ld (GNU Binutils for Ubuntu) 2.42) #49-Ubuntu SMP "
    "PREEMPT_DYNAMIC Mon Nov  4 02:06:24 UTC 2024 (Ubuntu 6.8.0-49.49-generic 6.8.12)",
    "6,1,0,-;Command line: BOOT_IMAGE=/vmlinuz-6.8.0-49-generic root=/dev/nvme0n1p2 ro",
    "6,2,21337118,-;nvidia-nvlink: Nvlink Core is being initialized, major device number 509",
    "6,3,21512731,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  "
    "Tue Mar  5 22:23:56 UTC 2024",
]


def write_ring(path: Path, records: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(r + "\n" for r in records))


def append_ring(path: Path, records: list[str]) -> None:
    with open(path, "a") as f:
        f.write("".join(r + "\n" for r in records))


def test_a_record_with_its_dictionary_parses_into_its_fields() -> None:
    record = parse_record(FALLEN)
    assert record is not None
    assert (record.facility, record.level, record.sequence, record.usec, record.flags) == (
        0,
        4,
        4,
        4361822917,
        "-",
    )
    assert record.message.startswith("NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>'")
    assert record.dictionary == {"SUBSYSTEM": "pci", "DEVICE": "+pci:0000:18:00.0"}
    assert record.kernel
    # A process writing to /dev/kmsg gets the user facility (1): 14 = 1 << 3 | 6.
    user = parse_record("14,1600,4400000000,-;NVRM: Xid (PCI:0000:18:00): 79, forged")
    assert user is not None and (user.facility, user.level) == (1, 6) and not user.kernel
    # The record the kernel-log parsers read: its message, timed from the boot time plus its
    # monotonic stamp (no text printed and read back); no time while the boot's is unknown.
    journal = LogRecord.of_kmsg(
        record.message, boot=BOOT, usec=record.usec, sequence=record.sequence, boot_id=None
    )
    assert journal.text == record.message
    assert journal.time == datetime(2026, 11, 29, 9, 12, 41, 822917, tzinfo=UTC)
    assert journal.zoned and journal.cursor == "kmsg;b=-;s=4"
    unknown = LogRecord.of_kmsg(record.message, boot=None, usec=1, sequence=4, boot_id=None)
    assert (unknown.time, unknown.zoned, unknown.usec) == (None, False, 1)


@pytest.mark.parametrize(
    "text", ["", "NVRM: Xid (PCI:0000:18:00): 79", "4,x,1,-;m", "4,1,2;m", "-4,1,2,-;m", " a=b"]
)
def test_what_is_not_a_record_parses_to_none(text: str) -> None:
    assert parse_record(text) is None


def test_a_snapshot_file_is_followed_without_re_reading(tmp_path: Path) -> None:
    ring = tmp_path / "dev" / "kmsg"
    write_ring(ring, RING)
    log = KmsgLog(KmsgReader(HostFS(tmp_path, snapshot=True)))
    first = log.read()
    assert first.error is None and first.records == 4 and first.lost == 0
    assert first.first_sequence == 0 and first.first_usec == 0
    assert log.follow() == []  # nothing new: nothing read again
    append_ring(ring, [FALLEN, "14,5,4361900000,-;systemd[1]: Started foo.service."])
    new = log.follow()
    assert [r.sequence for r in new] == [4]  # the user-facility record is not the kernel's
    assert new[0].dictionary["DEVICE"] == "+pci:0000:18:00.0"
    view = log.read()
    assert view.records == 5 and view.lost == 0
    assert log.kept()[-1].message.endswith("GPU has fallen off the bus.")
    # a gap in the sequence numbers: records the ring overwrote before they were read
    aer = "3,9,4362000000,-;pcieport 0000:17:01.0: AER: device recovery failed"
    append_ring(ring, [aer])
    assert [r.sequence for r in log.follow()] == [9]
    assert log.read().lost == 3


def test_a_truncated_or_replaced_file_is_read_again_by_sequence(tmp_path: Path) -> None:
    ring = tmp_path / "dev" / "kmsg"
    write_ring(ring, RING)
    log = KmsgLog(KmsgReader(HostFS(tmp_path, snapshot=True)))
    log.read()
    # truncated and written again with the old records and a new one: only the new one counts
    write_ring(ring, [RING[-1], FALLEN])
    assert [r.sequence for r in log.follow()] == [4]
    # replaced by a new file (a new inode) holding what was read already: nothing new
    replacement = tmp_path / "dev" / "kmsg.new"
    write_ring(replacement, [FALLEN])
    os.replace(replacement, ring)
    assert log.follow() == []
    assert log.read().records == 5


def test_a_partly_written_record_waits_for_its_newline(tmp_path: Path) -> None:
    ring = tmp_path / "dev" / "kmsg"
    write_ring(ring, RING)
    log = KmsgLog(KmsgReader(HostFS(tmp_path, snapshot=True)))
    log.read()
    head, tail = FALLEN[:40], FALLEN[40:]
    with open(ring, "a") as f:
        f.write(head)
    assert log.follow() == []
    with open(ring, "a") as f:
        f.write(tail + "\n")
    assert [r.sequence for r in log.follow()] == [4]


def test_an_absent_device_says_so(tmp_path: Path) -> None:
    log = KmsgLog(KmsgReader(HostFS(tmp_path, snapshot=True)))
    view = log.read()
    assert view.error == "absent" and log.kept() == [] and view.records == 0


def test_an_overrun_of_the_ring_is_skipped_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    """EPIPE from the device (records overwritten before they were read) moves the reader on
    to the oldest record left; the gap in sequence numbers is what was lost. The live ring
    cannot be overrun on purpose here (the kernel rate-limits writes to /dev/kmsg), so the
    device's answers are played in order through os.read."""
    require_root()
    answers: list[bytes | OSError] = [
        (RING[0] + "\n").encode(),
        OSError(errno.EPIPE, "Broken pipe"),
        (FALLEN + "\n").encode(),
        BlockingIOError(errno.EAGAIN, "again"),
    ]
    real_read = os.read
    reader = KmsgReader(HostFS("/"))
    log = KmsgLog(reader)

    def device(fd: int, size: int) -> bytes:
        if fd != reader._fd:
            return real_read(fd, size)
        answer = answers.pop(0)
        if isinstance(answer, OSError):
            raise answer
        return answer

    monkeypatch.setattr(os, "read", device)
    try:
        view = log.read()
    finally:
        reader.close()
    assert view.error is None
    assert view.records == 2
    assert view.lost == 3  # records 1 to 3 were overwritten before they were read


def test_the_live_device_is_followed_record_by_record() -> None:
    """A record written to the live /dev/kmsg now is read once, after this boot's records,
    with the user facility the kernel gives what a process writes."""
    require_root()
    if not os.access("/dev/kmsg", os.R_OK | os.W_OK):
        pytest.skip("/dev/kmsg is not readable and writable here")
    reader = KmsgReader(HostFS("/"))
    log = KmsgLog(reader)
    try:
        first = reader.read()
        assert first.error is None and first.records
        assert parse_record(first.records[0]) is not None
        marker = f"gpuprobe test {uuid.uuid4()}"
        with open("/dev/kmsg", "w") as device:
            device.write(f"<6>{marker}\n")
        batch = reader.read()
        texts = [parse_record(r) for r in batch.records]
        mine = [r for r in texts if r is not None and r.message == marker]
        assert len(mine) == 1 and mine[0].facility == 1 and not mine[0].kernel
        assert reader.read().records == []  # read once
        assert log.follow() == []  # the marker is not the kernel's
    finally:
        reader.close()


def node_with_ring(tmp_path: Path, records: list[str], kern_log: bool) -> Path:
    dest = tmp_path / "node"
    shutil.copytree(snapshot("synthetic-h100-8gpu-healthy"), dest)
    write_ring(dest / "rootfs" / "dev" / "kmsg", records)
    if not kern_log:
        (dest / "rootfs" / "var" / "log" / "kern.log").unlink()
    return dest


def test_a_journald_only_node_gets_its_xid_from_kmsg(tmp_path: Path) -> None:
    node = node_with_ring(tmp_path, [*RING, FALLEN], kern_log=False)
    result = run_checks(snapshot_host(str(node)), config(), ["xid"]).checks[0]
    assert codes(result) == [("XID", "CRITICAL", "REBOOT_NODE", _gpu0(node))]
    (entry,) = result.data["xids"]
    assert (entry["gpu"], entry["xid"], entry["count"], entry["source"]) == (
        0,
        79,
        1,
        "kernel-log",
    )
    assert entry["last_seen"] == "2026-11-29T09:12:41Z"
    assert result.data["sources"]["kernel_logs"] == ["/dev/kmsg"]
    assert result.data["sources"]["kernel"] == [
        {
            "source": "/dev/kmsg",
            "kind": "kmsg",
            "since": "2026-11-29T08:00:00Z",
            "first_sequence": 0,
            "records": 5,
            "lost": 0,
        }
    ]


def test_one_record_in_kmsg_and_kern_log_counts_once(tmp_path: Path) -> None:
    node = node_with_ring(tmp_path, [*RING, FALLEN], kern_log=True)
    with open(node / "rootfs" / "var" / "log" / "kern.log", "a") as f:
        f.write(
            "2026-11-29T09:12:41.822917+00:00 gpu-node-17 kernel: NVRM: Xid (PCI:0000:18:00): "
            "79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
        )
    result = run_checks(snapshot_host(str(node)), config(), ["xid"]).checks[0]
    (entry,) = result.data["xids"]
    assert (entry["xid"], entry["count"]) == (79, 1)
    assert result.data["sources"]["kernel_logs"] == ["/dev/kmsg", "/var/log/kern.log"]
    # Off in the config: the file alone, and the ring not named.
    off = run_checks(snapshot_host(str(node)), config(xid={"kmsg": False}), ["xid"]).checks[0]
    assert off.data["sources"]["kernel_logs"] == ["/var/log/kern.log"]
    assert [k["source"] for k in off.data["sources"]["kernel"]] == ["/var/log/kern.log"]


def _gpu0(node: Path) -> str:
    result = run_checks(snapshot_host(str(node)), config(), ["gpus"]).checks[0]
    return f"gpu:0:{result.data['gpus'][0]['uuid']}"


def test_the_journald_only_snapshot_reads_its_fault_from_the_ring() -> None:
    """synthetic-kmsg-journald-only: XID 79 on GPU 3 (gone from NVML) from the ring alone;
    the driver's XID-less line for the same fault and a process's forged line do not count."""
    host = snapshot_host(snapshot("synthetic-kmsg-journald-only"))
    result = run_checks(host, config(), ["xid"]).checks[0]
    uuid3 = "GPU-5f1c0003-8e2b-4c1d-9a7e-000000000003"
    assert codes(result) == [("XID", "CRITICAL", "REBOOT_NODE", f"gpu:3:{uuid3}")]
    (entry,) = result.data["xids"]
    assert (entry["gpu"], entry["uuid"], entry["xid"], entry["count"]) == (3, uuid3, 79, 1)
    assert entry["last_seen"] == "2026-11-29T20:58:01Z"  # boot time + 46681.220311 s
    (kmsg,) = result.data["sources"]["kernel"]
    assert kmsg == {
        "source": "/dev/kmsg",
        "kind": "kmsg",
        "since": "2026-11-29T08:00:00Z",
        "first_sequence": 0,
        "records": 6,  # the seventh, a process's, is not the kernel's
        "lost": 0,
    }
