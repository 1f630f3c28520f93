"""Check `xid` on snapshots: sources, classification, stickiness, clearing, and the CLI."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import gpuprobe, require_root
from gpuprobe.checks import runner, xid
from gpuprobe.checks import state as check_state
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.xid.state import StateError, state_path
from gpuprobe.config import Config
from gpuprobe.host import live_host, snapshot_host
from gpuprobe.report import Status
from helpers import FakeClock, codes, config, run_check, snapshot

UUID = "GPU-5f1c{0:04x}-8e2b-4c1d-9a7e-{0:012x}"
BOOT_ID = "3f0c5a8e-6a1d-4f0b-9a57-2b8c1e7d4f10"


def gpu(index: int) -> str:
    return f"gpu:{index}:{UUID.format(index)}"


def copy_snapshot(name: str, tmp_path: Path) -> Path:
    """A private copy of a snapshot that a test may change."""
    dest = tmp_path / name
    shutil.copytree(snapshot(name), dest)
    return dest


def state_config(directory: Path) -> Config:
    return config(xid={"state_dir": str(directory)})


def by_xid(data: dict[str, Any]) -> dict[tuple[int | None, int], dict[str, Any]]:
    """The check's data.xids by (GPU index, XID)."""
    return {(x["gpu"], x["xid"]): x for x in data["xids"]}


def test_healthy_node_has_no_xid_and_ignores_the_previous_boots() -> None:
    result = run_check("xid", "synthetic-h100-8gpu-healthy")
    assert result.findings == []
    assert result.status is Status.OK
    assert result.summary == "no XID errors this boot"
    assert result.data["xids"] == []
    assert result.data["boot_id"] == BOOT_ID
    assert result.data["sources"] == {
        "nvml_events": "read",
        "kernel_logs": ["/var/log/kern.log"],
        "kernel": [
            {"source": "/dev/kmsg", "kind": "kmsg", "since": None, "error": "absent"},
            # the file reaches back to an earlier boot's lines (passed over)
            {"source": "/var/log/kern.log", "kind": "file", "since": "2026-11-28T23:10:04Z"},
        ],
    }


def test_application_xids_among_unrelated_kernel_lines_are_warnings() -> None:
    result = run_check("xid", "synthetic-xid-app")
    assert codes(result) == [
        ("XID", "WARNING", "NONE", gpu(4)),  # 43: the channel was reset, the GPU is fine
        ("XID", "WARNING", "RESTART_APP", gpu(0)),
        ("XID", "WARNING", "RESTART_APP", gpu(0)),
        ("XID", "WARNING", "RESTART_APP", gpu(4)),
    ]
    xids = by_xid(result.data)
    assert sorted(xids) == [(0, 13), (0, 31), (4, 43), (4, 45)]
    assert xids[(0, 13)] == {
        "gpu": 0,
        "uuid": UUID.format(0),
        "xid": 13,
        "count": 2,
        "last_seen": "2026-11-29T10:01:07Z",
        "severity": "WARNING",
        "action": "RESTART_APP",
        "description": "Graphics Engine Exception",
        "source": "kernel-log",
        "pci_bus_id": "0000:18:00.0",
        "message": "pid=41000, name=python3, Graphics Exception: ESR 0x524730=0x2000d 0x524734=0x0",
        "active": True,
        "cleared": False,
    }
    assert result.summary == (
        "4 active XIDs: Xid 13 on GPU 0 (x2), Xid 31 on GPU 0, Xid 43 on GPU 4, Xid 45 on GPU 4"
    )
    message = next(f.message for f in result.findings if "Xid 31" in f.message)
    assert message.startswith(
        "GPU 0 (0000:18:00.0): Xid 31, GPU memory page fault, seen 1 time this boot"
    )
    assert message.endswith("restart the application that hit it; the GPU itself stays usable")


