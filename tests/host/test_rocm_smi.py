"""ROCm SMI, asked for real where Debian's librocm-smi64-1 is installed, in a child process;
the transport a Host carries asks it once, a snapshot never."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import SNAPSHOTS, require
from gpuprobe.host import live_host, rocm_smi, snapshot_host
from gpuprobe.host.fs import HostFS

DEBIAN_LIBRARY = Path("/usr/lib/librocm_smi64.so.1")


def test_the_real_library_on_a_machine_without_gpus_refuses_to_start() -> None:
    require(DEBIAN_LIBRARY.exists(), "Debian's librocm-smi64-1 is not installed")
    found = rocm_smi.probe(HostFS("/"))
    # rsmi_init finds no /sys/class/drm devices: RSMI_STATUS_INIT_ERROR, in the library's
    # own words; nothing else is asked (the library would abort its process).
    assert found.library == str(DEBIAN_LIBRARY)
    assert found.status.startswith("init failed: An error occurred during initialization")
    assert found.devices is None
    assert found.version is not None


def test_a_root_without_the_library_says_it_is_absent(tmp_path: Path) -> None:
    assert rocm_smi.probe(HostFS(tmp_path)) == rocm_smi.SmiProbe(None, "absent")


def test_the_library_is_found_under_the_host_root(tmp_path: Path) -> None:
    require(DEBIAN_LIBRARY.exists(), "Debian's librocm-smi64-1 is not installed")
    lib = tmp_path / "opt/rocm/lib"
    lib.mkdir(parents=True)
    shutil.copy(DEBIAN_LIBRARY, lib / rocm_smi.LIBRARY)
    found = rocm_smi.probe(HostFS(tmp_path))
    assert found.library == str(lib / rocm_smi.LIBRARY)
    assert found.status.startswith("init failed: ")


def test_a_file_that_is_no_library_is_a_crash_the_agent_outlives(tmp_path: Path) -> None:
    lib = tmp_path / "usr/lib"
    lib.mkdir(parents=True)
    (lib / rocm_smi.LIBRARY).write_text("not an ELF object\n")
    found = rocm_smi.probe(HostFS(tmp_path))
    assert found == rocm_smi.SmiProbe(str(lib / rocm_smi.LIBRARY), "crashed: exit status 1")


def test_the_live_transport_asks_the_library_once_and_keeps_its_answer(tmp_path: Path) -> None:
    smi = rocm_smi.LiveRocmSmi(HostFS(tmp_path))
    assert smi.probe() == rocm_smi.SmiProbe(None, "absent")
    lib = tmp_path / "opt/rocm/lib"
    lib.mkdir(parents=True)
    (lib / rocm_smi.LIBRARY).write_text("not an ELF object\n")
    assert smi.probe() == rocm_smi.SmiProbe(None, "absent")  # asked once per agent


def test_a_snapshot_never_asks_the_library() -> None:
    host = snapshot_host(str(SNAPSHOTS / "synthetic-amd-mi300x-8gpu-healthy"))
    assert host.rocm_smi.probe() == rocm_smi.NOT_ASKED == rocm_smi.SmiProbe(None, "not asked")


def test_the_live_node_carries_the_live_transport(tmp_path: Path) -> None:
    assert isinstance(live_host(str(tmp_path)).rocm_smi, rocm_smi.LiveRocmSmi)
