"""`gpuprobe capture`: what it writes, and that replaying it gives the live findings."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import jsonschema
import pytest

from conftest import ROOT, gpuprobe, schema, snapshot
from gpuprobe.capture import copy_tree
from gpuprobe.gpu import aer
from gpuprobe.gpu.pci import nvidia_devices
from gpuprobe.host.fs import HostFS


def checks_of(report: dict) -> str:  # type: ignore[type-arg]
    """The checks a report holds (capture leaves the active ones out), for `--only`."""
    return ",".join(c["name"] for c in report["checks"])


def findings_of(report: dict) -> dict[str, tuple[str, list[tuple[str, str, str, str]]]]:
    return {
        c["name"]: (
            c["status"],
            sorted((f["code"], f["severity"], f["action"], f["resource"]) for f in c["findings"]),
        )
        for c in report["checks"]
    }


def test_capture_then_replay_on_this_machine_gives_the_same_findings(tmp_path: Path) -> None:
    target = tmp_path / "snap"
    out = gpuprobe("capture", str(target), "--node-name", "here")
    assert out.returncode == 0, out.stderr
    meta = json.loads((target / "snapshot.json").read_text())
    assert meta["format"] == 1 and meta["node"] == "here"
    assert set(meta) == {"format", "node", "captured_at", "gpuprobe_version"}
    jsonschema.validate(json.loads((target / "nvml.json").read_text()), schema("nvml.schema.json"))
    live = json.loads((target / "report.json").read_text())
    replay = gpuprobe("check", "--json", "--only", checks_of(live), "--snapshot", str(target))
    assert findings_of(replay.json()) == findings_of(live)
    assert replay.json()["node"] == "here"


def test_capture_of_a_host_tree_under_root_keeps_what_the_checks_read(tmp_path: Path) -> None:
    root = tmp_path / "host"
    shutil.copytree(Path(snapshot("synthetic-h100-8gpu-healthy")) / "rootfs", root)
    target = tmp_path / "snap"
    assert gpuprobe("capture", str(target), "--root", str(root)).returncode == 0
    rootfs = target / "rootfs"
    vendor = rootfs / "sys/bus/pci/devices/0000:18:00.0/vendor"
    assert vendor.read_text() == "0x10de\n"
    assert (rootfs / "proc/driver/nvidia/version").read_text().startswith("NVRM version:")
    library = rootfs / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15"
    assert library.is_file() and library.stat().st_size == 0
    live = json.loads((target / "report.json").read_text())
    replay = gpuprobe("check", "--json", "--only", checks_of(live), "--snapshot", str(target))
    assert findings_of(replay.json()) == findings_of(live)
    driver = findings_of(live)["driver"]
    assert driver == ("CRITICAL", [("DRIVER_NOT_FOUND", "CRITICAL", "FIX_CONFIG", "node")])


def test_capture_refuses_a_directory_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    out = gpuprobe("capture", str(tmp_path))
    assert out.returncode == 64
    assert "exists and is not an empty directory" in out.stderr
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_capture_into_a_path_under_a_file_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "hostname").write_text("node\n")
    out = gpuprobe("capture", str(tmp_path / "hostname" / "snap"))
    assert out.returncode == 64
    lines = out.stderr.splitlines()
    assert lines == [
        f"gpuprobe: capture: cannot write to {tmp_path}/hostname/snap: Not a directory "
        "(see gpuprobe capture --help)"
    ]
    assert out.stdout == ""


def test_capture_into_proc_is_a_usage_error_before_any_check_runs() -> None:
    out = gpuprobe("capture", "/proc/gpuprobe-no-such/snap")
    assert out.returncode == 64
    assert out.stderr.splitlines() == [
        "gpuprobe: capture: cannot write to /proc/gpuprobe-no-such/snap: No such file or "
        "directory (see gpuprobe capture --help)"
    ]


def test_capture_creates_a_missing_directory_and_leaves_no_probe_behind(tmp_path: Path) -> None:
    (tmp_path / "host").mkdir()
    target = tmp_path / "a" / "b"
    out = gpuprobe("capture", str(target), "--only", "driver", "--root", str(tmp_path / "host"))
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in target.iterdir()) == [
        "nvml.json",
        "processes.json",
        "report.json",
        "rootfs",
        "snapshot.json",
    ]


def test_copy_tree_reads_placeholders_listings_and_sockets(short_tmp: Path) -> None:
    tmp_path = short_tmp
    host = tmp_path / "host"
    (host / "etc").mkdir(parents=True)
    (host / "etc/config.toml").write_text("version = 2\n")
    (host / "etc/unread.toml").write_text("secret = 1\n")
    plugins = host / "var/lib/kubelet/device-plugins"
    plugins.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(plugins / "nvidia-gpu.sock"))
        fs = HostFS(host)
        fs.record()
        fs.read_text("/etc/config.toml")
        fs.exists("/etc/absent")
        fs.listdir("/var/lib/kubelet/device-plugins")
        fs.listdir("/etc")
        rootfs = tmp_path / "rootfs"
        copy_tree(fs, rootfs)
    assert (rootfs / "etc/config.toml").read_text() == "version = 2\n"
    assert (rootfs / "etc/unread.toml").read_text() == ""
    assert not (rootfs / "etc/absent").exists()
    sock_copy = rootfs / "var/lib/kubelet/device-plugins/nvidia-gpu.sock"
    assert sock_copy.is_file() and sock_copy.stat().st_size == 0
    assert HostFS(rootfs, snapshot=True).is_socket(
        "/var/lib/kubelet/device-plugins/nvidia-gpu.sock"
    )


def test_copy_tree_keeps_a_listed_directorys_links_that_were_read_as_links(
    short_tmp: Path,
) -> None:
    """/sys/bus/pci/devices is listed (the GPUs on the bus) and each entry is a link into the
    device tree, which the AER reader follows up to the root port: the copy keeps the links,
    so replay walks the same bridges, where directory placeholders for the listing's entries
    would hide them (and the AER files the reader looks for below them)."""
    host = short_tmp / "host"
    gpu = "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0"
    (host / gpu).mkdir(parents=True)
    (host / gpu / "vendor").write_text("0x10de\n")
    (host / gpu / "aer_dev_correctable").write_text("RxErr 3\nTOTAL_ERR_COR 3\n")
    (host / "sys/devices/pci0000:15/0000:15:01.0/aer_dev_correctable").write_text(
        "BadTLP 1\nTOTAL_ERR_COR 1\n"
    )
    (host / "sys/bus/pci/devices").mkdir(parents=True)
    link = "../../../devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0"
    (host / "sys/bus/pci/devices/0000:17:00.0").symlink_to(link)
    fs = HostFS(host)
    fs.record()
    found = nvidia_devices(fs)
    read = aer.read(fs, [d.address for d in found])
    copy_tree(fs, short_tmp / "rootfs")
    replayed = HostFS(short_tmp / "rootfs", snapshot=True)
    assert (short_tmp / "rootfs/sys/bus/pci/devices/0000:17:00.0").readlink() == Path(link)
    assert nvidia_devices(replayed) == found
    assert aer.read(replayed, [d.address for d in found]) == read
    assert [(d.address, d.below, d.root_port) for d in read] == [
        ("0000:17:00.0", None, False),
        ("0000:15:01.0", "0000:16:00.0", True),
    ]


def test_capture_keeps_the_device_plugin_configuration_and_replay_reads_it(
    tmp_path: Path,
) -> None:
    plugin = ROOT / "tests/fixtures/device_plugin/mps.yaml"
    config = tmp_path / "gpuprobe.yaml"
    config.write_text(f"device_plugin:\n  config_file: {plugin}\n")
    root = tmp_path / "host"
    shutil.copytree(Path(snapshot("synthetic-mps-daemon-missing")) / "rootfs", root)
    target = tmp_path / "snap"
    out = gpuprobe("capture", str(target), "--root", str(root), "--config", str(config))
    assert out.returncode == 0, out.stderr
    kept = json.loads((target / "device-plugin.json").read_text())
    assert kept == {"config_file": str(plugin), "content": plugin.read_text()}
    jsonschema.validate(kept, schema("device-plugin.schema.json"))
    replay = gpuprobe("check", "--json", "--only", "sharing,mig", "--snapshot", str(target))
    data = {c["name"]: c["data"] for c in replay.json()["checks"]}
    assert data["sharing"]["config_file"] == str(plugin)
    assert data["mig"]["device_plugin_mig_strategy"] == "none"


def test_capture_keeps_why_the_device_plugin_configuration_could_not_be_read(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "absent.yaml"
    config = tmp_path / "gpuprobe.yaml"
    config.write_text(f"device_plugin:\n  config_file: {missing}\n")
    target = tmp_path / "snap"
    root = tmp_path / "host"
    root.mkdir()
    out = gpuprobe("capture", str(target), "--root", str(root), "--config", str(config))
    assert out.returncode == 0, out.stderr
    kept = json.loads((target / "device-plugin.json").read_text())
    assert kept == {"config_file": str(missing), "error": "No such file or directory"}
    jsonschema.validate(kept, schema("device-plugin.schema.json"))
    replay = gpuprobe("check", "--json", "--only", "sharing", "--snapshot", str(target))
    (sharing,) = replay.json()["checks"]
    assert sharing["data"]["config_note"] == (
        f"the device plugin configuration {missing} is invalid (see device_plugin)"
    )


def test_a_malformed_device_plugin_file_is_a_usage_error(tmp_path: Path) -> None:
    target = tmp_path / "snap"
    shutil.copytree(snapshot("synthetic-mps-daemon-missing"), target)
    (target / "device-plugin.json").write_text('{"config_file": "/c.yaml", "content": 3}\n')
    out = gpuprobe("check", "--snapshot", str(target))
    assert out.returncode == 64
    assert out.stderr.strip().endswith(
        'device-plugin.json: needs either a string "content" or a string "error" '
        "(see gpuprobe check --help)"
    )
    assert "Traceback" not in out.stderr


def test_capture_of_an_amd_node_replays_its_gpus_and_faults(tmp_path: Path) -> None:
    root = tmp_path / "host"
    source = Path(snapshot("synthetic-amd-xgmi-link-down")) / "rootfs"
    shutil.copytree(source, root, symlinks=True)
    target = tmp_path / "snap"
    assert gpuprobe("capture", str(target), "--root", str(root)).returncode == 0
    rootfs = target / "rootfs"
    gpu = rootfs / "sys/bus/pci/devices/0000:bf:00.0"
    assert (gpu / "xgmi_num_links").read_text() == "01 00 01 01 01 01 00 01 \n"
    assert (gpu / "ras/umc_err_count").read_text() == "ue: 0\nce: 0\n"
    assert (rootfs / "sys/module/amdgpu/version").read_text() == "6.10.5\n"
    live = json.loads((target / "report.json").read_text())
    replay = gpuprobe("check", "--json", "--only", "driver,gpus", "--snapshot", str(target))
    assert findings_of(replay.json()) == {k: v for k, v in findings_of(live).items()
                                          if k in ("driver", "gpus")}  # fmt: skip
    assert findings_of(live)["gpus"] == (
        "CRITICAL",
        [
            ("XGMI_LINK_DOWN", "CRITICAL", "REBOOT_NODE", "gpu:1:7c3a51d2e0b50711"),
            ("XGMI_LINK_DOWN", "CRITICAL", "REBOOT_NODE", "gpu:6:7c3a51d2e0b55c66"),
        ],
    )


KMSG_RECORDS = (
    "5,0,0,-;Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103) #49-Ubuntu SMP\n"
    "6,1,21512731,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15  "
    "Tue Mar  5 22:23:56 UTC 2024\n"
    "4,2,4361822917,-;NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.\n"
    " SUBSYSTEM=pci\n"
    " DEVICE=+pci:0000:18:00.0\n"
)


def test_capture_keeps_what_kmsg_gave_and_replay_reads_it_as_the_device(tmp_path: Path) -> None:
    root = tmp_path / "host"
    shutil.copytree(Path(snapshot("synthetic-h100-8gpu-healthy")) / "rootfs", root)
    (root / "dev").mkdir(exist_ok=True)
    (root / "dev" / "kmsg").write_text(KMSG_RECORDS)
    target = tmp_path / "snap"
    out = gpuprobe("capture", str(target), "--root", str(root), "--only", "xid")
    assert out.returncode == 0, out.stderr
    assert (target / "rootfs" / "dev" / "kmsg").read_text() == KMSG_RECORDS
    replay = gpuprobe("check", "--json", "--only", "xid", "--snapshot", str(target)).json()
    (xid,) = replay["checks"]
    assert [(x["xid"], x["count"]) for x in xid["data"]["xids"]] == [(79, 1)]
    kmsg = xid["data"]["sources"]["kernel"][0]
    assert (kmsg["source"], kmsg["records"], kmsg["lost"]) == ("/dev/kmsg", 3, 0)


def test_capture_of_this_machine_keeps_its_kernel_ring_record_by_record(tmp_path: Path) -> None:
    device = Path("/dev/kmsg")
    try:
        with open(device, "rb", buffering=0) as ring:
            first = ring.read(8192).decode().rstrip("\n")
    except OSError:
        pytest.skip("/dev/kmsg cannot be read here")
    target = tmp_path / "snap"
    assert gpuprobe("capture", str(target), "--only", "xid").returncode == 0
    kept = (target / "rootfs" / "dev" / "kmsg").read_text()
    assert kept.split("\n")[0] == first.split("\n")[0]  # the ring's oldest record, first
    sequences = [int(line.split(",")[1]) for line in kept.splitlines() if line[:1] != " "]
    assert sequences == sorted(sequences) and len(sequences) >= 1
