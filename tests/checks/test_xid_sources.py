"""Check `xid` says when it read no source at all: "no XID errors" from no kernel log file
and no NVML events would be a false all-clear."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

from gpuprobe.checks import xid
from gpuprobe.checks.context import CheckContext
from gpuprobe.config import Config
from gpuprobe.host import snapshot_host
from gpuprobe.report import Status
from helpers import run_check, snapshot

BLIND = (
    "read no source of XIDs: NVML events unavailable (NVML LibraryNotFound) and no kernel "
    "log file could be read (xid.kernel_logs)"
)


def without(name: str, tmp_path: Path, *paths: str) -> Path:
    dest = tmp_path / name
    shutil.copytree(snapshot(name), dest)
    for path in paths:
        (dest / path).unlink()
    return dest


def test_a_recorded_vm_without_nvml_or_kernel_log_is_unknown() -> None:
    result = run_check("xid", "kvm-epyc-nogpu")
    assert (result.status, result.summary, result.findings) == (Status.UNKNOWN, BLIND, [])
    assert result.data["sources"] == {
        "nvml_events": "unavailable (NVML LibraryNotFound)",
        "kernel_logs": [],
        "kernel": [{"source": "/dev/kmsg", "kind": "kmsg", "since": None, "error": "absent"}],
    }


def test_a_gpu_node_whose_sources_are_both_gone_is_unknown(tmp_path: Path) -> None:
    snap = without("synthetic-h100-8gpu-healthy", tmp_path, "nvml.json", "rootfs/var/log/kern.log")
    result = xid.run(CheckContext(snapshot_host(str(snap))), Config())
    assert (result.status, result.summary) == (Status.UNKNOWN, BLIND)


def test_one_source_read_is_enough_to_say_none(tmp_path: Path) -> None:
    snap = without("synthetic-h100-8gpu-healthy", tmp_path, "nvml.json")
    result = xid.run(CheckContext(snapshot_host(str(snap))), Config())
    assert (result.status, result.summary) == (Status.OK, "no XID errors this boot")
    assert result.data["sources"]["kernel_logs"] == ["/var/log/kern.log"]


def test_nvml_events_alone_claim_only_the_time_they_cover(tmp_path: Path) -> None:
    """No kernel log could be read (no /dev/kmsg, no log file): NVML's event set holds only
    what happened since it was registered, so "no XID errors this boot" would claim the boot
    unread (issue 40 item 3). The check says what it read and since when, and is UNKNOWN."""
    snap = without("synthetic-h100-8gpu-healthy", tmp_path / "b", "rootfs/var/log/kern.log")
    host = snapshot_host(str(snap))
    ctx = CheckContext(host)  # one runner's context: its states
    result = xid.run(ctx, Config())
    since = ctx.kept(xid.KEEPS).events_since  # the set's first drain: this run
    drained = datetime.fromisoformat(since)
    assert abs(drained.timestamp() - host.clock.wall()) < 60
    assert (result.status, result.summary, result.findings) == (
        Status.UNKNOWN,
        f"no XID in NVML's events since {since}; no kernel log could be read (/dev/kmsg "
        "absent; none of xid.kernel_logs): nothing is known of this boot before then",
        [],
    )
    # A later run (the daemon's) covers the same span, from the first drain on.
    assert xid.run(ctx, Config()).summary == result.summary
    assert result.data["sources"] == {
        "nvml_events": "read",
        "kernel_logs": [],
        "kernel": [{"source": "/dev/kmsg", "kind": "kmsg", "since": None, "error": "absent"}],
    }