def test_hardware_xids_are_critical_and_counted_once_across_kern_log_and_syslog() -> None:
    result = run_check("xid", "synthetic-xid-critical")
    assert codes(result) == [
        ("XID", "CRITICAL", "RESET_GPU", gpu(2)),
        ("XID", "CRITICAL", "RESET_GPU", gpu(6)),
        ("XID", "CRITICAL", "RESET_GPU", gpu(6)),
        ("XID", "WARNING", "NONE", gpu(2)),
    ]
    xids = by_xid(result.data)
    assert {k: (v["count"], v["severity"], v["action"]) for k, v in xids.items()} == {
        (2, 48): (1, "CRITICAL", "RESET_GPU"),
        (2, 63): (1, "WARNING", "NONE"),
        (6, 119): (2, "CRITICAL", "RESET_GPU"),
        (6, 154): (1, "CRITICAL", "RESET_GPU"),
    }
    assert xids[(6, 119)]["last_seen"] == "2026-11-29T18:40:19Z"
    assert result.data["sources"]["kernel_logs"] == ["/var/log/kern.log", "/var/log/syslog"]
    xid48 = next(f for f in result.findings if "Xid 48" in f.message)
    assert "Double Bit ECC Error" in xid48.message
    assert "nvidia-smi -r -i 2" in xid48.message
    assert xid48.message.endswith(
        "(reported until a reboot or a reset is seen, or `gpuprobe clear-xid` clears it)"
    )


def test_xid_63_says_the_row_remap_is_pending_until_the_next_reset() -> None:
    # The driver says "reset gpu to activate"; NVIDIA's catalog files 63 under IGNORE: a row
    # was recorded for remapping and takes effect at the GPU's next reset. One instruction.
    result = run_check("xid", "synthetic-xid-critical")
    xid63 = next(f for f in result.findings if "Xid 63" in f.message)
    assert (xid63.severity.value, xid63.action.value) == ("WARNING", "NONE")
    assert "reset gpu to activate" in xid63.message  # the driver's own words, quoted
    assert xid63.message.endswith(
        ": row remapping is pending: the remap takes effect at the GPU's next reset "
        "(nvidia-smi -r -i 2 once it is drained, or a reboot)"
    )
    assert "nothing to do" not in xid63.message


def test_xid_63_on_a_gpu_that_retires_pages_says_so(tmp_path: Path) -> None:
    # Before Ampere, Xid 63 is a retired page (NVIDIA, "Dynamic Page Retirement": "XID 63
    # Dynamic Page Retirement: New retired page, reload the driver to activate.").
    path = copy_snapshot("synthetic-h100-8gpu-healthy", tmp_path)
    line = (
        "NVRM: Xid (PCI:0000:ab:00): 63, Dynamic Page Retirement: New retired page, reload "
        "the driver to activate. (0x00000000000123a0)\n"
    )
    (path / "rootfs/var/log/kern.log").write_text(line)
    (finding,) = xid.run(CheckContext(snapshot_host(str(path))), Config()).findings
    assert finding.message.endswith(
        ": page retirement is pending: the retired page takes effect when the driver reloads "
        "or the GPU resets (nvidia-smi -r -i 5 once it is drained, or a reboot)"
    )


def test_identical_lines_in_one_log_are_separate_xids_but_not_across_logs(
    tmp_path: Path,
) -> None:
    path = copy_snapshot("synthetic-h100-8gpu-healthy", tmp_path)
    line = "NVRM: Xid (PCI:0000:ab:00): 31, pid=41005, name=python3, MMU Fault\n"
    (path / "rootfs/var/log/kern.log").write_text(line * 2)
    (path / "rootfs/var/log/messages").write_text(line)
    result = xid.run(CheckContext(snapshot_host(str(path))), Config())
    assert codes(result) == [("XID", "WARNING", "RESTART_APP", gpu(5))]
    (entry,) = result.data["xids"]
    assert (entry["count"], entry["last_seen"]) == (2, None)


def test_nvml_events_are_xids_and_one_occurrence_in_both_sources_counts_once() -> None:
    result = run_check("xid", "synthetic-xid-event")
    assert codes(result) == [
        ("XID", "CRITICAL", "RESET_GPU", gpu(3)),
        ("XID", "WARNING", "RESTART_APP", gpu(0)),
    ]
    xids = by_xid(result.data)
    assert sorted(xids) == [(0, 13), (3, 95)]  # the single-bit ECC event is no XID
    assert (xids[(3, 95)]["count"], xids[(3, 95)]["source"]) == (1, "nvml-event")
    assert (
        xids[(3, 95)]["message"]
        == "pid=41003, name=python3, Uncontained: FBHUB. RST: Yes, D-RST: No"
    )
    assert (xids[(0, 13)]["count"], xids[(0, 13)]["last_seen"]) == (2, "2026-11-29T19:02:12Z")


