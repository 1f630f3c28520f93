"""The process table: look-ups, recording, and processes.json."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuprobe.errors import SnapshotError
from gpuprobe.host.processes import Process, ProcessTable, live_processes, load_processes


def table(recording: bool = False) -> ProcessTable:
    return ProcessTable(
        [
            Process(1, "systemd", ("/sbin/init",)),
            Process(42, "nvidia-cuda-mps", ("/usr/bin/nvidia-cuda-mps-control", "-d")),
            Process(77, "python3", ("python3", "train.py", "--token=secret")),
        ],
        recording=recording,
    )


def test_named_matches_the_name_or_argv0() -> None:
    found = table().named("nvidia-cuda-mps-control")
    assert [p.pid for p in found] == [42]
    assert [p.pid for p in table().named("systemd", "nope")] == [1]


def test_recording_keeps_only_what_lookups_returned() -> None:
    t = table(recording=True)
    t.named("nvidia-cuda-mps-control")
    t.by_pid(1)
    t.by_pid(999)
    assert [p.pid for p in t.seen()] == [1, 42]


def test_live_processes_include_this_one() -> None:
    assert live_processes().by_pid(os.getpid()) is not None


def test_processes_json_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "processes.json"
    path.write_text('[{"pid": 5, "name": "nv-fabricmanager", "cmdline": ["nv-fabricmanager"]}]')
    loaded = load_processes(str(path))
    assert loaded.processes == [Process(5, "nv-fabricmanager", ("nv-fabricmanager",))]
    assert load_processes(str(tmp_path / "absent.json")).processes == []


@pytest.mark.parametrize(
    "content",
    [
        '{"pid": 1}',
        '[{"pid": "1", "name": "x"}]',
        '[{"pid": 1, "name": "x", "cmdline": [1]}]',
        "[{",
    ],
)
def test_bad_processes_json_is_a_snapshot_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "processes.json"
    path.write_text(content)
    with pytest.raises(SnapshotError, match=r"processes\.json"):
        load_processes(str(path))
