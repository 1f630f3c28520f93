"""amdgpu's faults in the kernel log, in the shapes public bug reports show them."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuprobe.gpu.amd import faults
from gpuprobe.gpu.amd.faults import AmdgpuFault, parse_fault, read_faults

NOW = datetime(2026, 11, 29, 21, 0, tzinfo=UTC)
BOOT = datetime(2026, 11, 29, 8, 0, tzinfo=UTC)


def causes(text: str) -> list[tuple[str | None, str, str, str | None]]:
    return [(f.pci, f.cause, f.detail, f.process) for f in read_faults([text], boot=BOOT, now=NOW)]


def test_a_ring_timeout_names_the_ring_and_the_process_of_the_next_line() -> None:
    # Newer kernels prefix the device (a ROCm issue on gfx11, dmesg -T stripped of time).
    log = (
        "[127033.279661] amdgpu 0000:c5:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled "
        "seq=2662395, emitted seq=2662397\n"
        "[127033.279667] amdgpu 0000:c5:00.0: amdgpu:  Process code pid 1048641 thread "
        "code:cs0 pid 1048662\n"
        "[127033.279672] amdgpu 0000:c5:00.0: amdgpu: Starting gfx_0.0.0 ring reset\n"
        "[127035.492298] amdgpu 0000:c5:00.0: amdgpu: Ring gfx_0.0.0 reset failed\n"
        "[127035.492304] amdgpu 0000:c5:00.0: amdgpu: GPU reset begin!\n"
        "[127037.776773] amdgpu 0000:c5:00.0: amdgpu: MODE2 reset\n"
        "[127037.807536] amdgpu 0000:c5:00.0: amdgpu: GPU reset succeeded, trying to resume\n"
    )
    assert causes(log) == [
        ("0000:c5:00.0", faults.RING_TIMEOUT, "gfx_0.0.0", "code (pid 1048641)"),
    ]  # "GPU reset succeeded, trying to resume" is on the way, not the outcome


def test_older_drm_lines_without_a_device_take_the_next_lines_device() -> None:
    # A ROCm 5.7 report on an RX 7900 XT (syslog stamps).
    log = (
        "Oct  7 12:58:23 Ubuntu-Desktop kernel: [ 2237.944235] [drm:amdgpu_job_timedout "
        "[amdgpu]] *ERROR* ring sdma0 timeout, signaled seq=16060, emitted seq=16062\n"
        "Oct  7 12:58:23 Ubuntu-Desktop kernel: [ 2237.944505] [drm:amdgpu_job_timedout "
        "[amdgpu]] *ERROR* Process information: process  pid 0 thread  pid 0\n"
        "Oct  7 12:58:23 Ubuntu-Desktop kernel: [ 2237.944732] amdgpu 0000:0a:00.0: amdgpu: GPU "
        "reset begin!\n"
    )
    assert causes(log) == [("0000:0a:00.0", faults.RING_TIMEOUT, "sdma0", None)]


def test_the_reset_outcome_is_its_own_fault() -> None:
    # cosmic-comp's report: the counted outcome line after the resume.
    done = "Jul 24 12:26:20 macross kernel: amdgpu 0000:08:00.0: amdgpu: GPU reset(2) succeeded!\n"
    failed = "Jul 24 12:26:20 macross kernel: amdgpu 0000:08:00.0: amdgpu: GPU reset(3) failed\n"
    # A gfx9 report on the amd-gfx list: the end line, then DRM's without the device.
    ended = (
        "[  114.000006] amdgpu 0000:08:00.0: amdgpu: GPU reset end with ret = -110\n"
        "[  114.000010] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* GPU Recovery Failed: -110\n"
    )
    assert causes(done) == [("0000:08:00.0", faults.GPU_RESET, "", None)]
    assert causes(failed + ended) == [("0000:08:00.0", faults.GPU_RESET_FAILED, "", None)] * 3


def test_uncorrectable_ras_errors_name_the_block() -> None:
    # amdgpu_ras_query_error_status's lines, with and without the socket and die.
    log = (
        "amdgpu 0000:05:00.0: amdgpu: socket: 0, die: 0 2 uncorrectable hardware errors "
        "detected in umc block\n"
        "amdgpu 0000:05:00.0: amdgpu: 1 uncorrectable hardware errors detected in gfx block\n"
        "amdgpu 0000:05:00.0: amdgpu: socket: 0, die: 0 17 correctable hardware errors detected "
        "in umc block, no user action is needed.\n"
        # An MI300X report (ROCm issue 4021): the fatal interrupt.
        "[13850.912648] amdgpu 0000:1c:00.0: {1}uncorrectable hardware "
        "error(ERREVENT_ATHUB_INTERRUPT) detected!\n"
    )
    assert causes(log) == [
        ("0000:05:00.0", faults.RAS_UNCORRECTABLE, "2 in umc", None),
        ("0000:05:00.0", faults.RAS_UNCORRECTABLE, "1 in gfx", None),
        ("0000:1c:00.0", faults.RAS_FATAL, "ERREVENT_ATHUB_INTERRUPT", None),
    ]


def test_vm_faults_name_the_hub_and_the_process_in_either_shape() -> None:
    log = (
        # One line with the process (ROCm issue 2804).
        "[  629.844077] amdgpu 0000:0b:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:24 "
        "vmid:8 pasid:32770, for process python pid 1796 thread python pid 1796)\n"
        "[  629.844087] amdgpu 0000:0b:00.0: amdgpu:   in page starting at address "
        "0x00007f5279bab000 from client 0x1b (UTCL2)\n"
        # The process on the next line (a 2025 kernel).
        "amdgpu 0000:0d:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:3 "
        "pasid:32770)\n"
        "amdgpu 0000:0d:00.0: amdgpu:  in process cosmic-comp pid 4732 thread cosmic-com:cs0 "
        "pid 4753)\n"
        # A no-retry fault on an MI200-era mmhub.
        "[282248.294764] amdgpu 0000:88:00.0: amdgpu: [mmhub0] no-retry page fault (src_id:0 "
        "ring:24 vmid:8 pasid:32768, for process ipython3 pid 846049 thread ipython3 pid "
        "846049)\n"
    )
    assert causes(log) == [
        ("0000:0b:00.0", faults.VM_FAULT, "gfxhub", "python (pid 1796)"),
        ("0000:0d:00.0", faults.VM_FAULT, "gfxhub", "cosmic-comp (pid 4732)"),
        ("0000:88:00.0", faults.VM_FAULT, "mmhub0", "ipython3 (pid 846049)"),
    ]


def test_only_this_boot_counts() -> None:
    log = (
        "amdgpu 0000:05:00.0: amdgpu: 1 uncorrectable hardware errors detected in umc block\n"
        "[    0.000000] Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103) #49-Ubuntu\n"
        "amdgpu 0000:05:00.0: amdgpu: GPU reset(1) succeeded!\n"
    )
    assert causes(log) == [("0000:05:00.0", faults.GPU_RESET, "", None)]


def test_lines_of_other_drivers_are_no_fault() -> None:
    line = "nouveau 0000:01:00.0: fifo: SCHED_ERROR 0a [CTXSW_TIMEOUT]"
    assert parse_fault(line, boot=BOOT, now=NOW) is None
    assert parse_fault("amdgpu 0000:05:00.0: amdgpu: MODE1 reset", boot=BOOT, now=NOW) is None


def test_a_fault_keeps_its_time_and_line() -> None:
    line = (
        "2026-11-29T20:52:31.104217+00:00 gpu-node-17 kernel: amdgpu 0000:38:00.0: amdgpu: "
        "ring comp_1.0.0 timeout, signaled seq=1894471, emitted seq=1894473"
    )
    assert parse_fault(line, boot=BOOT, now=NOW) == AmdgpuFault(
        pci="0000:38:00.0",
        cause=faults.RING_TIMEOUT,
        detail="comp_1.0.0",
        process=None,
        time=datetime(2026, 11, 29, 20, 52, 31, 104217, tzinfo=UTC),
        line=line,
    )


def test_every_cause_has_a_severity_and_an_action() -> None:
    assert set(faults.CAUSES) == {
        faults.RING_TIMEOUT, faults.GPU_RESET, faults.GPU_RESET_FAILED,
        faults.GPU_RESET_UNFINISHED, faults.RAS_UNCORRECTABLE, faults.RAS_FATAL, faults.VM_FAULT,
    }  # fmt: skip
    assert {c.severity for c in faults.CAUSES.values()} == {"WARNING", "CRITICAL"}


def test_a_reset_that_never_ends_before_the_log_moves_on_is_a_fault() -> None:
    """NixOS/nixpkgs#176915 (dmesg -T): a ring timeout, the reset begins, and three minutes
    later the kernel reports blocked tasks; no outcome was ever logged."""
    log = (
        "[Wed Jun  8 16:35:32 2022] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 "
        "timeout, signaled seq=22025769, emitted seq=22025769\n"
        "[Wed Jun  8 16:35:32 2022] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* Process "
        "information: process chrome pid 2379 thread chrome:cs0 pid 2391\n"
        "[Wed Jun  8 16:35:32 2022] amdgpu 0000:03:00.0: amdgpu: GPU reset begin!\n"
        "[Wed Jun  8 16:38:26 2022] INFO: task InputThread:1375 blocked for more than 122 "
        "seconds.\n"
    )
    now = datetime(2022, 6, 8, 17, 0, tzinfo=UTC)
    found = read_faults([log], boot=None, now=now)
    assert [(f.pci, f.cause, f.process) for f in found] == [
        ("0000:03:00.0", faults.RING_TIMEOUT, "chrome (pid 2379)"),
        ("0000:03:00.0", faults.GPU_RESET_UNFINISHED, None),
    ]
    assert found[1].time == datetime(2022, 6, 8, 16, 35, 32, tzinfo=UTC)
    assert found[1].line.endswith("GPU reset begin!")
    # Seconds later, in its own lines, the reset is on its way: no fault yet.
    assert causes(log.rsplit("\n", 2)[0] + "\n") == [
        ("0000:03:00.0", faults.RING_TIMEOUT, "gfx_0.0.0", "chrome (pid 2379)")
    ]


def test_a_reset_that_ends_or_begins_again_is_judged_by_its_end() -> None:
    # dmesg's monotonic stamps (the gfx11 report above): the outcome 2 s after the beginning.
    begin = "[127035.492304] amdgpu 0000:c5:00.0: amdgpu: GPU reset begin!\n"
    later = (
        "[127135.000000] amdgpu 0000:c5:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=1, "
        "emitted seq=3\n"
    )
    done = "[127037.807540] amdgpu 0000:c5:00.0: amdgpu: GPU reset(2) succeeded!\n"
    assert [c[1] for c in causes(begin + done + later)] == [faults.GPU_RESET, faults.RING_TIMEOUT]
    assert [c[1] for c in causes(begin + later)] == [
        faults.GPU_RESET_UNFINISHED,
        faults.RING_TIMEOUT,
    ]
    # The same GPU's next reset begins while the first said nothing: the first hung.
    assert [c[1] for c in causes(begin + begin + done)] == [
        faults.GPU_RESET_UNFINISHED,
        faults.GPU_RESET,
    ]