def test_critical_nvml_events_other_than_xids_raise_the_codes_of_their_faults() -> None:
    result = run_check("xid", "synthetic-nvml-critical-events")
    assert codes(result) == [
        ("ECC_UNCORRECTABLE", "CRITICAL", "RESET_GPU", gpu(2)),  # double-bit ECC
        ("ECC_UNCORRECTABLE", "CRITICAL", "RESET_GPU", gpu(4)),  # fatal poison
        ("GPU_LOST", "CRITICAL", "REBOOT_NODE", gpu(6)),
        ("GPU_RECOVERY_REQUIRED", "CRITICAL", "REBOOT_NODE", gpu(7)),  # its field: NODE_REBOOT
        ("GPU_RECOVERY_REQUIRED", "CRITICAL", "RESET_GPU", gpu(1)),  # its field unsupported
        ("ROW_REMAP_FAILURE", "CRITICAL", "HARDWARE_INSPECTION", gpu(5)),
    ]
    assert result.data["xids"] == []  # single-bit ECC, non-fatal poison and clock: nothing
    events = {(e["gpu"], e["type"]): e for e in result.data["events"]}
    assert sorted(events) == [
        (1, "GpuRecoveryAction"),
        (2, "DoubleBitEccError"),
        (4, "FatalPoisonError"),
        (5, "DramRetirementFailure"),
        (6, "GpuUnavailableError"),
        (7, "GpuRecoveryAction"),
    ]
    assert events[(2, "DoubleBitEccError")] == {
        "gpu": 2,
        "uuid": UUID.format(2),
        "pci_bus_id": "0000:3a:00.0",
        "type": "DoubleBitEccError",
        "code": "ECC_UNCORRECTABLE",
        "count": 2,
        "last_seen": "2026-11-29T18:50:00Z",
        "severity": "CRITICAL",
        "action": "RESET_GPU",
        "description": "a double-bit (uncorrectable) ECC error",
        "recovery_action": None,
        "active": True,
        "cleared": False,
    }
    assert events[(7, "GpuRecoveryAction")]["recovery_action"] == "NODE_REBOOT"
    assert events[(1, "GpuRecoveryAction")]["recovery_action"] is None
    assert result.summary == (
        "6 active NVML events: GpuRecoveryAction on GPU 1, DoubleBitEccError on GPU 2 (x2), "
        "FatalPoisonError on GPU 4, DramRetirementFailure on GPU 5 and 2 more"
    )
    (recovery,) = [f for f in result.findings if f.resource == gpu(7)]
    assert recovery.message == (
        "GPU 7 (0000:db:00.0): NVML event GpuRecoveryAction (NODE_REBOOT), a recovery action "
        "event: the driver asks for a node reboot, seen 1 time this boot, last at "
        "2026-11-29T18:40:00Z: drain and reboot the node; inspect the GPU if it happens again "
        "(reported until a reboot or a reset is seen, or `gpuprobe clear-xid` clears it)"
    )


