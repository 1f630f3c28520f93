"""docs/snapshot-format.md lists exactly the files a snapshot holds: what `capture` writes."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT, gpuprobe

PAGE = ROOT / "docs/snapshot-format.md"


def listed() -> set[str]:
    """The entries of the page's file list (its first code block): `DIR/<name> ...`, a
    directory (`DIR/rootfs/...`) by its name with a slash."""
    block = PAGE.read_text().split("```", 2)[1]
    names = set()
    for line in block.splitlines():
        if match := re.match(r"DIR/([^\s/]+)(/?)", line):
            names.add(match.group(1) + match.group(2))
    return names


def written(directory: Path) -> set[str]:
    return {p.name + ("/" if p.is_dir() else "") for p in directory.iterdir()}


def test_the_list_holds_every_file_capture_writes(tmp_path: Path) -> None:
    """A real capture of this machine, with a device plugin configuration given (so that
    capture keeps it): every file it writes is on the page's list."""
    cfg = tmp_path / "gpuprobe.yaml"
    plugin = ROOT / "tests/fixtures/device_plugin/mps.yaml"
    cfg.write_text(f"device_plugin:\n  config_file: {plugin}\n")
    target = tmp_path / "snap"
    out = gpuprobe("capture", str(target), "--config", str(cfg))
    assert out.returncode == 0, out.stderr
    files = written(target)
    # What this capture must have written, whatever the machine (it has a loopback link).
    assert {"snapshot.json", "nvml.json", "netlink.json", "device-plugin.json"} <= files
    assert sorted(files - listed()) == []


def test_every_listed_file_is_one_gpuprobe_reads_or_writes() -> None:
    """No entry on the list that no code names (a file renamed in the code, not the page)."""
    source = "\n".join(p.read_text() for p in (ROOT / "agent/gpuprobe").rglob("*.py"))
    unnamed = sorted(n for n in listed() if f'"{n.rstrip("/")}"' not in source)
    assert unnamed == []
    assert {"snapshot.json", "nvml.json", "rootfs/", "netlink.json", "report.json"} <= listed()
