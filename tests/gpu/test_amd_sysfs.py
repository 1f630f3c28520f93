"""The amdgpu driver's sysfs files, in the driver's own formats, read into typed facts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import SNAPSHOTS
from gpuprobe.gpu.amd import ras, xgmi
from gpuprobe.gpu.amd.sysfs import PcieLink, read_gpus, read_module
from gpuprobe.host.fs import HostFS

HEALTHY = SNAPSHOTS / "synthetic-amd-mi300x-8gpu-healthy"
GPU3 = "sys/bus/pci/devices/0000:5c:00.0"


def test_error_counts_read_as_the_driver_prints_them() -> None:
    # amdgpu_ras_sysfs_read: "%s: %lu\n%s: %lu\n" for ue and ce; newer kernels add deferred.
    assert ras.parse_error_count("umc", "ue: 2\nce: 17\n") == ras.ErrorCount("umc", 2, 17)
    assert ras.parse_error_count("gfx", "ue: 0\nce: 1\nde: 3\n") == ras.ErrorCount("gfx", 0, 1, 3)


def test_an_inaccessible_count_is_no_count_and_garbage_is_refused() -> None:
    assert ras.parse_error_count("umc", "Query currently inaccessible\n") is None
    with pytest.raises(ras.RasFormatError, match="umc_err_count: unexpected line 'ue 2'"):
        ras.parse_error_count("umc", "ue 2\nce: 0\n")
    with pytest.raises(ras.RasFormatError, match="no ue and ce counts"):
        ras.parse_error_count("umc", "ce: 0\n")


def test_bad_pages_are_counted_by_their_flag() -> None:
    # The kernel's own example (Documentation/gpu/amdgpu/ras.rst), and a page it failed on.
    text = "0x00000001 : 0x00001000 : R\n0x00000002 : 0x00001000 : P\n0x00000003 : 0x00001000 : F\n"
    assert ras.parse_bad_pages(text) == ras.BadPages(reserved=1, pending=1, failed=1)
    assert ras.parse_bad_pages("") == ras.BadPages(0, 0, 0)
    with pytest.raises(ras.RasFormatError, match="gpu_vram_bad_pages: unexpected line"):
        ras.parse_bad_pages("0x00000001 : 0x0000")


@pytest.mark.parametrize(
    ("parameter", "vram", "threshold"),
    [
        ("-1\n", 206141652992, 1965),  # the default: one page per 100 MiB of VRAM
        ("-2\n", 206141652992, 1965),
        ("500\n", 206141652992, 500),  # a page count set by the operator
        ("0\n", 206141652992, None),  # retirement off
        (None, None, None),
        ("-1\n", None, None),
    ],
)
def test_the_retirement_threshold_follows_the_driver(
    parameter: str | None, vram: int | None, threshold: int | None
) -> None:
    assert ras.bad_page_threshold(parameter, vram) == threshold


def test_xgmi_rows_name_each_hive_node_and_mask_the_link_type() -> None:
    # "%02x " per node, then "\n"; the top two bits of a hops byte are the link type.
    peers = xgmi.peers("01 00 41 02 \n", "01 00 00 01 \n")
    assert peers == (
        xgmi.XgmiPeer(node=1, hops=1, links=1),
        xgmi.XgmiPeer(node=3, hops=1, links=0),
        xgmi.XgmiPeer(node=4, hops=2, links=1),
    )
    hive = xgmi.Xgmi(hive_id=7, device_id=1, physical_id=1, peers=peers, errors=0)
    assert hive.links_down == (xgmi.XgmiPeer(3, 1, 0),)  # two hops away is routed, not down
    with pytest.raises(xgmi.XgmiFormatError, match="lists 2 nodes, xgmi_num_links 3"):
        xgmi.peers("00 01\n", "00 01 01\n")


def test_the_healthy_mi300x_node_reads_in_full() -> None:
    gpus = read_gpus(HostFS(HEALTHY / "rootfs", snapshot=True))
    assert [g.pci_address for g in gpus] == [
        "0000:0c:00.0", "0000:22:00.0", "0000:38:00.0", "0000:5c:00.0",
        "0000:9f:00.0", "0000:af:00.0", "0000:bf:00.0", "0000:df:00.0",
    ]  # fmt: skip
    assert [g.card for g in gpus] == [f"card{1 + 8 * i}" for i in range(8)]
    assert [g.render_node for g in gpus] == [f"renderD{128 + 8 * i}" for i in range(8)]
    gpu = gpus[3]
    assert gpu.bound and gpu.driver == "amdgpu"
    assert gpu.name == "AMD Instinct MI300X"
    assert gpu.unique_id == "7c3a51d2e0b52933"
    assert gpu.resource == "gpu:3:7c3a51d2e0b52933"
    assert gpu.vram_total_bytes == 206141652992
    assert gpu.busy_percent == 100
    assert gpu.pcie == PcieLink(32.0, 16, 32.0, 16)
    assert gpu.temperatures_celsius == {"junction": 64.0, "mem": 55.0}
    assert [c.block for c in gpu.ras_counts] == ["umc", "sdma", "gfx", "mmhub", "xgmi_wafl"]
    assert gpu.uncorrectable_errors == 0
    assert gpu.bad_pages == ras.BadPages(0, 0, 0)
    assert gpu.errors == {}
    # GPU 3's hive directory is a link to the first GPU's (amdgpu_xgmi.c).
    assert gpu.xgmi is not None
    assert gpu.xgmi.hive_id == 11386580467236257794
    assert (gpu.xgmi.device_id, gpu.xgmi.physical_id, gpu.xgmi.errors) == (
        4613629217419446303,
        3,
        0,
    )
    assert [p.node for p in gpu.xgmi.peers] == [1, 2, 3, 5, 6, 7, 8]
    assert gpu.xgmi.links_down == ()


def test_the_module_is_read_from_sys_module() -> None:
    module = read_module(HostFS(HEALTHY / "rootfs", snapshot=True))
    assert (module.loaded, module.version, module.kernel, module.bad_page_threshold) == (
        True, "6.10.5", "6.8.0-49-generic", "-1"
    )  # fmt: skip
    gone = read_module(HostFS(SNAPSHOTS / "synthetic-amd-driver-not-loaded" / "rootfs"))
    assert (gone.loaded, gone.version) == (False, None)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the healthy node's rootfs to spoil."""
    root = tmp_path / "rootfs"
    shutil.copytree(HEALTHY / "rootfs", root, symlinks=True)
    return root