def test_critical_events_are_sticky_and_cleared_like_critical_xids(tmp_path: Path) -> None:
    path = copy_snapshot("synthetic-nvml-critical-events", tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    host = snapshot_host(str(path))
    ctx = CheckContext(host)  # one runner's context: its states
    assert xid.clear(ctx, state_config(state), gpu=2) == 1
    result = xid.run(ctx, state_config(state))
    assert [f.resource for f in result.findings if f.code == "ECC_UNCORRECTABLE"] == [gpu(4)]
    saved = json.loads(state_path(str(state)).read_text())
    assert saved["cleared"] == {
        f"{UUID.format(2)}|DoubleBitEccError": {"count": 2, "last_seen": "2026-11-29T18:50:00Z"}
    }
    # a new process (a restarted agent) reads the clearing back: still only GPU 2 is silent
    again = xid.run(CheckContext(snapshot_host(str(path))), state_config(state))
    assert len(again.findings) == 5
    assert {e["gpu"]: e["cleared"] for e in again.data["events"]}[2] is True


def test_gpu_fallen_off_the_bus_is_named_by_its_place_on_the_pci_bus() -> None:
    result = run_check("xid", "synthetic-gpu-fallen-off-bus")
    assert codes(result) == [("XID", "CRITICAL", "REBOOT_NODE", "gpu:3:GPU-5f1c0003")]
    (entry,) = result.data["xids"]
    assert (entry["pci_bus_id"], entry["last_seen"]) == ("0000:5d:00.0", "2026-11-29T20:58:01Z")
    assert "drain and reboot the node" in result.findings[0].message


def test_no_gpu_node_has_no_xid() -> None:
    result = run_check("xid", "kvm-epyc-nogpu")
    assert result.status is Status.UNKNOWN  # read no source: tests/checks/test_xid_sources.py
    assert result.data["sources"]["nvml_events"] == "unavailable (NVML LibraryNotFound)"


# --- the daemon: memory, stickiness, boots ----------------------------------------------


def test_events_seen_once_stay_in_the_daemons_memory(tmp_path: Path) -> None:
    path = copy_snapshot("synthetic-xid-event", tmp_path)
    (path / "rootfs/var/log/kern.log").unlink()  # only the event set saw them
    host = snapshot_host(str(path))
    ctx = CheckContext(host)  # one runner's context: its states
    first = xid.run(ctx, Config())
    second = xid.run(ctx, Config())  # the event set is drained: nothing new arrives
    assert codes(second) == codes(first)
    assert by_xid(second.data)[(3, 95)]["count"] == 1
    assert by_xid(second.data)[(0, 13)]["count"] == 2


def test_a_new_boot_clears_what_the_last_boot_left(tmp_path: Path) -> None:
    path = copy_snapshot("synthetic-xid-event", tmp_path)
    (path / "rootfs/var/log/kern.log").unlink()
    host = snapshot_host(str(path))
    ctx = CheckContext(host)  # one runner's context: its states
    assert codes(xid.run(ctx, Config()))[0] == (
        "XID",
        "CRITICAL",
        "RESET_GPU",
        gpu(3),
    )
    (path / "rootfs/proc/sys/kernel/random/boot_id").write_text("a-new-boot\n")
    result = xid.run(ctx, Config())
    assert result.findings == []
    assert result.data["boot_id"] == "a-new-boot"


def test_warnings_expire_after_their_window_in_the_daemon() -> None:
    host = snapshot_host(snapshot("synthetic-xid-app"))
    ctx = CheckContext(host)  # one runner's context: its states
    host.clock = clock = FakeClock()
    cfg = config(xid={"warning_window_seconds": 600})
    assert len(xid.run(ctx, cfg).findings) == 4
    clock.advance(600)
    assert len(xid.run(ctx, cfg).findings) == 4
    clock.advance(1)
    result = xid.run(ctx, cfg)
    assert result.findings == []
    assert [x["active"] for x in result.data["xids"]] == [False] * 4
    assert result.summary == (
        "no active XID (4 seen this boot: cleared, or warnings past their window)"
    )


def test_critical_xids_are_sticky_past_the_window() -> None:
    host = snapshot_host(snapshot("synthetic-xid-critical"))
    ctx = CheckContext(host)  # one runner's context: its states
    host.clock = clock = FakeClock()
    xid.run(ctx, Config())
    clock.advance(86400)
    result = xid.run(ctx, Config())
    assert codes(result) == [
        ("XID", "CRITICAL", "RESET_GPU", gpu(2)),
        ("XID", "CRITICAL", "RESET_GPU", gpu(6)),
        ("XID", "CRITICAL", "RESET_GPU", gpu(6)),
    ]


# --- clearing ------------------------------------------------------------------------------


def test_clear_silences_sticky_xids_for_this_boot_and_persists(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    cfg = state_config(state)
    host = snapshot_host(snapshot("synthetic-xid-critical"))
    ctx = CheckContext(host)  # one runner's context: its states
    assert xid.clear(ctx, cfg) == 3
    result = xid.run(ctx, cfg)
    assert codes(result) == [("XID", "WARNING", "NONE", gpu(2))]
    assert by_xid(result.data)[(2, 48)]["cleared"] is True
    saved = json.loads(state_path(str(state)).read_text())
    assert saved["boot_id"] == BOOT_ID
    assert sorted(saved["cleared"]) == [
        f"{UUID.format(2)}|48",
        f"{UUID.format(6)}|119",
        f"{UUID.format(6)}|154",
    ]
    assert saved["cleared"][f"{UUID.format(6)}|119"] == {
        "count": 2,
        "last_seen": "2026-11-29T18:40:19Z",
    }
    # Another process (a fresh host, empty memory) reads the clearing from the state file.
    fresh = snapshot_host(snapshot("synthetic-xid-critical"))
    assert codes(xid.run(CheckContext(fresh), cfg)) == [("XID", "WARNING", "NONE", gpu(2))]
    assert xid.clear(CheckContext(fresh), cfg) == 0


def test_clear_one_gpu(tmp_path: Path) -> None:
    cfg = state_config(tmp_path)
    host = snapshot_host(snapshot("synthetic-xid-critical"))
    ctx = CheckContext(host)  # one runner's context: its states
    assert xid.clear(ctx, cfg, gpu=6) == 2
    assert codes(xid.run(ctx, cfg)) == [
        ("XID", "CRITICAL", "RESET_GPU", gpu(2)),
        ("XID", "WARNING", "NONE", gpu(2)),
    ]


def test_a_cleared_xid_that_recurs_is_reported_again(tmp_path: Path) -> None:
    cfg = state_config(tmp_path / "state")
    (tmp_path / "state").mkdir()
    path = copy_snapshot("synthetic-xid-critical", tmp_path)
    assert xid.clear(CheckContext(snapshot_host(str(path))), cfg) == 3
    log = path / "rootfs/var/log/kern.log"
    log.write_text(
        log.read_text()
        + "2026-11-29T21:30:00.000001+00:00 gpu-node-17 kernel: NVRM: Xid (PCI:0000:3a:00): "
        "48, pid=41002, name=python3, An uncorrectable double bit error (DBE) has been "
        "detected on GPU in the framebuffer at partition 6, subpartition 0.\n"
    )
    result = xid.run(CheckContext(snapshot_host(str(path))), cfg)
    assert codes(result) == [
        ("XID", "CRITICAL", "RESET_GPU", gpu(2)),
        ("XID", "WARNING", "NONE", gpu(2)),
    ]
    assert by_xid(result.data)[(2, 48)]["count"] == 2


def test_a_clearing_from_another_boot_is_void(tmp_path: Path) -> None:
    cfg = state_config(tmp_path)
    assert xid.clear(CheckContext(snapshot_host(snapshot("synthetic-xid-critical"))), cfg) == 3
    saved = json.loads(state_path(str(tmp_path)).read_text())
    saved["boot_id"] = "an-older-boot"
    state_path(str(tmp_path)).write_text(json.dumps(saved))
    result = xid.run(CheckContext(snapshot_host(snapshot("synthetic-xid-critical"))), cfg)
    assert len(result.findings) == 4


def test_clear_without_the_state_directory_is_one_clear_error(tmp_path: Path) -> None:
    cfg = state_config(tmp_path / "absent")
    host = snapshot_host(snapshot("synthetic-xid-critical"))
    ctx = CheckContext(host)  # one runner's context: its states
    with pytest.raises(StateError, match=r"absent does not exist: create it or set"):
        xid.clear(ctx, cfg)
    assert len(xid.run(ctx, cfg).findings) == 4  # nothing was cleared


def test_clear_with_a_file_for_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StateError, match=r"file/xid-state\.json: not a directory$"):
        xid.clear(
            CheckContext(snapshot_host(snapshot("synthetic-xid-critical"))),
            state_config(tmp_path / "file"),
        )


def test_a_corrupt_state_file_is_reported_not_raised_by_the_check(tmp_path: Path) -> None:
    state_path(str(tmp_path)).write_text("{not json")
    cfg = state_config(tmp_path)
    host = snapshot_host(snapshot("synthetic-xid-critical"))
    ctx = CheckContext(host)  # one runner's context: its states
    result = xid.run(ctx, cfg)
    assert len(result.findings) == 4
    assert result.data["state_error"].endswith(
        "xid-state.json: line 1: Expecting property name enclosed in double quotes"
    )
    with pytest.raises(StateError, match=r"xid-state\.json: line 1"):
        xid.clear(ctx, cfg)


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on a read-only bind mount (root ignores file modes, not mount flags)."""
    require_root()
    path = tmp_path / "ro"
    path.mkdir()
    subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], check=True)
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_clear_on_a_read_only_state_directory_is_one_clear_error(read_only_dir: Path) -> None:
    host = snapshot_host(snapshot("synthetic-xid-critical"))
    ctx = CheckContext(host)  # one runner's context: its states
    with pytest.raises(StateError, match="read-only file system"):
        xid.clear(ctx, state_config(read_only_dir))


def test_replaying_a_snapshot_never_writes_state(tmp_path: Path) -> None:
    xid.run(CheckContext(snapshot_host(snapshot("synthetic-xid-critical"))), state_config(tmp_path))
    assert list(tmp_path.iterdir()) == []


XID_CRITICAL_FINDINGS = [
    ("XID", "CRITICAL", "RESET_GPU", gpu(2)),
    ("XID", "CRITICAL", "RESET_GPU", gpu(6)),
    ("XID", "CRITICAL", "RESET_GPU", gpu(6)),
    ("XID", "WARNING", "NONE", gpu(2)),
]


@pytest.fixture
def machine_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This machine's default state directory (a daemon's), holding a clearing of every
    sticky XID of synthetic-xid-critical made in the snapshot's own boot."""
    directory = tmp_path / "machine-state"
    directory.mkdir()
    monkeypatch.setattr(check_state, "DEFAULT_STATE_DIR", str(directory))
    assert (
        xid.clear(
            CheckContext(snapshot_host(snapshot("synthetic-xid-critical"))), state_config(directory)
        )
        == 3
    )
    return directory


def test_replay_reads_no_state_of_this_machine_unless_configured(machine_state: Path) -> None:
    before = state_path(str(machine_state)).read_text()
    result = xid.run(CheckContext(snapshot_host(snapshot("synthetic-xid-critical"))), Config())
    assert codes(result) == XID_CRITICAL_FINDINGS
    assert result.data["state_file"] is None
    assert "state_error" not in result.data
    assert state_path(str(machine_state)).read_text() == before
    # Named in the config, the same state file applies to the replay.
    configured = xid.run(
        CheckContext(snapshot_host(snapshot("synthetic-xid-critical"))), state_config(machine_state)
    )
    assert codes(configured) == [("XID", "WARNING", "NONE", gpu(2))]
    assert configured.data["state_file"] == str(state_path(str(machine_state)))


def test_replay_is_blind_to_a_corrupt_state_file_of_this_machine(machine_state: Path) -> None:
    state_path(str(machine_state)).write_text("{not json")
    result = xid.run(CheckContext(snapshot_host(snapshot("synthetic-xid-critical"))), Config())
    assert codes(result) == XID_CRITICAL_FINDINGS
    assert "state_error" not in result.data


def test_the_live_node_uses_the_default_state_dir(tmp_path: Path, machine_state: Path) -> None:
    root = host_tree(tmp_path, "synthetic-xid-critical")
    result = xid.run(CheckContext(live_host(str(root))), Config())
    assert result.data["state_file"] == str(state_path(str(machine_state)))
    assert codes(result) == [("XID", "WARNING", "NONE", gpu(2))]


def test_clearing_a_replay_without_a_state_dir_holds_in_its_memory_only(
    machine_state: Path,
) -> None:
    before = state_path(str(machine_state)).read_text()
    host = snapshot_host(snapshot("synthetic-xid-critical"))
    ctx = CheckContext(host)  # one runner's context: its states
    assert xid.clear(ctx, Config(), gpu=6) == 2
    assert codes(xid.run(ctx, Config())) == [
        ("XID", "CRITICAL", "RESET_GPU", gpu(2)),
        ("XID", "WARNING", "NONE", gpu(2)),
    ]
    assert state_path(str(machine_state)).read_text() == before
    fresh = snapshot_host(snapshot("synthetic-xid-critical"))
    assert codes(xid.run(CheckContext(fresh), Config())) == XID_CRITICAL_FINDINGS


# --- the live daemon keeps sticky XIDs; the command line ------------------------------------


def host_tree(tmp_path: Path, name: str) -> Path:
    """A snapshot's host files as a live `--root` tree (NVML itself is absent here)."""
    root = tmp_path / "host"
    shutil.copytree(Path(snapshot(name)) / "rootfs", root)
    return root


def write_config(tmp_path: Path, state: Path) -> Path:
    path = tmp_path / "gpuprobe.yaml"
    path.write_text(f"xid:\n  state_dir: {state}\n")
    return path


def test_live_agent_keeps_sticky_xids_across_a_restart_and_log_rotation(tmp_path: Path) -> None:
    root = host_tree(tmp_path, "synthetic-xid-critical")
    state = tmp_path / "state"
    state.mkdir()
    cfg = write_config(tmp_path, state)
    first = gpuprobe("check", "--json", "--only", "xid", "--root", str(root), "--config", str(cfg))
    assert first.returncode == 2
    saved = json.loads(state_path(str(state)).read_text())
    assert sorted(saved["sticky"]) == [
        f"{UUID.format(2)}|48",
        f"{UUID.format(6)}|119",
        f"{UUID.format(6)}|154",
    ]
    for log in ("kern.log", "syslog"):
        (root / "var/log" / log).unlink()  # rotated away
    again = gpuprobe("check", "--json", "--only", "xid", "--root", str(root), "--config", str(cfg))
    findings = again.json()["checks"][0]["findings"]
    assert sorted((f["code"], f["severity"], f["resource"]) for f in findings) == [
        ("XID", "CRITICAL", gpu(2)),
        ("XID", "CRITICAL", gpu(6)),
        ("XID", "CRITICAL", gpu(6)),
    ]


def test_clear_xid_command(tmp_path: Path) -> None:
    root = host_tree(tmp_path, "synthetic-xid-critical")
    state = tmp_path / "state"
    state.mkdir()
    cfg = write_config(tmp_path, state)
    out = gpuprobe("clear-xid", "--gpu", "6", "--root", str(root), "--config", str(cfg))
    assert (out.returncode, out.stdout, out.stderr) == (
        0,
        "gpuprobe: cleared 2 sticky findings on GPU 6\n",
        "",
    )
    out = gpuprobe("clear-xid", "--root", str(root), "--config", str(cfg))
    assert out.stdout == "gpuprobe: cleared 1 sticky finding\n"
    check = gpuprobe("check", "--json", "--only", "xid", "--root", str(root), "--config", str(cfg))
    assert check.returncode == 1  # the informational Xid 63 is all that is left
    (finding,) = check.json()["checks"][0]["findings"]
    assert (finding["severity"], finding["action"]) == ("WARNING", "NONE")


def test_clear_xid_command_without_its_state_directory(tmp_path: Path) -> None:
    root = host_tree(tmp_path, "synthetic-xid-critical")
    cfg = write_config(tmp_path, tmp_path / "absent")
    out = gpuprobe("clear-xid", "--root", str(root), "--config", str(cfg))
    assert out.returncode == 64
    assert out.stderr == (
        f"gpuprobe: xid state directory {tmp_path / 'absent'} does not exist: create it or set "
        "xid.state_dir (see gpuprobe clear-xid --help)\n"
    )
    assert out.stdout == ""


def test_clear_xid_usage_errors(tmp_path: Path) -> None:
    out = gpuprobe("clear-xid", "--gpu", "x")
    assert out.returncode == 64 and "not a whole number" in out.stderr
    out = gpuprobe("clear-xid", "--root", str(tmp_path / "absent"))
    assert (out.returncode, out.stderr) == (
        64,
        f"gpuprobe: --root {tmp_path / 'absent'}: not a directory "
        "(see gpuprobe clear-xid --help)\n",
    )


def test_a_runner_works_out_its_state_directory_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str | None] = []
    real = runner.state_directory

    def counted(*args: Any) -> str | None:
        asked.append(real(*args))
        return asked[-1]

    monkeypatch.setattr(runner, "state_directory", counted)
    host = snapshot_host(str(snapshot("synthetic-xid-event")))
    checks = runner.CheckRunner(host, state_config(tmp_path), {"xid": xid.CHECK})
    for _ in range(2):
        (ran,) = checks.run(["xid"])
        assert ran.result.data["state_file"] == str(state_path(str(tmp_path)))
    assert asked == [str(tmp_path)]


