"""A live capture of a host with the container stack replays to the same findings."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

from conftest import gpuprobe, snapshot

CHECKS = "toolkit,cdi,device_plugin,sharing"
SOCKETS = (
    "run/containerd/containerd.sock",
    "var/lib/kubelet/device-plugins/kubelet.sock",
    "var/lib/kubelet/device-plugins/nvidia-gpu.sock",
)


def findings(report: dict) -> dict[str, tuple[str, list[tuple[str, str, str]]]]:
    return {
        c["name"]: (
            c["status"],
            sorted((f["code"], f["severity"], f["resource"]) for f in c["findings"]),
        )
        for c in report["checks"]
    }


def test_capture_of_a_live_tree_replays_the_same(short_tmp: Path) -> None:
    host = short_tmp / "h"
    shutil.copytree(Path(snapshot("synthetic-h100-k8s-containerd-healthy")) / "rootfs", host)
    for binary in (host / "usr/bin").iterdir():
        binary.chmod(0o755)
    servers = []
    try:
        for path in SOCKETS:  # live sockets, as on the node; the snapshot keeps empty files
            (host / path).unlink()
            server = socket.socket(socket.AF_UNIX)
            server.bind(str(host / path))
            servers.append(server)
        target = short_tmp / "snap"
        out = gpuprobe("capture", str(target), "--root", str(host), "--only", CHECKS)
        assert out.returncode == 0, out.stderr
    finally:
        for server in servers:
            server.close()
    live = json.loads((target / "report.json").read_text())
    replay = gpuprobe("check", "--json", "--snapshot", str(target), "--only", CHECKS).json()
    assert findings(replay) == findings(live)
    assert findings(live)["toolkit"] == ("OK", [])
    assert findings(live)["device_plugin"] == ("OK", [])
    assert findings(live)["cdi"] == ("OK", [])
    assert (target / "rootfs/var/run/cdi/nvidia.yaml").is_file()
    assert (target / "rootfs/etc/containerd/conf.d/99-nvidia.toml").is_file()
