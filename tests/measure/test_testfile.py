"""The test file's name, lifetime, and the removal of stale ones (only ever our own)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from gpuprobe import cleanup
from gpuprobe.measure import testfile
from gpuprobe.measure.testfile import TestFile, owner_tag, remove_stale

HOUR_AGO = time.time() - 3600


def own(directory: Path, owner: str, unique: str = "a" * 32) -> Path:
    return directory / f".gpuprobe-storage-{owner_tag(owner)}-{unique}.tmp"


def make_old(path: Path, content: bytes = b"x") -> Path:
    path.write_bytes(content)
    os.utime(path, (HOUR_AGO, HOUR_AGO))
    return path


def test_the_file_is_hidden_unique_per_node_registered_and_removed(tmp_path: Path) -> None:
    assert owner_tag("gpu-node-17") == owner_tag("gpu-node-17") != owner_tag("gpu-node-18")
    assert re.fullmatch("[0-9a-f]{8}", owner_tag("gpu-node-17"))
    with TestFile(tmp_path, "gpu-node-17") as f:
        assert re.fullmatch(
            rf"\.gpuprobe-storage-{owner_tag('gpu-node-17')}-[0-9a-f]{{32}}\.tmp", f.path.name
        )
        assert f.path.parent == tmp_path and f.path.exists()
        assert oct(f.path.stat().st_mode & 0o777) == "0o600"
        assert cleanup.pending() == [str(f.path)]
    assert os.listdir(tmp_path) == []
    assert cleanup.pending() == []


def test_the_file_is_removed_when_the_test_fails_inside(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), TestFile(tmp_path, "n"):
        raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    assert cleanup.pending() == []


def test_a_failed_create_leaves_nothing_registered(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        TestFile(tmp_path / "missing", "n")
    assert cleanup.pending() == []


def test_only_this_nodes_abandoned_test_files_are_removed(tmp_path: Path) -> None:
    stale = make_old(own(tmp_path, "node-a", "1" * 32))
    fresh = own(tmp_path, "node-a", "2" * 32)
    fresh.write_bytes(b"x")  # maybe a test between create and lock: left alone
    other_node = make_old(own(tmp_path, "node-b", "3" * 32))
    keep = [
        make_old(tmp_path / "checkpoint.pt"),
        make_old(tmp_path / f".gpuprobe-storage-{owner_tag('node-a')}-short.tmp"),
        make_old(tmp_path / f"gpuprobe-storage-{owner_tag('node-a')}-{'4' * 32}.tmp"),
        make_old(tmp_path / f".gpuprobe-storage-{owner_tag('node-a')}-{'5' * 32}.tmp.bak"),
    ]
    removed = remove_stale(tmp_path, "node-a")
    assert removed == [stale.name]
    assert not stale.exists()
    for path in (fresh, other_node, *keep):
        assert path.exists(), path


def test_a_live_tests_file_is_not_removed_however_old(tmp_path: Path) -> None:
    with TestFile(tmp_path, "node-a") as live:
        os.utime(live.path, (HOUR_AGO, HOUR_AGO))
        assert remove_stale(tmp_path, "node-a") == []
        assert live.path.exists()


def test_links_and_directories_with_our_name_are_not_touched(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_bytes(b"data")
    link = own(tmp_path, "node-a", "6" * 32)
    link.symlink_to(target)
    os.utime(link, (HOUR_AGO, HOUR_AGO), follow_symlinks=False)
    directory = own(tmp_path, "node-a", "7" * 32)
    directory.mkdir()
    os.utime(directory, (HOUR_AGO, HOUR_AGO))
    assert remove_stale(tmp_path, "node-a") == []
    assert link.is_symlink() and directory.is_dir() and target.read_bytes() == b"data"


def test_an_unreadable_directory_removes_nothing(tmp_path: Path) -> None:
    assert remove_stale(tmp_path / "missing", "node-a") == []


def test_the_stale_age_is_a_minute() -> None:
    assert testfile.STALE_AFTER_SECONDS == 60.0
