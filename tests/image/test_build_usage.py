"""scripts/build-image refuses what it cannot do with one line and exit status 64, before it
downloads or writes anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from built_image import BUILD

from conftest import require_root, require_tool


def test_without_root_it_says_so(tmp_path: Path) -> None:
    require_root()
    setpriv = require_tool("setpriv")
    tmp_path.chmod(0o777)
    done = subprocess.run(
        [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
         sys.executable, str(BUILD), str(tmp_path / "out.tar"), "--cache", str(tmp_path / "c")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 64, done.stderr
    assert done.stderr == "build-image: needs root (mmdebstrap's root mode and chroot)\n"
    assert not list(tmp_path.iterdir())


def test_a_missing_tool_is_named(tmp_path: Path) -> None:
    require_root()
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "git").symlink_to(subprocess.run(
        ["sh", "-c", "command -v git"], capture_output=True, text=True, check=True
    ).stdout.strip())  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(BUILD), str(tmp_path / "out.tar"), "--cache", str(tmp_path / "c")],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PATH": str(bare)},
    )  # fmt: skip
    assert done.returncode == 64, done.stderr
    assert done.stderr == "build-image: mmdebstrap is not installed (apt-get install mmdebstrap)\n"
    assert not (tmp_path / "out.tar").exists() and not (tmp_path / "c").exists()