def test_a_sticky_event_in_the_state_file_is_reported_and_an_unknown_type_is_not(
    tmp_path: Path,
) -> None:
    entry = {"gpu": 6, "uuid": UUID.format(6), "pci_bus_id": "0000:ba:00.0", "xid": 0}
    entry |= {"count": 1, "last_seen": "2026-11-29T18:30:00Z", "source": "nvml-event"}
    sticky = {
        f"{UUID.format(6)}|GpuUnavailableError": entry | {"event": "GpuUnavailableError"},
        f"{UUID.format(6)}|PState": entry | {"event": "PState"},
    }
    state = {"format": 1, "boot_id": BOOT_ID, "cleared": {}, "sticky": sticky}
    state_path(str(tmp_path)).write_text(json.dumps(state))
    result = run_check("xid", "synthetic-h100-8gpu-healthy", state_config(tmp_path))
    assert codes(result) == [("GPU_LOST", "CRITICAL", "REBOOT_NODE", gpu(6))]
    assert [e["type"] for e in result.data["events"]] == ["GpuUnavailableError"]


def test_rotated_logs_are_read_oldest_file_first_whatever_order_the_config_lists(
    tmp_path: Path,
) -> None:
    # The boot and the GPUs' attach lines went to kern.log.1 at rotation, this boot's XIDs
    # are in kern.log; the config lists the live log first.
    root = copy_snapshot("synthetic-xid-app", tmp_path)
    log = root / "rootfs/var/log/kern.log"
    lines = log.read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "EXT4-fs" in line)
    (root / "rootfs/var/log/kern.log.1").write_text("".join(lines[:cut]))
    log.write_text("".join(lines[cut:]))
    cfg = config(xid={"kernel_logs": ["/var/log/kern.log", "/var/log/kern.log.1"]})
    result = xid.run(CheckContext(snapshot_host(root)), cfg)
    assert sorted(by_xid(result.data)) == [(0, 13), (0, 31), (4, 43), (4, 45)]
    assert result.data["sources"]["kernel_logs"] == ["/var/log/kern.log.1", "/var/log/kern.log"]


