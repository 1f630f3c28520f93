"""The storage check on real directories and filesystems the tests mount (tmpfs, ramfs)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from conftest import gpuprobe, require_root, require_tool, schema, snapshot
from gpuprobe import cleanup
from gpuprobe.checks import storage
from gpuprobe.checks.context import CheckContext
from gpuprobe.config import Config
from gpuprobe.host import Host, snapshot_host
from gpuprobe.host.fs import HostFS
from gpuprobe.host.nvml import ReplayNvml, load_record
from gpuprobe.measure import testfile
from gpuprobe.report import CheckResult, Status
from helpers import codes, config
from mounting import fill, mounted

MIB = 1024 * 1024
NO_NVML: dict[str, Any] = {"format": 1, "init_error": "LibraryNotFound", "calls": []}
GPUPROBE = [sys.executable, "-m", "gpuprobe", "check", "--only", "storage"]
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
# Small and quick: 8 MiB in 1 MiB blocks, two jobs.
SMALL = {"size_bytes": 8 * MIB, "block_size_bytes": MIB, "jobs": 2}


def live(nvml_snapshot: str | None = None, root: str = "/") -> Host:
    """This machine's files with a replayed NVML (never this machine's GPUs: tests must not
    depend on what runs on them)."""
    record = load_record(f"{snapshot(nvml_snapshot)}/nvml.json") if nvml_snapshot else NO_NVML
    return Host(fs=HostFS(root), nvml=ReplayNvml(record), node_name="test-node")


def run(paths: list[str], host: Host | None = None, **storage_cfg: Any) -> CheckResult:
    cfg = config(storage={"paths": paths, **SMALL, **storage_cfg})
    return storage.run(CheckContext(host or live()), cfg)


def entry(result: CheckResult, index: int = 0) -> dict[str, Any]:
    return result.data["paths"][index]  # type: ignore[no-any-return]


def findmnt(path: Path, column: str) -> str:
    out = subprocess.run(
        ["findmnt", "-n", "-o", column, "-T", str(path)], capture_output=True, text=True
    )
    return out.stdout.strip()


# A summary figure: three significant digits and a decimal unit.
RATE = r"\d[\d.]* [kMGT]?B/s"


# --- measuring ------------------------------------------------------------------------


def test_a_real_directory_is_measured_and_left_as_it_was(tmp_path: Path) -> None:
    (tmp_path / "dataset.bin").write_bytes(b"keep me")
    result = run([str(tmp_path)])
    e = entry(result)
    assert result.status is Status.OK and result.findings == []
    assert os.listdir(tmp_path) == ["dataset.bin"]
    assert cleanup.pending() == []
    assert e["measured"] is True and e["not_measured"] is None
    assert e["method"] == "direct" and e["direct_io_refused"] is None
    assert (e["bytes_written"], e["bytes_read"], e["size_bytes"]) == (8 * MIB, 8 * MIB, 8 * MIB)
    assert (e["block_size_bytes"], e["jobs"], e["time_limited"]) == (MIB, 2, False)
    # The figures are over the rounded durations' unrounded originals.
    assert e["write_bytes_per_second"] == pytest.approx(8 * MIB / e["write_seconds"], rel=1e-3)
    assert e["read_bytes_per_second"] == pytest.approx(8 * MIB / e["read_seconds"], rel=1e-3)
    assert e["duration_seconds"] == round(e["write_seconds"] + e["read_seconds"], 6)
    # The mount as the kernel's own tools see it.
    assert e["filesystem_type"] == findmnt(tmp_path, "FSTYPE")
    assert e["mount_point"] == findmnt(tmp_path, "TARGET")
    assert e["device"] == findmnt(tmp_path, "SOURCE")
    assert e["mount_options"] == findmnt(tmp_path, "OPTIONS").split(",")
    assert e["shared_filesystem"] is False
    st = os.statvfs(tmp_path)
    assert e["total_bytes"] == st.f_blocks * st.f_frsize
    assert e["total_inodes"] == st.f_files
    assert e["stale_files_removed"] == 0
    assert re.fullmatch(f"{tmp_path}: write {RATE}, read {RATE}", result.summary)
    assert result.data["gpus_with_processes"] == []
    assert result.data["forced"] is False
    assert result.data["time_limit_seconds"] == 60.0


def test_the_data_shape_is_the_contracts(tmp_path: Path) -> None:
    result = run([str(tmp_path)])
    assert set(result.data) == {"paths", "gpus_with_processes", "forced", "time_limit_seconds"}
    assert isinstance(entry(result)["write_bytes_per_second"], float)
    assert isinstance(entry(result)["read_bytes_per_second"], float)
    assert list(entry(result)) == [
        "path",
        "measured",
        "not_measured",
        "write_bytes_per_second",
        "read_bytes_per_second",
        "method",
        "direct_io_refused",
        "block_size_bytes",
        "size_bytes",
        "jobs",
        "bytes_written",
        "bytes_read",
        "write_seconds",
        "read_seconds",
        "duration_seconds",
        "time_limited",
        "stale_files_removed",
        "filesystem_type",
        "device",
        "mount_point",
        "mount_options",
        "shared_filesystem",
        "total_bytes",
        "free_bytes",
        "total_inodes",
        "free_inodes",
    ]


def test_no_path_configured_is_ok_and_says_it_did_not_run() -> None:
    result = storage.run(CheckContext(live()), Config())
    assert result.status is Status.OK
    assert result.summary == "no storage path configured (storage.paths, --storage-path)"
    assert result.data == {"paths": [], "ran": False}
    assert result.not_run


def test_a_path_given_twice_is_measured_once(tmp_path: Path) -> None:
    result = run([str(tmp_path), str(tmp_path)])
    assert [e["path"] for e in result.data["paths"]] == [str(tmp_path)]


def test_ramfs_refuses_o_direct_and_the_test_falls_back_to_buffered_io() -> None:
    with mounted("ramfs") as point:
        result = run([str(point)])
        assert os.listdir(point) == []
    e = entry(result)
    assert result.findings == []
    assert e["measured"] is True
    assert e["method"] == "buffered"
    assert e["direct_io_refused"] == "the filesystem refuses O_DIRECT (EINVAL on open)"
    assert (e["bytes_written"], e["bytes_read"]) == (8 * MIB, 8 * MIB)
    # ramfs keeps no account of space: nothing to hold the test size against.
    assert (e["filesystem_type"], e["free_bytes"], e["total_bytes"]) == ("ramfs", None, None)
    assert e["mount_point"] == str(point)


def test_floors_raise_one_throughput_low_per_path_naming_each_direction(tmp_path: Path) -> None:
    result = run([str(tmp_path)], min_write_bytes_per_second=1e15, min_read_bytes_per_second=1)
    e = entry(result)
    assert codes(result) == [
        ("STORAGE_THROUGHPUT_LOW", "WARNING", "CHECK_STORAGE", f"path:{tmp_path}")
    ]
    write = storage._rate_text(e["write_bytes_per_second"])
    assert result.findings[0].message == (
        f"storage path {tmp_path} ({e['filesystem_type']} mounted on {e['mount_point']}): "
        f"sequential write {write} is below its floor of 1 PB/s (1 MiB blocks, 2 jobs, "
        "O_DIRECT). Check the disk's health and the load on it, or the network to the storage"
    )
    both = run([str(tmp_path)], min_write_bytes_per_second=1e15, min_read_bytes_per_second=1e15)
    assert len(both.findings) == 1
    assert "sequential write " in both.findings[0].message
    assert " and read " in both.findings[0].message
    assert run([str(tmp_path)], min_write_bytes_per_second=1).findings == []


def test_the_io_is_bounded_by_the_checks_deadline(tmp_path: Path) -> None:
    cfg = config(storage={"paths": [str(tmp_path)], **SMALL}, checks={"deadlines": {"storage": 4}})
    result = storage.run(CheckContext(live()), cfg)
    assert result.data["time_limit_seconds"] == 3.0
    assert result.status is Status.OK


def test_stale_files_of_this_node_are_removed_and_nothing_else(tmp_path: Path) -> None:
    tag = testfile.owner_tag("test-node")
    stale = tmp_path / f".gpuprobe-storage-{tag}-{'a' * 32}.tmp"
    other_node = tmp_path / f".gpuprobe-storage-{testfile.owner_tag('node-b')}-{'b' * 32}.tmp"
    lookalike = tmp_path / f".gpuprobe-storage-{tag}-mine.tmp"
    for f in (stale, other_node, lookalike):
        f.write_bytes(b"x")
        os.utime(f, (time.time() - 3600, time.time() - 3600))
    result = run([str(tmp_path)])
    assert entry(result)["stale_files_removed"] == 1
    assert sorted(os.listdir(tmp_path)) == sorted([other_node.name, lookalike.name])


# --- unusable paths -------------------------------------------------------------------


def test_a_missing_path_is_critical(tmp_path: Path) -> None:
    missing = tmp_path / "scratch"
    result = run([str(missing)])
    assert codes(result) == [
        ("STORAGE_UNAVAILABLE", "CRITICAL", "CHECK_STORAGE", f"path:{missing}")
    ]
    message = (
        f"storage path {missing} does not exist: the volume that belongs there is not "
        "mounted. Mount it, or correct storage.paths"
    )
    assert result.findings[0].message == message
    assert entry(result)["not_measured"] == message
    assert entry(result)["measured"] is False
    assert entry(result)["write_bytes_per_second"] is None
    assert result.summary == f"{missing}: unavailable"
    assert not missing.exists()


def test_a_file_is_not_a_storage_path(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    result = run([str(f)])
    assert codes(result) == [("STORAGE_UNAVAILABLE", "CRITICAL", "FIX_CONFIG", f"path:{f}")]
    assert f.read_text() == "x"


def test_a_read_only_mount_is_critical() -> None:
    with mounted("tmpfs", "ro,size=16m") as point:
        result = run([str(point)])
    assert codes(result) == [("STORAGE_UNAVAILABLE", "CRITICAL", "CHECK_STORAGE", f"path:{point}")]
    assert result.findings[0].message == (
        f"storage path {point} is on a read-only mount (tmpfs mounted on {point}): nothing can "
        "be written there. Remount it read-write; a filesystem remounted read-only after "
        "errors needs its disk inspected"
    )
    assert "ro" in entry(result)["mount_options"]


def test_a_full_filesystem_is_critical() -> None:
    with mounted("tmpfs", "size=256k") as point:
        fill(point)
        result = run([str(point)])
        assert os.listdir(point) == ["filler"]
    assert codes(result) == [("STORAGE_UNAVAILABLE", "CRITICAL", "CHECK_STORAGE", f"path:{point}")]
    assert result.findings[0].message == (
        f"storage path {point} is full (tmpfs mounted on {point}): no free space. Free space there"
    )
    assert entry(result)["free_bytes"] == 0
    assert entry(result)["total_bytes"] == 256 * 1024


def test_a_filesystem_out_of_inodes_is_critical() -> None:
    with mounted("tmpfs", "size=16m,nr_inodes=2") as point:
        (point / "only-file").write_text("x")  # the root directory took the other inode
        result = run([str(point)])
    assert codes(result) == [("STORAGE_UNAVAILABLE", "CRITICAL", "CHECK_STORAGE", f"path:{point}")]
    assert result.findings[0].message.endswith(": no free inodes. Free space there")
    assert (entry(result)["free_inodes"], entry(result)["total_inodes"]) == (0, 2)


def test_a_filesystem_too_small_for_the_test_is_not_measured() -> None:
    with mounted("tmpfs", "size=12m") as point:
        result = run([str(point)])  # an 8 MiB test needs 16 MiB free
        assert os.listdir(point) == []
    assert codes(result) == [("STORAGE_UNAVAILABLE", "WARNING", "CHECK_STORAGE", f"path:{point}")]
    assert result.findings[0].message == (
        f"storage path {point} has 12 MiB free (tmpfs mounted on {point}), under twice the "
        "8 MiB test: not measured. Free space there, or lower storage.size_bytes"
    )


def test_a_path_gpuprobe_may_not_write_is_a_config_matter(short_tmp: Path) -> None:
    require_root()
    require_tool("setpriv")
    short_tmp.chmod(0o755)
    cfg = short_tmp / "c.yaml"
    cfg.write_text(f"storage: {json.dumps(SMALL)}\n")
    cfg.chmod(0o644)
    out = subprocess.run(
        [*NOBODY, *GPUPROBE, "--json", "--config", str(cfg), "--storage-path", str(short_tmp)],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": "/"},
    )
    check = json.loads(out.stdout)["checks"][0]
    assert [(f["code"], f["severity"], f["action"]) for f in check["findings"]] == [
        ("STORAGE_UNAVAILABLE", "WARNING", "FIX_CONFIG")
    ]
    assert check["findings"][0]["message"] == (
        f"storage path {short_tmp} is not writable by gpuprobe (uid 65534): not measured. "
        "Run gpuprobe as a user that may write there, or measure another path"
    )
    assert out.returncode == 1


# --- GPUs at work, snapshots and --root -------------------------------------------------


def test_busy_gpus_hold_the_measurement_back_without_a_finding(tmp_path: Path) -> None:
    result = run([str(tmp_path)], host=live("synthetic-gpu-processes"))
    assert result.status is Status.OK and result.findings == []
    assert result.data["gpus_with_processes"] == [0, 3]
    assert entry(result)["measured"] is False
    assert entry(result)["not_measured"] == (
        "GPU processes are active on GPUs 0, 3 (storage.force measures anyway)"
    )
    assert result.summary == f"{tmp_path}: not measured, GPU processes are active"
    # The passive part still runs: free space is known.
    assert entry(result)["free_bytes"] is not None


def test_busy_gpus_do_not_hide_a_missing_path(tmp_path: Path) -> None:
    result = run([str(tmp_path / "gone")], host=live("synthetic-gpu-processes"))
    assert codes(result) == [
        ("STORAGE_UNAVAILABLE", "CRITICAL", "CHECK_STORAGE", f"path:{tmp_path / 'gone'}")
    ]


def test_force_measures_while_gpus_are_busy(tmp_path: Path) -> None:
    result = run([str(tmp_path)], host=live("synthetic-gpu-processes"), force=True)
    assert entry(result)["measured"] is True
    assert result.data["forced"] is True
    assert result.data["gpus_with_processes"] == [0, 3]


def test_idle_gpus_do_not_hold_it_back(tmp_path: Path) -> None:
    result = run([str(tmp_path)], host=live("synthetic-h100-8gpu-idle"))
    assert entry(result)["measured"] is True
    assert result.data["gpus_with_processes"] == []


def test_on_a_snapshot_paths_here_are_measured_live_and_others_are_not(tmp_path: Path) -> None:
    out = gpuprobe(
        "check",
        "--json",
        "--only",
        "storage",
        "--snapshot",
        snapshot("synthetic-h100-8gpu-idle"),
        "--config",
        str(write_config(tmp_path)),
        "--storage-path",
        str(tmp_path),
        "--storage-path",
        "/nonexistent/scratch",
    )
    jsonschema.validate(out.json(), schema("report.schema.json"))
    check = out.json()["checks"][0]
    here, elsewhere = check["data"]["paths"]
    assert out.returncode == 0 and check["findings"] == []
    assert here["measured"] is True and here["path"] == str(tmp_path)
    assert elsewhere["measured"] is False
    assert elsewhere["not_measured"] == (
        "replaying a snapshot: the path is not a directory on this machine"
    )
    assert check["summary"].endswith("; /nonexistent/scratch: not on this machine")


def test_a_snapshots_busy_gpus_hold_the_live_measurement_back(tmp_path: Path) -> None:
    host = snapshot_host(snapshot("synthetic-gpu-processes"))
    result = run([str(tmp_path)], host=host)
    assert entry(result)["measured"] is False
    assert result.data["gpus_with_processes"] == [0, 3]


@pytest.fixture
def host_root() -> Iterator[Path]:
    """A host tree for `--root`, with a tmpfs mounted on its /scratch."""
    root = Path(tempfile.mkdtemp(prefix="gp-root-"))
    (root / "scratch").mkdir()
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_under_root_host_paths_are_measured_in_the_host_tree(host_root: Path) -> None:
    require_root()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(host_root / "scratch")],
        check=True,
    )
    try:
        result = run(["/scratch"], host=live(root=str(host_root)))
        assert os.listdir(host_root / "scratch") == []
    finally:
        subprocess.run(["umount", str(host_root / "scratch")], check=True)
    e = entry(result)
    assert result.findings == []
    assert (e["path"], e["measured"]) == ("/scratch", True)
    assert (e["filesystem_type"], e["mount_point"]) == ("tmpfs", "/scratch")
    assert e["total_bytes"] == 64 * MIB


@pytest.mark.parametrize("target", ["/var/tmp", "/nonexistent/mnt/data"])
def test_under_root_a_link_out_of_the_host_tree_is_not_followed(
    host_root: Path, target: str
) -> None:
    """An absolute link is the host's: read in the container it points elsewhere (or
    nowhere), which says nothing about the host's path."""
    (host_root / "data").symlink_to(target)
    result = run(["/data"], host=live(root=str(host_root)))
    assert codes(result) == [("STORAGE_UNAVAILABLE", "WARNING", "FIX_CONFIG", "path:/data")]
    assert result.findings[0].message == (
        f"storage path /data is a link that leads out of the host's root {host_root} "
        f"(to {target}): not measured. Configure the link's target"
    )


