"""The live NVML facade: error names and value conversion from pynvml."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pynvml
import pytest

from gpuprobe.host.nvml import (
    EVENT_TYPES,
    WATCHED_EVENTS,
    LiveNvml,
    NvmlError,
    error_name,
    parse_ref,
    register_event_types,
    to_plain,
)

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


def test_handles_inside_structs_become_null() -> None:
    info = pynvml.c_nvmlGpuInstanceInfo_t()
    info.id, info.profileId = 3, 9
    info.placement.start, info.placement.size = 4, 4
    assert to_plain(info) == {
        "device": None,
        "id": 3,
        "profileId": 9,
        "placement": {"start": 4, "size": 4},
    }


def test_field_values_become_a_list_with_the_value_union() -> None:
    values = (pynvml.c_nvmlFieldValue_t * 1)()
    values[0].fieldId, values[0].valueType, values[0].value.uiVal = 230, 1, 2
    (plain,) = to_plain(values)
    assert (plain["fieldId"], plain["nvmlReturn"], plain["value"]["uiVal"]) == (230, 0, 2)


@pytest.mark.parametrize(
    ("ref", "parsed"),
    [("0:1", ("mig", (0, 1))), ("gi:3:7", ("gi", (3, 7))), ("ci:3:7:1", ("ci", (3, 7, 1)))],
)
def test_handle_references(ref: str, parsed: tuple[str, tuple[int, ...]]) -> None:
    assert parse_ref(ref) == parsed


@pytest.mark.parametrize("ref", ["gi:3", "ci:3:7", "0:x", "x", "gi:a:b"])
def test_malformed_references_are_invalid_arguments(ref: str) -> None:
    with pytest.raises(NvmlError, match="InvalidArgument"):
        parse_ref(ref)


class Handle:
    """An opaque pynvml handle, named for the test."""

    def __init__(self, name: str) -> None:
        self.name = name


@pytest.fixture
def live(monkeypatch: pytest.MonkeyPatch) -> LiveNvml:
    """LiveNvml over the real pynvml module, its C calls replaced (there is no GPU here)."""
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: Handle(f"gpu{i}"))
    monkeypatch.setattr(
        pynvml, "nvmlDeviceGetGpuInstanceById", lambda h, i: Handle(f"{h.name}/gi{i}")
    )
    monkeypatch.setattr(
        pynvml,
        "nvmlGpuInstanceGetComputeInstanceById",
        lambda h, i: Handle(f"{h.name}/ci{i}"),
    )

    def gi_info(handle: Handle) -> object:
        assert handle.name == "gpu3/gi7"
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.id, info.placement.start, info.placement.size = 7, 2, 1
        return info

    def ci_info(handle: Handle) -> object:
        assert handle.name == "gpu3/gi7/ci1"
        info = pynvml.c_nvmlComputeInstanceInfo_t()
        info.id = 1
        return info

    def fabric(handle: Handle, ref: object) -> int:
        assert handle.name == "gpu0"
        info = ref._obj  # type: ignore[attr-defined]  # byref(): NVML fills the caller's struct
        assert isinstance(info, pynvml.c_nvmlGpuFabricInfo_v2_t)
        assert info.version == pynvml.nvmlGpuFabricInfo_v2
        info.state, info.cliqueId = 3, 32766
        return 0

    monkeypatch.setattr(pynvml, "nvmlGpuInstanceGetInfo", gi_info)
    monkeypatch.setattr(pynvml, "nvmlComputeInstanceGetInfo_v2", ci_info)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetGpuFabricInfoV", fabric)
    nvml = LiveNvml()
    nvml._initialised, nvml._pynvml = True, pynvml
    return nvml


def test_live_instance_handles_answer_by_reference(live: LiveNvml) -> None:
    assert live.call("nvmlDeviceGetGpuInstanceById", 3, 7) == "gi:3:7"
    assert live.call("nvmlGpuInstanceGetComputeInstanceById", "gi:3:7", 1) == "ci:3:7:1"
    info = live.call("nvmlGpuInstanceGetInfo", "gi:3:7")
    assert (info["id"], info["placement"], info["device"]) == (7, {"start": 2, "size": 1}, None)
    assert live.call("nvmlComputeInstanceGetInfo_v2", "ci:3:7:1")["id"] == 1


def test_live_fabric_info_is_filled_into_a_struct_the_facade_allocates(live: LiveNvml) -> None:
    info = live.call("nvmlDeviceGetGpuFabricInfoV", 0)
    assert (info["state"], info["cliqueId"], info["status"]) == (3, 32766, 0)
    assert len(info["clusterUuid"]) == 16


WANTED = sum(EVENT_TYPES[n] for n in WATCHED_EVENTS)


def test_the_watched_event_types_carry_nvml_h_bits() -> None:
    assert {n: EVENT_TYPES[n] for n in WATCHED_EVENTS} == {
        "XidCriticalError": pynvml.nvmlEventTypeXidCriticalError,
        "DoubleBitEccError": pynvml.nvmlEventTypeDoubleBitEccError,
        "SingleBitEccError": pynvml.nvmlEventTypeSingleBitEccError,
        "DramRetirementFailure": pynvml.nvmlEventTypeDramRetirementFailure,
        "FatalPoisonError": pynvml.nvmlEventTypeFatalPoisonError,
        "GpuUnavailableError": pynvml.nvmlEventTypeGpuUnavailableError,
        "GpuRecoveryAction": pynvml.nvmlEventTypeGpuRecoveryAction,
    }


class Registrar:
    """nvmlDeviceRegisterEvents as a GPU answers it: NotSupported (or another error) for any
    mask holding a type it refuses."""

    def __init__(self, refused: int, error: str = "NotSupported") -> None:
        self.refused, self.error = refused, error
        self.masks: list[int] = []

    def __call__(self, mask: int) -> None:
        self.masks.append(mask)
        if mask & self.refused:
            raise NvmlError(self.error)


def test_a_supported_mask_is_registered_at_once_cut_to_what_the_gpu_supports() -> None:
    gpu = Registrar(refused=0)
    supported = 0x8 | 0x2 | 0x1 | 0x4  # an older GPU: no newer types (PState is not wanted)
    assert register_event_types(gpu, WANTED, supported) == 0xB
    assert gpu.masks == [0xB]


def test_a_refused_mask_is_registered_type_by_type_keeping_the_others() -> None:
    gpu = Registrar(refused=EVENT_TYPES["GpuRecoveryAction"])
    assert register_event_types(gpu, WANTED, WANTED) == WANTED & ~0x8000
    assert gpu.masks == [WANTED, 0x1, 0x2, 0x8, 0x800, 0x2000, 0x4000, 0x8000]


def test_an_old_driver_that_knows_no_newer_type_keeps_the_device_plugins_three() -> None:
    gpu = Registrar(refused=0xF800, error="InvalidArgument")
    assert register_event_types(gpu, WANTED, None) == 0xB  # supported types unknown


def test_a_lost_gpu_is_an_error_not_a_fallback() -> None:
    gpu = Registrar(refused=WANTED, error="GpuIsLost")
    with pytest.raises(NvmlError, match="GpuIsLost"):
        register_event_types(gpu, WANTED, WANTED)
    assert gpu.masks == [WANTED]


def test_nothing_wanted_that_the_gpu_supports_registers_nothing() -> None:
    gpu = Registrar(refused=0)
    assert register_event_types(gpu, WANTED, 0x4 | 0x10) == 0
    assert gpu.masks == []