def test_a_present_file_that_cannot_be_read_or_parsed_is_named(tree: Path) -> None:
    (tree / GPU3 / "unique_id").unlink()
    (tree / GPU3 / "unique_id").mkdir()  # present, yet no file to read
    (tree / GPU3 / "mem_info_vram_total").write_text("lots\n")
    (tree / GPU3 / "ras/umc_err_count").write_text("Query currently inaccessible\n")
    (tree / GPU3 / "ras/gfx_err_count").write_text("ue: -\nce: 0\n")
    (tree / GPU3 / "xgmi_num_links").write_text("00 01 01\n")
    gpu = read_gpus(HostFS(tree))[3]
    assert gpu.unique_id is None and gpu.resource == "gpu:3:0000:5c:00.0"
    assert gpu.errors == {
        "unique_id": "unreadable",
        "mem_info_vram_total": "not a number: 'lots'",
        "ras/gfx_err_count": "gfx_err_count: unexpected line 'ue: -'",
        "xgmi": "xgmi_num_hops lists 8 nodes, xgmi_num_links 3",
    }
    assert gpu.ras_inaccessible == ("umc",)
    assert gpu.xgmi is None


def test_a_gpu_held_by_another_driver_is_not_amdgpus(tree: Path) -> None:
    link = tree / GPU3 / "driver"
    link.unlink()
    link.symlink_to("../../../../bus/pci/drivers/vfio-pci")
    gpu = read_gpus(HostFS(tree))[3]
    assert (gpu.driver, gpu.bound, gpu.unique_id, gpu.ras_counts) == ("vfio-pci", False, None, ())
    # The PCI core's own files are still read.
    assert gpu.pcie.max_width == 16


def test_only_amd_display_and_accelerator_functions_are_gpus(tree: Path) -> None:
    audio = tree / "sys/bus/pci/devices/0000:0c:00.1"
    audio.mkdir()
    (audio / "vendor").write_text("0x1002\n")
    (audio / "device").write_text("0xab28\n")
    (audio / "class").write_text("0x040300\n")  # its HDMI audio function
    host_bridge = tree / "sys/bus/pci/devices/0000:00:18.0"
    host_bridge.mkdir()
    (host_bridge / "vendor").write_text("0x1022\n")  # AMD the CPU maker, not ATI
    (host_bridge / "device").write_text("0x14ad\n")
    (host_bridge / "class").write_text("0x060000\n")
    assert len(read_gpus(HostFS(tree))) == 8
