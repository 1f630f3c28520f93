"""A container engine's config file that gpuprobe may not read is CONFIG_UNREADABLE (its
settings unknown), never CONFIG_INVALID: the file is not wrong, gpuprobe could not look."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import require_root, require_tool, snapshot

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
CONFIG = "etc/containerd/config.toml"
UNREADABLE = (
    "CONFIG_UNREADABLE",
    "UNKNOWN",
    "FIX_CONFIG",
    "file:/etc/containerd/config.toml",
    "/etc/containerd/config.toml cannot be read by gpuprobe (uid 65534) (Permission denied): "
    "its settings are unknown, not judged. Let gpuprobe read it (the DaemonSet runs as root), "
    "or check the file's permissions",
)


def toolkit_as_nobody(*args: str) -> dict[str, Any]:
    require_root()
    require_tool("setpriv")
    out = subprocess.run(
        [*NOBODY, sys.executable, "-m", "gpuprobe", "check", "--json", "--only", "toolkit", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": "/"},
        timeout=60,
        check=False,
    )
    assert out.stderr == ""
    check: dict[str, Any] = json.loads(out.stdout)["checks"][0]
    return check


def findings(check: dict[str, Any]) -> list[tuple[str, ...]]:
    return [
        (f["code"], f["severity"], f["action"], f["resource"], f["message"])
        for f in check["findings"]
    ]


def test_an_unreadable_containerd_config_in_a_snapshot(short_tmp: Path) -> None:
    short_tmp.chmod(0o755)
    snap = short_tmp / "snap"
    shutil.copytree(snapshot("synthetic-h100-k8s-containerd-healthy"), snap)
    (snap / "rootfs" / CONFIG).chmod(0o600)
    check = toolkit_as_nobody("--snapshot", str(snap))
    assert findings(check) == [UNREADABLE]
    assert check["status"] == "UNKNOWN"
    assert check["summary"] == (
        "NVIDIA Container Toolkit in /usr/bin (mode auto); containerd: runtimes unknown "
        "(/etc/containerd/config.toml is unreadable)"
    )


def test_an_unreadable_containerd_config_under_root(short_tmp: Path) -> None:
    short_tmp.chmod(0o755)
    root = short_tmp / "host"
    shutil.copytree(Path(snapshot("synthetic-h100-k8s-containerd-healthy")) / "rootfs", root)
    (root / CONFIG).chmod(0o600)
    check = toolkit_as_nobody("--root", str(root))
    assert findings(check) == [UNREADABLE]