# --- every way out leaves nothing behind ----------------------------------------------


def write_config(directory: Path, **storage_cfg: Any) -> Path:
    cfg = directory.parent / f"{directory.name}-gpuprobe.yaml"
    cfg.write_text(json.dumps({"storage": {**SMALL, **storage_cfg}}))
    return cfg


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_in_the_middle_of_the_write_leaves_nothing(
    tmp_path: Path, sig: signal.Signals, status: int
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "checkpoint.pt").write_bytes(b"keep")
    # 2 GiB in 64 KiB blocks with one job: seconds of writing, ample time to be caught.
    cfg = write_config(scratch, size_bytes=2048 * MIB, block_size_bytes=65536, jobs=1)
    proc = subprocess.Popen(
        [*GPUPROBE, "--config", str(cfg), "--storage-path", str(scratch)],
        stdout=subprocess.DEVNULL,
    )
    try:
        test_file = wait_for_test_file(scratch, proc)
        written = test_file.stat().st_size
        assert 0 < written < 2048 * MIB, "caught in the middle of the write"
        proc.send_signal(sig)
        assert proc.wait(10) == status
    finally:
        proc.kill()
        proc.wait()
    assert os.listdir(scratch) == ["checkpoint.pt"]


# The O_DIRECT probe writes one page and truncates it away before the test writes
# (measure/throughput.py): a file of that size or less has not been written to yet.
PROBE_BYTES = 4096


def wait_for_test_file(directory: Path, proc: subprocess.Popen[bytes]) -> Path:
    """The test file, once the test's write holds data in it; fails if the process ends
    first."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "gpuprobe ended before it was signalled"
        for name in os.listdir(directory):
            path = directory / name
            if name.startswith(testfile.PREFIX) and path.stat().st_size > PROBE_BYTES:
                return path
        time.sleep(0.005)
    raise AssertionError("no test file appeared")
