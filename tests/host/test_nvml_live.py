"""The live NVML facade: error names and value conversion from pynvml."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pynvml
import pytest

from gpuprobe.host.nvml import LiveNvml, NvmlError, error_name, to_plain

NO_NVML = not any(Path(p).exists() for p in ("/dev/nvidia0", "/proc/driver/nvidia/version"))


def test_error_names_drop_the_prefix() -> None:
    assert error_name(pynvml.NVMLError(15)) == "GpuIsLost"
    assert error_name(pynvml.NVMLError(18)) == "LibRmVersionMismatch"
    assert error_name(pynvml.NVMLError(12345)) == "Unknown"
    assert error_name(ValueError("x")) == "Unknown"


class Inner(ctypes.Structure):
    _fields_ = [("bus", ctypes.c_uint), ("busId", ctypes.c_char * 16)]


class Outer(ctypes.Structure):
    _fields_ = [("inner", Inner), ("values", ctypes.c_ulonglong * 2), ("ok", ctypes.c_bool)]


def test_structs_become_dicts_of_their_fields() -> None:
    value = Outer(Inner(0x3A, b"0000:3a:00.0"), (ctypes.c_ulonglong * 2)(1, 2), True)
    assert to_plain(value) == {
        "inner": {"bus": 58, "busId": "0000:3a:00.0"},
        "values": [1, 2],
        "ok": True,
    }


def test_plain_values_pass_and_tuples_become_lists() -> None:
    assert to_plain((1, b"x", [2.5, None])) == [1, "x", [2.5, None]]
    assert to_plain(ctypes.c_uint(7)) == 7
    assert to_plain({"a": (1,)}) == {"a": [1]}


@pytest.mark.skipif(not NO_NVML, reason="this host has an NVIDIA driver")
def test_without_a_driver_init_fails_with_library_not_found() -> None:
    nvml = LiveNvml()
    assert nvml.init_error == "LibraryNotFound"
    with pytest.raises(NvmlError, match="Uninitialized"):
        nvml.call("nvmlDeviceGetCount")
