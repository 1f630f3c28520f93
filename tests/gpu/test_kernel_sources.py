"""The kernel log read once a run (`gpu.kernel_sources`): the sources, their texts, and both
vendors' parsers fed from the one read."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

import pytest

from gpuprobe.checks import xid
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.xid.settings import XidConfig
from gpuprobe.config import Config
from gpuprobe.gpu.journal.files import LogFiles, rotation_streams
from gpuprobe.gpu.kernel_sources import KernelLogRead, boot_id, read_kernel_log
from gpuprobe.gpu.log_tail import MAX_LINE_BYTES, MAX_SCAN_BYTES, Tail, read_tail
from gpuprobe.host import Host, snapshot_host
from helpers import snapshot

NOW = datetime(2026, 11, 30, tzinfo=UTC)
BOOT = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


def read(host: Host, kmsg: bool = True) -> KernelLogRead:
    settings = XidConfig()
    return read_kernel_log(
        host,
        kmsg=kmsg,
        paths=settings.kernel_logs,
        max_bytes=settings.kernel_log_max_bytes,
        now=NOW,
    )


def test_an_amd_nodes_log_files_give_the_sources_and_amdgpus_faults() -> None:
    log = read(snapshot_host(snapshot("synthetic-amd-ring-timeout-reset")))
    assert (log.boot, log.now, log.opened) == (BOOT, NOW, ("/var/log/kern.log",))
    assert log.sources == (
        {"source": "/dev/kmsg", "kind": "kmsg", "since": None, "error": "absent"},
        {"source": "/var/log/kern.log", "kind": "file", "since": "2026-11-29T08:00:02Z"},
    )
    # kern.log's lines, each one record (syslog and messages absent)
    assert [(s.kind, len(s.entries)) for s in log.streams] == [
        ("file", 18),
        ("file", 0),
        ("file", 0),
    ]
    assert [[(f.pci, f.cause, f.process) for f in s] for s in log.amdgpu_faults()] == [
        [
            ("0000:38:00.0", "ring_timeout", "python3 (pid 48211)"),
            ("0000:38:00.0", "gpu_reset", None),
        ],
        [],
        [],
    ]
    assert [(len(k.xids), len(k.sxids)) for k in log.nvidia_logs()] == [(0, 0)] * 3


def test_kmsg_is_followed_and_read_by_both_vendors_parsers() -> None:
    host = snapshot_host(snapshot("synthetic-kmsg-journald-only"))
    log = read(host)
    assert log.opened == ("/dev/kmsg",)
    assert log.sources == (
        {
            "source": "/dev/kmsg",
            "kind": "kmsg",
            "since": "2026-11-29T08:00:00Z",
            "first_sequence": 0,
            "records": 6,
            "lost": 0,
        },
    )
    assert [s.kind for s in log.streams] == ["kmsg", "file", "file", "file"]
    assert [[(x.pci, x.xid) for x in k.xids] for k in log.nvidia_logs()] == [
        [("0000:5d:00", 79)],
        [],
        [],
        [],
    ]
    assert log.amdgpu_faults() == [[], [], [], []]  # an NVIDIA node's ring: no amdgpu line
    # Read again in the same agent: the records kept are given again, none read twice.
    assert read(host) == log
    assert read(host, kmsg=False).sources == ()


def test_each_log_file_is_read_once_a_run_on_a_node_with_amd_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    host = snapshot_host(snapshot("synthetic-amd-ring-timeout-reset"))
    reads: Counter[str] = Counter()
    real = host.fs.open_binary

    def counted(path: str) -> BinaryIO:
        reads[path] += 1
        return real(path)

    monkeypatch.setattr(host.fs, "open_binary", counted)
    result = xid.run(CheckContext(host), Config())
    assert [f.code for f in result.findings] == ["AMDGPU_FAULT", "AMDGPU_FAULT"]
    assert set(reads.values()) == {1}
    assert "/var/log/kern.log" in reads


def test_rotated_files_are_one_stream_oldest_first() -> None:
    paths = ["/var/log/kern.log", "/var/log/syslog", "/var/log/kern.log.2", "/var/log/kern.log.1"]
    assert rotation_streams(paths) == [
        ["/var/log/kern.log.2", "/var/log/kern.log.1", "/var/log/kern.log"],
        ["/var/log/syslog"],
    ]


def test_a_cut_log_starts_at_its_first_whole_line(tmp_path: Path) -> None:
    (tmp_path / "rootfs/var/log").mkdir(parents=True)
    (tmp_path / "rootfs/var/log/kern.log").write_text("first line\nsecond\nthird\n")
    (tmp_path / "rootfs/proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "rootfs/proc/sys/kernel/random/boot_id").write_text("c71b1604-0001\n")
    host = snapshot_host(str(tmp_path))

    def tail(max_bytes: int) -> Tail:
        with host.fs.open_binary("/var/log/kern.log") as f:
            return read_tail(f, max_bytes, MAX_LINE_BYTES, MAX_SCAN_BYTES)

    assert tail(12) == Tail(b"third\n")
    assert tail(4096) == Tail(b"first line\nsecond\nthird\n")
    assert LogFiles().read(host.fs, ["/var/log/absent.log"], 4096, NOW) == [[]]
    assert boot_id(host) == "c71b1604-0001"
