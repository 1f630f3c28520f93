"""A snapshot directory or a `--root` that gpuprobe's user cannot read is a usage error (one
line, exit 64) for every command that takes it, never a traceback, and never a report that
reads the empty-looking tree as a node without GPUs or XIDs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require_root, require_tool, snapshot

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
SERVE = ["--grpc-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"]


def as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
    require_root()
    require_tool("setpriv")
    return subprocess.run(
        [*NOBODY, sys.executable, "-m", "gpuprobe", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": "/", "NO_COLOR": "1"},
        timeout=60,
        check=False,
    )


@pytest.fixture
def private(short_tmp: Path) -> Path:
    """A node snapshot only root may read (mode 0700), in a directory anyone may enter."""
    short_tmp.chmod(0o755)
    path = short_tmp / "snap"
    shutil.copytree(snapshot("synthetic-h100-8gpu-healthy"), path)
    path.chmod(0o700)
    return path


@pytest.mark.parametrize("mode", [0o700, 0o744, 0o311])
@pytest.mark.parametrize("command", [["check"], ["check", "--json"], ["serve", *SERVE]])
def test_an_unreadable_snapshot_is_one_line(private: Path, command: list[str], mode: int) -> None:
    private.chmod(mode)  # neither read nor search; read without search; search without read
    out = as_nobody(*command, "--snapshot", str(private))
    assert (out.returncode, out.stdout) == (64, "")
    assert out.stderr.splitlines() == [
        f"gpuprobe: snapshot {private}: cannot read it: Permission denied "
        f"(gpuprobe runs as uid 65534) (see gpuprobe {command[0]} --help)"
    ]


@pytest.mark.parametrize(
    "command", [["check"], ["check", "--only", "xid"], ["serve", *SERVE], ["clear-xid"]]
)
def test_an_unreadable_root_is_refused_up_front(private: Path, command: list[str]) -> None:
    root = private / "rootfs"
    root.chmod(0o700)
    private.chmod(0o755)
    out = as_nobody(*command, "--root", str(root))
    assert (out.returncode, out.stdout) == (64, "")
    assert out.stderr.splitlines() == [
        f"gpuprobe: --root {root}: cannot read it: Permission denied (gpuprobe runs as uid 65534) "
        f"(see gpuprobe {command[0]} --help)"
    ]


def test_capture_refuses_an_unreadable_root_before_writing(private: Path) -> None:
    root = private / "rootfs"
    root.chmod(0o700)
    private.chmod(0o777)  # nobody may create the snapshot directory here
    target = private / "out"
    out = as_nobody("capture", str(target), "--root", str(root))
    assert (out.returncode, out.stdout) == (64, "")
    assert out.stderr.splitlines() == [
        f"gpuprobe: --root {root}: cannot read it: Permission denied (gpuprobe runs as uid 65534) "
        "(see gpuprobe capture --help)"
    ]
    assert not target.exists()


def test_a_readable_snapshot_and_root_still_run(private: Path) -> None:
    private.chmod(0o755)
    out = as_nobody("check", "--snapshot", str(private), "--only", "driver")
    assert out.returncode == 0, out.stderr
    out = as_nobody("check", "--root", str(private / "rootfs"), "--only", "driver")
    # The tree is read: its 8 GPUs on the bus and the module, without NVML on this machine.
    assert (out.returncode, out.stderr) == (2, "")
    assert "8 NVIDIA GPUs on the PCI bus but NVML cannot be loaded" in out.stdout
