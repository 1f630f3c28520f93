"""The throughput measurement itself: phases, time bound, fallback and failures."""

from __future__ import annotations

import errno
import fcntl
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import require_tool
from gpuprobe import cleanup
from gpuprobe.measure import throughput
from gpuprobe.measure.throughput import MeasureError, Plan, measure
from mounting import fill, mounted

MIB = 1024 * 1024


def test_each_job_writes_and_reads_its_whole_slice(tmp_path: Path) -> None:
    # 10 MiB over 3 jobs in 1 MiB blocks: 3 MiB each, the odd MiB left out.
    result = measure(tmp_path, Plan(MIB, 10 * MIB, 3, 60.0), "node-a")
    assert (result.bytes_written, result.bytes_read) == (9 * MIB, 9 * MIB)
    assert result.method == "direct" and result.direct_refused is None
    assert result.time_limited is False
    assert result.write_bytes_per_second == 9 * MIB / result.write_seconds
    assert result.read_bytes_per_second == 9 * MIB / result.read_seconds
    assert os.listdir(tmp_path) == []
    assert cleanup.pending() == []


def test_the_time_bound_cuts_both_phases_short(tmp_path: Path) -> None:
    # 64 GiB is never written in 0.2 s here; the test stops at its bound, not at the disk's end.
    result = measure(tmp_path, Plan(MIB, 64 * 1024 * MIB, 2, 0.4), "node-a")
    assert result.time_limited is True
    assert 0 < result.bytes_written < 64 * 1024 * MIB
    assert result.bytes_written % MIB == 0
    assert 0 < result.bytes_read <= result.bytes_written
    assert result.write_seconds < 0.2 + 5  # the bound, plus the fsync of what was written
    assert os.listdir(tmp_path) == []


def test_ramfs_refuses_o_direct_at_open() -> None:
    with mounted("ramfs") as point:
        result = measure(point, Plan(MIB, 4 * MIB, 1, 60.0), "node-a")
        assert os.listdir(point) == []
    assert result.method == "buffered"
    assert result.direct_refused == "the filesystem refuses O_DIRECT (EINVAL on open)"
    assert result.bytes_written == result.bytes_read == 4 * MIB


def test_a_refusal_at_the_first_write_falls_back_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some FUSE filesystems accept O_DIRECT at open and fail the I/O with EINVAL."""
    real_pwrite = os.pwrite
    calls: list[bool] = []

    def refusing_pwrite(fd: int, data: Any, offset: int) -> int:
        direct = bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)
        calls.append(direct)
        if direct:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(throughput.os, "pwrite", refusing_pwrite)
    result = measure(tmp_path, Plan(MIB, 4 * MIB, 1, 60.0), "node-a")
    assert result.method == "buffered"
    assert result.direct_refused == "the filesystem refuses O_DIRECT (EINVAL on write)"
    assert result.bytes_written == result.bytes_read == 4 * MIB
    assert calls == [True, False, False, False, False]  # the probe, then four buffered blocks
    assert os.listdir(tmp_path) == []


def test_buffered_reads_start_with_the_file_out_of_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback's read must come from the storage: fincore(1) sees no page cached."""
    fincore = require_tool("fincore")
    real_pwrite, real_preadv = os.pwrite, os.preadv
    resident: list[int] = []

    def buffered_only(fd: int, data: Any, offset: int) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real_pwrite(fd, data, offset)

    def preadv(fd: int, buffers: Any, offset: int) -> int:
        if not resident:  # the first read: how much of the file is in the page cache?
            (name,) = os.listdir(tmp_path)
            out = subprocess.run(
                [fincore, "--bytes", "--noheadings", "--output", "RES", str(tmp_path / name)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            resident.append(int(out.stdout))
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(throughput.os, "pwrite", buffered_only)
    monkeypatch.setattr(throughput.os, "preadv", preadv)
    result = measure(tmp_path, Plan(MIB, 16 * MIB, 1, 60.0), "node-a")
    assert result.method == "buffered"
    assert resident == [0]


def test_a_read_only_mount_fails_at_create() -> None:
    with mounted("tmpfs", "ro,size=16m") as point, pytest.raises(MeasureError) as exc:
        measure(point, Plan(MIB, 4 * MIB, 1, 60.0), "node-a")
    assert (exc.value.phase, exc.value.errno) == ("create", errno.EROFS)
    assert cleanup.pending() == []


def test_running_out_of_space_fails_the_write_and_leaves_nothing() -> None:
    with mounted("tmpfs", "size=4m") as point:
        with pytest.raises(MeasureError) as exc:
            measure(point, Plan(MIB, 16 * MIB, 2, 60.0), "node-a")
        assert os.listdir(point) == []
    assert (exc.value.phase, exc.value.errno) == ("write", errno.ENOSPC)
    assert exc.value.strerror == "No space left on device"
    assert cleanup.pending() == []


def test_a_full_filesystem_fails_the_first_block() -> None:
    with mounted("tmpfs", "size=256k") as point:
        fill(point)
        with pytest.raises(MeasureError) as exc:
            measure(point, Plan(MIB, 4 * MIB, 1, 60.0), "node-a")
        assert os.listdir(point) == ["filler"]
    assert exc.value.errno == errno.ENOSPC
