"""The xid check on AMD nodes: amdgpu's faults in the kernel log (AMDGPU_FAULT)."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

from gpuprobe.checks import xid
from gpuprobe.checks.context import CheckContext
from gpuprobe.host import snapshot_host
from gpuprobe.pipeline import run_checks
from helpers import FakeClock, codes, config, run_check, snapshot


def amd_gpu(index: int) -> str:
    return f"gpu:{index}:{0x7C3A51D2E0B4F600 + index * 0x1111:016x}"


def test_a_ring_timeout_and_the_reset_that_followed_are_warnings_naming_the_process() -> None:
    result = run_check("xid", "synthetic-amd-ring-timeout-reset")
    assert codes(result) == [
        ("AMDGPU_FAULT", "WARNING", "RESTART_APP", amd_gpu(2)),
        ("AMDGPU_FAULT", "WARNING", "RESTART_APP", amd_gpu(2)),
    ]
    timeout, reset = result.findings
    assert timeout.message == (
        "AMD GPU 2 (0000:38:00.0): a GPU job hung and the driver timed it out (ring "
        "comp_1.0.0), 1 time this boot; process python3 (pid 48211). Restart the job; if it "
        "recurs on this GPU, drain it and reset it"
    )
    assert reset.message.startswith("AMD GPU 2 (0000:38:00.0): the driver reset the GPU")
    assert result.summary == "no XID errors this boot; 2 amdgpu faults on 1 GPU"
    assert result.data["amdgpu_faults"][0] == {
        "gpu": 2,
        "pci_bus_id": "0000:38:00.0",
        "cause": "ring_timeout",
        "severity": "WARNING",
        "action": "RESTART_APP",
        "count": 1,
        "detail": "comp_1.0.0",
        "processes": ["python3 (pid 48211)"],
        "last_seen": "2026-11-29T20:52:31Z",
        "active": True,
    }


def test_an_uncorrectable_ras_error_is_critical() -> None:
    result = run_check("xid", "synthetic-amd-ras-uncorrectable")
    assert codes(result) == [("AMDGPU_FAULT", "CRITICAL", "RESET_GPU", amd_gpu(3))]
    assert "(2 in umc), 1 time this boot" in result.findings[0].message


def test_a_healthy_amd_node_says_it_looked() -> None:
    result = run_check("xid", "synthetic-amd-mi300x-8gpu-healthy")
    assert result.findings == []
    assert result.summary == "no XID errors this boot; no amdgpu fault"
    assert result.data["amdgpu_faults"] == []


def test_an_nvidia_node_has_no_amd_part() -> None:
    result = run_check("xid", "synthetic-h100-8gpu-healthy")
    assert "amdgpu_faults" not in result.data
    assert "amdgpu" not in result.summary


def test_in_the_daemon_a_warning_fault_ends_after_the_window_a_critical_one_stays() -> None:
    cfg = config(xid={"warning_window_seconds": 600})
    host = snapshot_host(snapshot("synthetic-amd-ring-timeout-reset"))
    ctx = CheckContext(host)  # one runner's context: its states
    host.clock = clock = FakeClock()
    assert len(xid.run(ctx, cfg).findings) == 2
    clock.advance(601)
    quiet = xid.run(ctx, cfg)
    assert quiet.findings == []
    assert [e["active"] for e in quiet.data["amdgpu_faults"]] == [False, False]
    host = snapshot_host(snapshot("synthetic-amd-ras-uncorrectable"))
    ctx = CheckContext(host)  # one runner's context: its states
    host.clock = clock = FakeClock()
    xid.run(ctx, cfg)
    clock.advance(10_000)
    assert codes(xid.run(ctx, cfg)) == [("AMDGPU_FAULT", "CRITICAL", "RESET_GPU", amd_gpu(3))]


def kmsg_ring(kern_log: str) -> str:
    """A kern.log's kernel lines as /dev/kmsg gave them (Documentation/ABI/testing/dev-kmsg):
    priority 6, sequence, microseconds since the boot (/proc/stat's btime 08:00:00Z), the
    message."""
    boot = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)
    records = []
    for seq, line in enumerate(kern_log.splitlines()):
        stamp, _, message = line.partition(" gpu-node-17 kernel: ")
        usec = round((datetime.fromisoformat(stamp) - boot).total_seconds() * 1e6)
        records.append(f"6,{seq},{usec},-;{message}\n")
    return "".join(records)


def amd_node(tmp_path: Path, kern_log: bool, extra: str = "") -> Path:
    dest = tmp_path / "node"
    shutil.copytree(snapshot("synthetic-amd-ring-timeout-reset"), dest, symlinks=True)
    log = dest / "rootfs" / "var" / "log" / "kern.log"
    (dest / "rootfs" / "dev" / "kmsg").write_text(kmsg_ring(log.read_text() + extra))
    if not kern_log:
        log.unlink()
    return dest


def test_a_journald_only_amd_node_reads_amdgpus_faults_from_kmsg(tmp_path: Path) -> None:
    """issue 40 item 14: the kernel log only in /dev/kmsg; and beside kern.log, one fault
    held by both counts once."""
    for kern_log in (False, True):
        node = amd_node(tmp_path / str(kern_log), kern_log)
        result = run_checks(snapshot_host(str(node)), config(), ["xid"]).checks[0]
        assert codes(result) == [
            ("AMDGPU_FAULT", "WARNING", "RESTART_APP", amd_gpu(2)),
            ("AMDGPU_FAULT", "WARNING", "RESTART_APP", amd_gpu(2)),
        ]
        assert [(f["cause"], f["count"]) for f in result.data["amdgpu_faults"]] == [
            ("ring_timeout", 1),
            ("gpu_reset", 1),
        ]
        assert result.data["sources"]["kernel_logs"][0] == "/dev/kmsg"


def test_a_reset_that_began_and_never_ended_is_critical(tmp_path: Path) -> None:
    """A reset begins on GPU 5 and two minutes on the kernel reports a blocked task
    (NixOS/nixpkgs#176915's shape), with no outcome."""
    extra = (
        "2026-11-29T20:55:00.000000+00:00 gpu-node-17 kernel: amdgpu 0000:af:00.0: amdgpu: "
        "GPU reset begin!\n"
        "2026-11-29T20:57:03.000000+00:00 gpu-node-17 kernel: INFO: task python3:48400 "
        "blocked for more than 122 seconds.\n"
    )
    node = amd_node(tmp_path, kern_log=False, extra=extra)
    result = run_checks(snapshot_host(str(node)), config(), ["xid"]).checks[0]
    assert ("AMDGPU_FAULT", "CRITICAL", "REBOOT_NODE", amd_gpu(5)) in codes(result)
    (hung,) = [f for f in result.data["amdgpu_faults"] if f["cause"] == "gpu_reset_unfinished"]
    assert (hung["gpu"], hung["count"], hung["last_seen"]) == (5, 1, "2026-11-29T20:55:00Z")