def test_a_full_state_disk_is_said_in_the_data_and_once_in_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The live agent's sticky XIDs on a state disk with no byte left: `data.state_error`
    said so, and the log nothing (issue 41 item 10). Now one warning line, not one a round,
    and a line when the file is written again."""
    from mounting import fill, mounted

    root = host_tree(tmp_path, "synthetic-xid-critical")
    caplog.set_level(logging.INFO, logger="gpuprobe.state")
    with mounted("tmpfs", "size=64k") as state:
        fill(state)
        for _ in range(3):
            result = xid.run(CheckContext(live_host(str(root))), state_config(state))
        assert result.data["state_error"] == (
            f"xid state {state_path(str(state))}: no space left on device"
        )
        failed = [r for r in caplog.records if r.name == "gpuprobe.state"]
        assert [(r.levelname, r.getMessage(), r.path, r.error) for r in failed] == [  # type: ignore[attr-defined]
            (
                "WARNING",
                "state file not written: what it keeps is lost at the next restart",
                str(state_path(str(state))),
                f"xid state {state_path(str(state))}: no space left on device",
            )
        ]
        (state / "filler").unlink()
        again = xid.run(CheckContext(live_host(str(root))), state_config(state))
        assert "state_error" not in again.data
        assert state_path(str(state)).exists()
    written = [r.getMessage() for r in caplog.records if r.name == "gpuprobe.state"]
    assert written[-1] == "state file written again"
