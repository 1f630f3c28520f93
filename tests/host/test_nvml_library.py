"""NVML from the host's own library directories under --root: the DaemonSet runs without the
NVIDIA container runtime, so the agent loads the host's libnvidia-ml.so.1 itself."""

from __future__ import annotations

import ctypes.util
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from gpuprobe.host.nvml import LiveNvml
from gpuprobe.host.nvml_library import (
    SONAME,
    find_nvml_library,
    library_directories,
    resolve_in_root,
)

VERSIONED = "libnvidia-ml.so.550.54.15"  # the file the driver's installer writes


def install(root: Path, directory: str, target: str = VERSIONED) -> Path:
    """A driver install as the .run installer and the distributions' packages lay it out:
    the versioned file and the soname link to it (relative)."""
    lib = root / directory.lstrip("/")
    lib.mkdir(parents=True, exist_ok=True)
    (lib / VERSIONED).write_bytes(b"\x7fELF")
    (lib / SONAME).symlink_to(target)
    return lib / VERSIONED


def test_the_search_order_is_the_documented_one() -> None:
    assert library_directories("x86_64") == [
        "/usr/lib/x86_64-linux-gnu",
        "/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/lib64",
        "/usr/lib",
        "/lib",
        "/run/nvidia/driver/usr/lib/x86_64-linux-gnu",
        "/run/nvidia/driver/lib/x86_64-linux-gnu",
        "/run/nvidia/driver/usr/lib64",
        "/run/nvidia/driver/lib64",
        "/run/nvidia/driver/usr/lib",
        "/run/nvidia/driver/lib",
        "/home/kubernetes/bin/nvidia/lib64",
        "/usr/local/nvidia/lib64",
    ]
    assert library_directories("aarch64")[0] == "/usr/lib/aarch64-linux-gnu"


def test_found_under_the_root_in_order(tmp_path: Path) -> None:
    assert find_nvml_library(str(tmp_path), "x86_64") is None
    driver = install(tmp_path, "/run/nvidia/driver/usr/lib64")  # GPU Operator's driver root
    assert find_nvml_library(str(tmp_path), "x86_64") == str(driver)
    rhel = install(tmp_path, "/usr/lib64")
    assert find_nvml_library(str(tmp_path), "x86_64") == str(rhel)
    debian = install(tmp_path, "/usr/lib/x86_64-linux-gnu")
    assert find_nvml_library(str(tmp_path), "x86_64") == str(debian)


def test_absolute_links_resolve_inside_the_root(tmp_path: Path) -> None:
    """/usr/lib64 -> /usr/lib (merged /usr) and an absolute soname link: both are the host's
    paths, found under the root, never on the agent's own filesystem."""
    (tmp_path / "usr" / "lib").mkdir(parents=True)
    (tmp_path / "usr" / "lib64").symlink_to("/usr/lib")
    real = install(tmp_path, "/usr/lib", target=f"/usr/lib64/{VERSIONED}")
    assert resolve_in_root(str(tmp_path), f"/usr/lib64/{SONAME}") == str(real)
    # a link that climbs out with .. stops at the root, as a chroot's would
    (tmp_path / "escape").symlink_to("../../../../etc/passwd")
    assert resolve_in_root(str(tmp_path), "/escape") is None
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    assert resolve_in_root(str(tmp_path), "/escape") == str(tmp_path / "etc" / "passwd")
    (tmp_path / "loop").symlink_to("/loop")
    assert resolve_in_root(str(tmp_path), "/loop") is None


@pytest.fixture
def fresh_pynvml() -> Iterator[None]:
    """pynvml's process-wide library handle unset before and restored after."""
    saved = pynvml.nvmlLib
    pynvml.nvmlLib = None
    yield
    pynvml.nvmlLib = saved


def test_live_nvml_loads_the_library_under_the_root(tmp_path: Path, fresh_pynvml: None) -> None:
    """A real shared library (zlib) where the host's NVML would be: LiveNvml loads that
    file, so nvmlInit finds the library but not its entry point (FunctionNotFound), where
    without it there is no library at all (LibraryNotFound)."""
    zlib = ctypes.util.find_library("z")
    assert zlib is not None
    source = next(
        p
        for d in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")
        if os.path.exists(p := os.path.join(d, zlib))
    )
    lib = tmp_path / "usr" / "lib64"
    lib.mkdir(parents=True)
    shutil.copy(source, lib / VERSIONED)
    (lib / SONAME).symlink_to(VERSIONED)
    nvml = LiveNvml(str(tmp_path))
    assert nvml.init_error == "FunctionNotFound"
    assert nvml.library == str(lib / VERSIONED)


def test_live_nvml_without_a_library_under_the_root(tmp_path: Path, fresh_pynvml: None) -> None:
    nvml = LiveNvml(str(tmp_path))
    if Path("/dev/nvidiactl").exists():
        pytest.skip("this host has its own NVML on the loader path")
    assert nvml.init_error == "LibraryNotFound"
    assert nvml.library is None
