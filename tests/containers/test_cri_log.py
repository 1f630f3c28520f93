"""The kubelet's CRI container logs: lines, partial pieces joined, files newest first, and a
tail that stays bounded however large the log."""

from __future__ import annotations

import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path

from gpuprobe.containers import cri_log
from gpuprobe.host import live_host
from gpuprobe.host.fs import HostFS

POD = "var/log/pods/ml-team_trainer-0_7c1e0001-2d4b-4a8e-9f3c-000000000001/trainer"


def write(root: Path, name: str, text: str) -> Path:
    path = root / POD / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_lines_streams_times_and_partial_pieces() -> None:
    data = (
        b"2026-11-29T20:46:10.123456789Z stdout F step 1\n"
        b"2026-11-29T20:46:11.000000001Z stderr P RuntimeError: CUDA driver version is insuffi\n"
        b"2026-11-29T20:46:11.000000002Z stdout F step 2\n"
        b"2026-11-29T20:46:11.000000003Z stderr F cient for CUDA runtime version\n"
        b"2026-11-29T20:46:12+01:00 stdout F \n"
        b"not a CRI line\n"
    )
    lines = cri_log.parse(data, "/f")
    assert [(line.stream, line.text) for line in lines] == [
        ("stdout", "step 1"),
        ("stdout", "step 2"),
        ("stderr", "RuntimeError: CUDA driver version is insufficient for CUDA runtime version"),
        ("stdout", ""),
    ]
    assert lines[0].time == datetime(2026, 11, 29, 20, 46, 10, 123456, tzinfo=UTC)
    assert lines[2].time == datetime(2026, 11, 29, 20, 46, 11, 0, tzinfo=UTC)  # its first piece
    assert lines[3].time == datetime(2026, 11, 29, 19, 46, 12, tzinfo=UTC)


def test_a_cut_start_drops_the_first_line_and_a_trailing_partial_is_kept() -> None:
    data = b"ld\n2026-11-29T20:46:10Z stdout F whole\n2026-11-29T20:46:11Z stderr P half"
    lines = cri_log.parse(data, "/f", cut=True)
    assert [line.text for line in lines] == ["whole", "half"]


def test_files_newest_first_previous_instance_and_rotations(tmp_path: Path) -> None:
    write(tmp_path, "0.log", "2026-11-29T20:10:00Z stderr F first instance\n")
    write(tmp_path, "1.log.20261129-203000", "2026-11-29T20:30:00Z stdout F rotated\n")
    write(tmp_path, "1.log.20261129-201500.gz", "compressed: not read\n")
    write(tmp_path, "1.log", "2026-11-29T20:31:00Z stdout F live\n")
    (log,) = cri_log.list_logs(HostFS(tmp_path))
    assert (log.namespace, log.pod, log.container, log.restarts) == (
        "ml-team",
        "trainer-0",
        "trainer",
        1,
    )
    assert log.newest_first == ("1.log", "1.log.20261129-203000", "0.log")
    tail = cri_log.read_tail(HostFS(tmp_path), log)
    assert [line.text for line in tail.lines] == ["first instance", "rotated", "live"]


def test_the_budget_is_shared_across_files_newest_first(tmp_path: Path) -> None:
    line = "2026-11-29T20:31:00.000000000Z stdout F " + "y" * 60 + "\n"  # 100 bytes
    write(tmp_path, "0.log", line * 50)
    write(tmp_path, "1.log", line * 5)
    (log,) = cri_log.list_logs(HostFS(tmp_path))
    tail = cri_log.read_tail(HostFS(tmp_path), log, max_bytes=1000)
    assert tail.bytes_read == 1000
    assert len(tail.lines) == 5 + 4  # the older file's cut first line is dropped


def test_a_huge_log_costs_only_its_tail(tmp_path: Path) -> None:
    # 8 GiB of log (a sparse file: no disk used) ending with the failure.
    path = write(tmp_path, "0.log", "")
    end = b"2026-11-29T20:59:59.000000000Z stderr F Failed to initialize NVML: Unknown Error\n"
    with open(path, "wb") as f:
        f.truncate(8 * 1024**3)
        f.seek(0, 2)
        f.write(b"\n" + end)
    (log,) = cri_log.list_logs(HostFS(tmp_path))
    tracemalloc.start()
    started = time.perf_counter()
    tail = cri_log.read_tail(HostFS(tmp_path), log)
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert tail.bytes_read == cri_log.MAX_TAIL_BYTES
    assert tail.lines[-1].text == "Failed to initialize NVML: Unknown Error"
    assert peak < 1024 * 1024
    assert elapsed < 0.5


def test_directories_that_are_no_pod_logs_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "var/log/pods/not-a-pod-dir/c").mkdir(parents=True)
    (tmp_path / "var/log/pods/ns_pod_uid/c").mkdir(parents=True)  # no log file yet
    write(tmp_path, "notes.txt", "x")
    assert cri_log.list_logs(HostFS(tmp_path)) == []


def test_the_named_pods_logs_come_first_then_restarted_containers_bounded(
    tmp_path: Path,
) -> None:
    def container(pod: str, n: int, restarts: int) -> None:
        base = tmp_path / f"var/log/pods/ml-team_{pod}_7c1e{n:04x}-2d4b-4a8e-9f3c-{n:012x}/main"
        base.mkdir(parents=True)
        for instance in range(restarts + 1):
            (base / f"{instance}.log").write_text(f"2026-11-29T20:10:00Z stdout F {pod}\n")

    container("gpu-pod", 1, 0)
    container("crashy", 2, 3)
    container("flaky", 3, 1)
    container("quiet", 4, 0)
    host = live_host(str(tmp_path))
    logs, unread = cri_log.read_pod_logs(host, {("ml-team", "gpu-pod")}, 2)
    assert [(log.pod, log.restarts) for log in logs] == [("gpu-pod", 0), ("crashy", 3)]
    assert unread == 1  # flaky; quiet is neither a GPU pod's nor restarted
    assert [line.text for line in logs[1].lines] == ["crashy"] * 4  # every instance
