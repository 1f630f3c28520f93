"""Check `xid` beyond the plain XID: NVLink5 decode, XID-less faults, SXids, PCIe AER,
`xid.policy` overrides, faults that clear themselves; and IMEX in the `gpus` check.

Each case runs on a hand-made snapshot (tests/snapshots/synthetic-…, written by
tests/snapshots/synthesize.py) whose kernel-log lines and sysfs files take the real formats.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import SNAPSHOTS, gpuprobe
from gpuprobe.checks import xid
from gpuprobe.checks.context import CheckContext
from gpuprobe.checks.registry import sections
from gpuprobe.checks.xid.settings import XidPolicyRule
from gpuprobe.config import Config
from gpuprobe.errors import ConfigError
from gpuprobe.host import snapshot_host
from gpuprobe.report import Status
from helpers import FakeClock, codes, config, run_check, snapshot

UUID = "GPU-5f1c{0:04x}-8e2b-4c1d-9a7e-{0:012x}"
# 2026-11-29T21:00:00Z, the synthetic snapshots' capture time.
CAPTURED = 1795986000.0


def gpu(index: int) -> str:
    return f"gpu:{index}:{UUID.format(index)}"


def copy_snapshot(name: str, tmp_path: Path) -> Path:
    dest = tmp_path / name
    shutil.copytree(snapshot(name), dest, symlinks=True)
    return dest


def daemon_host(name: str | Path) -> tuple[object, FakeClock]:
    host = snapshot_host(snapshot(name) if isinstance(name, str) else name)
    host.clock = clock = FakeClock(wall=CAPTURED)
    return host, clock


# --- NVLink5 (Xids 144-150) ------------------------------------------------------------------


def test_nvlink5_lines_are_judged_by_their_unit_word_and_status() -> None:
    result = run_check("xid", "synthetic-b200-nvlink5-xids")
    assert codes(result) == [
        ("XID", "CRITICAL", "RESET_GPU", gpu(1)),
        ("XID", "CRITICAL", "RESET_GPU", gpu(6)),
        ("XID", "WARNING", "NONE", gpu(2)),
        ("XID", "WARNING", "NONE", gpu(4)),
    ]
    entries = {(x["gpu"], x["xid"]): x for x in result.data["xids"]}
    assert entries[(1, 149)]["nvlink5"] == {
        "unit": "NETIR_LINK_EVT",
        "fatal": True,
        "link": 1,
        "intr_info": "0x021425c6",
        "error_status": "0x00000000",
        "recovery": "RESET_GPU",
        "catalog_severity": "Link Fatal",
        "decoded_by": "decode table",
    }
    assert entries[(4, 145)]["nvlink5"]["decoded_by"] == "Fatal/Nonfatal word"
    # GPU 6 logged a Nonfatal SAW line, then a Fatal one: the Fatal one speaks for the XID.
    assert entries[(6, 144)]["count"] == 2
    assert entries[(6, 144)]["nvlink5"]["error_status"] == "0x00000002"
    (gpu6,) = [f for f in result.findings if f.resource == gpu(6)]
    assert "Xid 144, NVLink5 SAW error (SAW_MVB Fatal, link 0, error status 0x00000002" in (
        gpu6.message
    )


# --- faults logged without an XID number ------------------------------------------------------


def test_a_gpu_fallen_off_the_bus_without_an_xid_is_xid_79() -> None:
    result = run_check("xid", "synthetic-gpu-fallen-off-bus-no-xid")
    assert codes(result) == [("XID", "CRITICAL", "REBOOT_NODE", gpu(3))]
    (entry,) = result.data["xids"]
    assert (entry["xid"], entry["source"], entry["pci_bus_id"]) == (
        79,
        "kernel-log (no Xid number)",
        "0000:5d:00.0",
    )
    assert result.findings[0].message.startswith(
        "GPU 3 (0000:5d:00.0): Xid 79 (logged without an Xid number), GPU has fallen off the bus"
    )


def test_rm_init_adapter_failed_is_the_gpu_initialization_error() -> None:
    result = run_check("xid", "synthetic-rm-init-adapter-failed")
    assert codes(result) == [("XID", "CRITICAL", "RESET_GPU", gpu(5))]
    assert result.data["xids"][0]["message"] == "RmInitAdapter failed! (0x62:0x65:2522)"


# --- NVSwitch SXids ----------------------------------------------------------------------------


def test_sxids_name_their_switch_port_and_the_gpus_a_fatal_one_takes_down() -> None:
    result = run_check("xid", "synthetic-nvswitch-sxid")
    assert codes(result) == [
        ("SXID", "CRITICAL", "RESET_GPU", "nvswitch:0000:05:00.0"),
        ("SXID", "WARNING", "NONE", "nvswitch:0000:07:00.0"),
    ]
    fatal, nonfatal = result.data["sxids"]
    assert (fatal["sxid"], fatal["name"], fatal["catalog_class"], fatal["links"]) == (
        20034,
        "LTSSM Fault Up",
        "fatal",
        [30],
    )
    assert fatal["count"] == 1  # the Severity and Data detail lines are not errors
    assert fatal["gpus_affected"] == list(range(8))
    assert (nonfatal["sxid"], nonfatal["fatal"], nonfatal["gpus_affected"]) == (12028, False, [])
    message = result.findings[0].message
    assert message.startswith(
        "NVSwitch 0000:05:00.0 (nvidia-nvswitch0): SXid 20034, LTSSM Fault Up (fatal), Fatal on "
        "link 30, seen 1 time this boot, last at 2026-11-29T20:31:17Z"
    )
    assert "GPUs 0, 1, 2, 3, 4, 5, 6, 7 lose NVLink through it" in message


# --- PCIe AER ----------------------------------------------------------------------------------


def test_aer_counts_since_boot_on_gpus_switches_and_the_bridges_above() -> None:
    result = run_check("xid", "synthetic-pcie-aer")
    assert codes(result) == [
        ("PCIE_AER_FATAL", "CRITICAL", "HARDWARE_INSPECTION", "nvswitch:0000:06:00.0"),
        ("PCIE_AER_NONFATAL", "WARNING", "HARDWARE_INSPECTION", "pci:0000:38:02.0"),
    ]
    read = {d["address"]: d for d in result.data["pcie_aer"]}
    # GPU 2, its PCIe switch's two ports and its root port, nearest first; then NVSwitch 1.
    assert list(read) == ["0000:3a:00.0", "0000:38:02.0", "0000:37:00.0", "0000:36:02.0",
                          "0000:06:00.0"]  # fmt: skip
    assert read["0000:3a:00.0"]["resource"] == gpu(2)
    assert read["0000:3a:00.0"]["correctable"] == 15
    assert read["0000:3a:00.0"]["errors"] == {"correctable": {"BadTLP": 3, "RxErr": 12}}
    assert read["0000:36:02.0"]["root_port"] is True
    assert read["0000:38:02.0"]["below"] == "0000:3a:00.0"
    # One reading: no rate yet.
    assert read["0000:3a:00.0"]["correctable_per_hour"] is None


def test_correctable_errors_rising_between_two_rounds_mark_a_marginal_link(
    tmp_path: Path,
) -> None:
    root = copy_snapshot("synthetic-pcie-aer", tmp_path)
    host, clock = daemon_host(root)
    ctx = CheckContext(host)  # one runner's context: its states
    first = xid.run(ctx, Config())
    assert "PCIE_AER_CORRECTABLE" not in [f.code for f in first.findings]
    counters = root / "rootfs/sys/devices/pci0000:36/0000:36:02.0/0000:37:00.0/0000:38:02.0"
    path = counters / "0000:3a:00.0/aer_dev_correctable"
    path.write_text(
        path.read_text()
        .replace("RxErr 12", "RxErr 112")
        .replace("TOTAL_ERR_COR 15", "TOTAL_ERR_COR 115")
    )
    clock.advance(600)  # 100 more in 10 minutes: 600 an hour, above the default 60
    second = xid.run(ctx, Config())
    (marginal,) = [f for f in second.findings if f.code == "PCIE_AER_CORRECTABLE"]
    assert (marginal.severity.value, marginal.action.value, marginal.resource) == (
        "WARNING",
        "HARDWARE_INSPECTION",
        gpu(2),
    )
    assert marginal.message.startswith(
        "GPU 2 (0000:3a:00.0): correctable PCIe AER errors rise 600/h (above 60/h; 115 since boot"
    )
    # A slower rise stays under a higher configured rate.
    host, clock = daemon_host(copy_snapshot("synthetic-pcie-aer", tmp_path / "slow"))
    ctx = CheckContext(host)  # one runner's context: its states
    cfg = config(xid={"aer_correctable_per_hour": 1000})
    xid.run(ctx, cfg)
    clock.advance(600)
    assert "PCIE_AER_CORRECTABLE" not in [f.code for f in xid.run(ctx, cfg).findings]


# --- IMEX (the gpus check) ----------------------------------------------------------------------


def test_a_gb200_tray_without_its_imex_daemon_and_channel_is_not_ready() -> None:
    result = run_check("gpus", "synthetic-gb200-imex-missing")
    assert ("IMEX_NOT_READY", "WARNING", "FIX_CONFIG", "node") in codes(result)
    (finding,) = [f for f in result.findings if f.code == "IMEX_NOT_READY"]
    assert finding.message.startswith(
        "GPUs 0, 1, 2, 3 are in multi-node NVLink domain 7c3a915e-2d40-4b18-9f06-33a152c87e14 "
        "(clique 32766) but no nvidia-imex daemon runs; no IMEX channel device under "
        "/dev/nvidia-caps-imex-channels"
    )


def test_a_gb200_tray_with_its_imex_daemon_is_ready() -> None:
    result = run_check("gpus", "synthetic-gb200-imex-running")
    assert "IMEX_NOT_READY" not in [f.code for f in result.findings]
    assert result.data["imex"]["daemon_pids"] == [3301]
    assert result.data["imex"]["channels"] == ["/dev/nvidia-caps-imex-channels/channel0"]
    assert len(result.data["imex"]["nodes"]) == 18


def test_a_single_node_nvlink_system_never_sees_imex() -> None:
    # An HGX H100 behind its own NVSwitches: fabric registered, no cluster, no IMEX daemon.
    result = run_check("gpus", "synthetic-h100-8gpu-healthy")
    assert "IMEX_NOT_READY" not in [f.code for f in result.findings]
    assert "imex" not in result.data


# --- xid.policy ---------------------------------------------------------------------------------


def test_a_policy_override_changes_severity_and_action() -> None:
    cfg = config(xid={"policy": [{"xid": 13, "severity": "CRITICAL", "action": "RESET_GPU"}]})
    result = run_check("xid", "synthetic-xid-app", cfg)
    assert ("XID", "CRITICAL", "RESET_GPU", gpu(0)) in codes(result)
    entry = {(x["gpu"], x["xid"]): x for x in result.data["xids"]}[(0, 13)]
    assert (entry["severity"], entry["policy"]) == ("CRITICAL", "xid.policy[0]")
    assert result.data["policy"]["overrides"][0]["xid"] == 13


def test_an_ignored_range_is_kept_in_data_and_raises_nothing() -> None:
    cfg = config(xid={"policy": [{"xid": "144-150", "ignore": True}]})
    result = run_check("xid", "synthetic-b200-nvlink5-xids", cfg)
    assert result.findings == []
    assert result.status is Status.OK
    assert all(x["ignored"] and not x["active"] for x in result.data["xids"])


def test_a_count_threshold_holds_a_finding_back_until_reached_within_its_window() -> None:
    # Two Xid 13 lines on GPU 0 (10:01:07): below a count of 3, reached with a count of 2,
    # and out of a 60 s window at 21:00.
    def xid13(rule: dict[str, object]) -> list[str]:
        result = run_check("xid", "synthetic-xid-app", config(xid={"policy": [rule]}))
        return [f.resource for f in result.findings if "Xid 13," in f.message]

    assert xid13({"xid": 13, "count": 3}) == []
    assert xid13({"xid": 13, "count": 2}) == [gpu(0)]
    host, _ = daemon_host("synthetic-xid-app")
    ctx = CheckContext(host)  # one runner's context: its states
    cfg = config(xid={"policy": [{"xid": 13, "count": 2, "window_seconds": 60}]})
    result = xid.run(ctx, cfg)
    entry = {(x["gpu"], x["xid"]): x for x in result.data["xids"]}[(0, 13)]
    assert (entry["below_threshold"], entry["active"]) == (True, False)
    host, clock = daemon_host("synthetic-xid-app")
    ctx = CheckContext(host)  # one runner's context: its states
    clock.now = 1795946467.0 + 30  # 30 s after the lines (2026-11-29T10:01:07Z)
    assert [f for f in xid.run(ctx, cfg).findings if "Xid 13," in f.message]


def test_a_driver_range_decides_whether_a_rule_holds() -> None:
    # The snapshot's driver is 550.54.15.
    for driver, held in ((">=550,<560", True), (">=570", False)):
        cfg = config(xid={"policy": [{"xid": 48, "ignore": True, "driver": driver}]})
        result = run_check("xid", "synthetic-xid-critical", cfg)
        entry = {(x["gpu"], x["xid"]): x for x in result.data["xids"]}[(2, 48)]
        assert entry.get("ignored", False) is held
        key = "overrides" if held else "overrides_not_for_this_driver"
        assert result.data["policy"][key][0]["driver"] == driver


def test_an_sxid_rule_applies_to_switches() -> None:
    cfg = config(xid={"policy": [{"sxid": 12028, "severity": "CRITICAL", "action": "REBOOT_NODE"}]})
    result = run_check("xid", "synthetic-nvswitch-sxid", cfg)
    assert ("SXID", "CRITICAL", "REBOOT_NODE", "nvswitch:0000:07:00.0") in codes(result)


@pytest.mark.parametrize(
    ("rule", "error"),
    [
        ("    - xid: 13\n      sevrity: CRITICAL\n",
         "line 3: xid: policy[0]: unknown key 'sevrity'"),
        ("    - xid: 13\n      severity: FATAL\n", "line 3: xid: policy[0]: severity: 'FATAL' is "
                                                    "not one of WARNING, CRITICAL"),
        ("    - xid: 13-\n      ignore: true\n", "line 3: xid: policy[0]: xid: '13-' is not a "
                                                 "number or a range like 144-150"),
        ("    - xid: 13\n      action: REBOOT\n", "line 3: xid: policy[0]: action: 'REBOOT' is "
                                                  "not one of"),
        ("    - xid: 13\n      driver: 550\n", "line 3: xid: policy[0]: driver: expected a string"),
        ("    - xid: 13\n", "line 3: xid: policy[0]: says nothing"),
        ("    - xid: true\n      ignore: true\n", "line 3: xid: policy[0]: xid: expected a "
                                                  "number or a string, got a boolean"),
        ("    - xid: 13\n      driver: \"==550\"\n      ignore: true\n",
         "line 3: xid: policy[0]: driver: '==550': == is not supported (550 would never equal "
         "550.54.15); give a range such as >=550,<551"),
    ],
)  # fmt: skip
def test_a_typo_in_a_rule_is_a_usage_error_naming_its_line(
    tmp_path: Path, rule: str, error: str
) -> None:
    path = tmp_path / "gpuprobe.yaml"
    path.write_text("xid:\n  policy:\n" + rule)
    from gpuprobe.config import load_config

    with pytest.raises(ConfigError) as raised:
        load_config(str(path), sections())
    assert str(raised.value).startswith(f"config {path}: {error}")
    done = gpuprobe("check", "--config", str(path), "--explain-policy")
    assert done.returncode == 64
    assert done.stderr.strip().startswith(f"gpuprobe: config {path}: {error}")


@pytest.mark.parametrize("field", ["xid", "sxid"])
def test_a_boolean_is_no_xid_or_sxid_number(field: str) -> None:
    # bool is an int in Python: True was read as XID 1 by a rule built from parsed data.
    with pytest.raises(ConfigError) as raised:
        XidPolicyRule(**{field: True}, ignore=True)
    assert str(raised.value) == f"{field}: True is not a number or a range like 144-150"


def test_explain_policy_prints_the_effective_table(tmp_path: Path) -> None:
    path = tmp_path / "gpuprobe.yaml"
    path.write_text(
        "xid:\n  policy:\n    - xid: 13\n      severity: CRITICAL\n      count: 10\n"
        "      window_seconds: 3600\n    - xid: 144-150\n      ignore: true\n"
        '      driver: ">=570"\n'
    )
    done = gpuprobe(
        "check", "--snapshot", str(snapshot("synthetic-h100-8gpu-healthy")), "--config",
        str(path), "--explain-policy",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith("driver 550.54.15")
    assert "  xid.policy[0]: xid 13 → CRITICAL, only after 10 sightings within 3600 s" in lines
    assert "  xid.policy[1]: xid 144-150 → ignore, driver >=570" in lines
    (row,) = [line for line in lines if line.startswith(" 13  ")]
    assert row.split()[-3:] == ["CRITICAL", "RESTART_APP", "(xid.policy[0])"]


# --- faults that clear themselves ----------------------------------------------------------------


def test_a_reset_the_driver_logged_clears_the_gpus_sticky_fault() -> None:
    result = run_check("xid", "synthetic-xid-reset-logged")
    entries = {(x["gpu"], x["xid"]): x for x in result.data["xids"]}
    assert (entries[(2, 48)]["active"], entries[(2, 48)]["cleared"]) == (False, True)
    assert entries[(2, 48)]["recovered"] == (
        "the driver logged the GPU's recovery action back to None at 2026-11-29T15:10:07Z (Xid 154)"
    )
    # Not observed: without the Xid 154 back to None, the double-bit error stays.
    stuck = run_check("xid", "synthetic-xid-critical")
    assert ("XID", "CRITICAL", "RESET_GPU", gpu(2)) in codes(stuck)


def test_the_recovery_field_reading_none_after_a_reset_clears_the_fault(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host, clock = daemon_host("synthetic-recovery-field-reset")
    ctx = CheckContext(host)  # one runner's context: its states
    assert ("XID", "CRITICAL", "RESET_GPU", gpu(7)) in codes(xid.run(ctx, Config()))
    clock.advance(60)
    with caplog.at_level("INFO", logger="gpuprobe.xid"):
        second = xid.run(ctx, Config())
    assert [f for f in second.findings if f.resource == gpu(7)] == []
    entry = {(x["gpu"], x["xid"]): x for x in second.data["xids"]}[(7, 95)]
    assert (
        entry["recovered"] == "GPU 7's recovery action field reads NONE after asking for GPU_RESET"
    )
    assert "xid: Xid 95 on GPU 7 cleared itself" in caplog.text
    # Not observed: the field keeps asking, the fault stays.
    host, clock = daemon_host("synthetic-recovery-field-stuck")
    ctx = CheckContext(host)  # one runner's context: its states
    xid.run(ctx, Config())
    clock.advance(60)
    assert ("XID", "CRITICAL", "RESET_GPU", gpu(7)) in codes(xid.run(ctx, Config()))


def test_a_lost_gpu_answering_again_with_its_uuid_clears_its_fault() -> None:
    host, clock = daemon_host("synthetic-gpu-lost-and-back")
    ctx = CheckContext(host)  # one runner's context: its states
    assert ("XID", "CRITICAL", "REBOOT_NODE", gpu(3)) in codes(xid.run(ctx, Config()))
    clock.advance(60)
    second = xid.run(ctx, Config())
    assert [f for f in second.findings if f.resource == gpu(3)] == []
    entry = {(x["gpu"], x["xid"]): x for x in second.data["xids"]}[(3, 79)]
    assert entry["recovered"] == f"GPU 3 answers again with the same UUID {UUID.format(3)}"
    # Not observed: still lost, the fault stays.
    host, clock = daemon_host("synthetic-gpu-lost-and-gone")
    ctx = CheckContext(host)  # one runner's context: its states
    xid.run(ctx, Config())
    clock.advance(60)
    assert ("XID", "CRITICAL", "REBOOT_NODE", gpu(3)) in codes(xid.run(ctx, Config()))


def test_a_recovered_fault_that_grows_again_is_active_again(tmp_path: Path) -> None:
    root = copy_snapshot("synthetic-gpu-lost-and-back", tmp_path)
    host, clock = daemon_host(root)
    ctx = CheckContext(host)  # one runner's context: its states
    xid.run(ctx, Config())
    clock.advance(60)
    assert [f for f in xid.run(ctx, Config()).findings if f.resource == gpu(3)] == []
    log = root / "rootfs/var/log/kern.log"
    log.write_text(
        log.read_text()
        + "2026-11-29T21:05:00.000000+00:00 gpu-node-17 kernel: NVRM: Xid (PCI:0000:5d:00): 79, "
        "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    )
    clock.advance(60)
    assert ("XID", "CRITICAL", "REBOOT_NODE", gpu(3)) in codes(xid.run(ctx, Config()))


def test_clear_xid_clears_a_fatal_sxid_until_it_grows_again() -> None:
    host, _ = daemon_host("synthetic-nvswitch-sxid")
    ctx = CheckContext(host)  # one runner's context: its states
    assert xid.clear(ctx, Config()) == 1
    result = xid.run(ctx, Config())
    assert [f.code for f in result.findings] == ["SXID"]  # the non-fatal one stays a warning
    fatal = result.data["sxids"][0]
    assert (fatal["sxid"], fatal["active"], fatal["cleared"]) == (20034, False, True)


def test_xids_seen_only_as_nvml_events_are_not_critical_on_their_number_alone() -> None:
    result = run_check("xid", "synthetic-xid-events-only")
    # The Nonfatal 149 cannot be decoded without its kernel-log line, GPU 2's 154 field reads
    # NONE: warnings; GPU 4's field asks for a node reboot.
    assert codes(result) == [
        ("XID", "CRITICAL", "REBOOT_NODE", gpu(4)),
        ("XID", "WARNING", "NONE", gpu(1)),
        ("XID", "WARNING", "NONE", gpu(2)),
    ]
    entries = {(x["gpu"], x["xid"]): x for x in result.data["xids"]}
    assert entries[(1, 149)]["description"].endswith(
        "(seen only as an NVML event: without its kernel-log line its unit and Fatal/Nonfatal "
        "word cannot be decoded; read the kernel log)"
    )
    assert entries[(2, 154)]["description"].endswith(
        "(the recovery action field asks for no recovery)"
    )
    assert entries[(4, 154)]["description"].endswith(
        "(the recovery action field asks for a node reboot)"
    )


def test_the_recovery_field_clears_only_faults_seen_before_the_reset_was_asked(
    tmp_path: Path,
) -> None:
    root = copy_snapshot("synthetic-recovery-field-reset", tmp_path)
    host, clock = daemon_host(root)
    ctx = CheckContext(host)  # one runner's context: its states
    xid.run(ctx, Config())  # the field asks for GPU_RESET (21:00:00)
    # A new double-bit error after the reset was asked: the reset asked for does not answer it.
    log = root / "rootfs/var/log/kern.log"
    log.write_text(
        log.read_text()
        + "2026-11-29T21:00:30.104217+00:00 gpu-node-17 kernel: NVRM: Xid (PCI:0000:db:00): 48, "
        "pid=41007, name=python3, An uncorrectable double bit error (DBE) has been detected on "
        "GPU in the framebuffer at partition 6, subpartition 0.\n"
    )
    clock.advance(60)
    second = xid.run(ctx, Config())  # the field reads NONE
    entries = {(x["gpu"], x["xid"]): x for x in second.data["xids"]}
    assert (entries[(7, 95)]["active"], entries[(7, 95)]["cleared"]) == (False, True)
    assert (entries[(7, 48)]["active"], entries[(7, 48)]["cleared"]) == (True, False)
    assert codes(second) == [("XID", "CRITICAL", "RESET_GPU", gpu(7))]


def test_a_drain_p2p_request_ending_is_no_reset() -> None:
    host, clock = daemon_host("synthetic-recovery-field-drain-p2p")
    ctx = CheckContext(host)  # one runner's context: its states
    xid.run(ctx, Config())
    clock.advance(60)
    second = xid.run(ctx, Config())
    assert ("XID", "CRITICAL", "RESET_GPU", gpu(7)) in codes(second)
    entry = {(x["gpu"], x["xid"]): x for x in second.data["xids"]}[(7, 95)]
    assert "recovered" not in entry


def test_a_new_fatal_sxid_after_rotation_lowered_the_count_is_active_again(
    tmp_path: Path,
) -> None:
    root = copy_snapshot("synthetic-nvswitch-sxid", tmp_path)
    host, clock = daemon_host(root)
    ctx = CheckContext(host)  # one runner's context: its states
    assert xid.clear(ctx, Config()) == 1
    # The log rotated away the cleared lines; the switch logs one new fatal SXid later: its
    # count is below the cleared one, its time is after it.
    log = root / "rootfs/var/log/kern.log"
    kept = [line for line in log.read_text().splitlines(keepends=True) if "): 20034," not in line]
    log.write_text(
        "".join(kept)
        + "2026-11-29T20:55:00.104217+00:00 gpu-node-17 kernel: nvidia-nvswitch0: SXid "
        "(PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up\n"
    )
    clock.advance(60)
    result = xid.run(ctx, Config())
    fatal = next(e for e in result.data["sxids"] if e["sxid"] == 20034)
    assert (fatal["count"], fatal["active"], fatal["cleared"]) == (1, True, False)


def test_an_xid_154_back_to_none_says_what_it_is_not_informational() -> None:
    """Xid 154 with no recovery is a WARNING: its words said "informational: nothing to do
    unless it repeats" (issue 40 item 16). Logged and seen only as an NVML event alike."""
    said = (
        ": the driver now asks for no recovery on this GPU (one it asked for before is done or "
        "withdrawn): nothing to do unless another Xid 154 asks for a reset or a reboot"
    )
    logged = run_check("xid", "synthetic-xid-reset-logged")
    (back,) = [f for f in logged.findings if ": Xid 154, " in f.message]
    assert (back.severity.value, back.action.value) == ("WARNING", "NONE")
    assert back.message.endswith('to 0x0 (None)")' + said)
    events = run_check("xid", "synthetic-xid-events-only")
    (field,) = [f for f in events.findings if f.resource == gpu(2)]
    assert field.message.endswith("last at 2026-11-29T20:41:00Z" + said)


def test_no_warning_calls_itself_informational() -> None:
    """The class: a WARNING with no repair says why there is none (NVIDIA's catalog asks for
    none, or none is due yet), never "informational", on every shipped snapshot."""
    names = sorted(p.name for p in SNAPSHOTS.iterdir() if p.is_dir())
    said = [
        (name, f.message)
        for name in names
        for f in run_check("xid", name).findings
        if f.severity.value == "WARNING" and "informational" in f.message
    ]
    assert said == []
    assert len(names) > 100
    unlogged = run_check("xid", "synthetic-xid-events-only")
    (nvlink,) = [f for f in unlogged.findings if f.resource == gpu(1)]
    assert nvlink.message.endswith(": no repair is due now: watch whether it repeats")
