"""HostFS: root injection, snapshot semantics and recording."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from gpuprobe.host.fs import LINK, LIST, READ, STAT, HostFS


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "etc/cdi").mkdir(parents=True)
    (tmp_path / "etc/cdi/nvidia.yaml").write_text("cdiVersion: 0.5.0\n")
    (tmp_path / "etc/cdi/other.json").write_text("{}")
    (tmp_path / "var/log").mkdir(parents=True)
    (tmp_path / "var/log/kern.log").write_bytes(b"a" * 100 + b"\nlast line\n")
    os.symlink("../../bus/pci/drivers/nvidia", tmp_path / "etc/driver")
    return tmp_path


def test_paths_are_read_under_the_root(root: Path) -> None:
    fs = HostFS(root)
    assert fs.read_text("/etc/cdi/nvidia.yaml") == "cdiVersion: 0.5.0\n"
    assert fs.try_read_text("/etc/missing") is None
    assert fs.exists("/etc/cdi") and fs.is_dir("/etc/cdi") and not fs.is_file("/etc/cdi")
    assert fs.listdir("/etc/cdi") == ["nvidia.yaml", "other.json"]
    assert fs.listdir("/nope") == []
    assert fs.glob("/etc/cdi/*.yaml") == ["/etc/cdi/nvidia.yaml"]
    assert fs.read_tail("/var/log/kern.log", 10) == b"last line\n"
    assert fs.readlink("/etc/driver") == "../../bus/pci/drivers/nvidia"
    assert fs.readlink("/etc/cdi") is None
    with pytest.raises(FileNotFoundError):
        fs.read_bytes("/etc/missing")


def test_relative_paths_are_refused(root: Path) -> None:
    with pytest.raises(ValueError):
        HostFS(root).read_text("etc/cdi/nvidia.yaml")


def test_a_live_socket_is_a_socket_and_a_plain_file_is_not(short_tmp: Path) -> None:
    (short_tmp / "f").write_text("")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(short_tmp / "kubelet.sock"))
        fs = HostFS(short_tmp)
        assert fs.is_socket("/kubelet.sock")
        assert not fs.is_socket("/f")


def test_in_a_snapshot_an_empty_file_stands_for_a_socket_or_device(root: Path) -> None:
    (root / "dev").mkdir()
    (root / "dev/nvidia0").touch()
    fs = HostFS(root, snapshot=True)
    assert fs.is_socket("/etc/cdi/nvidia.yaml")
    assert fs.is_device("/dev/nvidia0")
    assert fs.is_executable("/dev/nvidia0")
    assert not fs.is_device("/dev/nvidia1")


def test_recording_notes_how_each_path_was_used(root: Path) -> None:
    fs = HostFS(root)
    fs.record()
    fs.read_text("/etc/cdi/nvidia.yaml")
    fs.exists("/etc/missing")
    fs.listdir("/var/log")
    fs.glob("/etc/cdi/*.json")
    fs.readlink("/etc/driver")
    assert fs.recorded() == {
        "/etc/cdi/nvidia.yaml": {READ},
        "/etc/missing": {STAT},
        "/var/log": {LIST},
        "/etc/cdi/other.json": {STAT},
        "/etc/driver": {LINK},
    }


def test_not_recording_keeps_nothing(root: Path) -> None:
    fs = HostFS(root)
    fs.read_text("/etc/cdi/nvidia.yaml")
    assert fs.recorded() == {}
