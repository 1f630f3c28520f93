"""Replaying nvml.json follows every replay rule of the contract."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from conftest import SNAPSHOTS, schema
from gpuprobe.errors import SnapshotError
from gpuprobe.host.nvml import NvmlError, NvmlEvent, RecordingNvml, ReplayNvml, load_record


def record(*calls: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"format": 1, "init_error": None, "calls": list(calls), **extra}


def test_recorded_answers_are_returned() -> None:
    nvml = ReplayNvml(
        record(
            {"fn": "nvmlSystemGetDriverVersion", "args": [], "ret": "550.54.15"},
            {"fn": "nvmlDeviceGetMigMode", "args": [0], "ret": [1, 1]},
            {"fn": "nvmlDeviceGetTemperature", "args": [0, 0], "ret": 41},
        )
    )
    assert nvml.call("nvmlSystemGetDriverVersion") == "550.54.15"
    assert nvml.call("nvmlDeviceGetMigMode", 0) == [1, 1]
    assert nvml.call("nvmlDeviceGetTemperature", 0, 0) == 41


def test_an_unrecorded_call_raises_not_supported() -> None:
    nvml = ReplayNvml(record({"fn": "nvmlDeviceGetName", "args": [0], "ret": "H100"}))
    with pytest.raises(NvmlError) as exc:
        nvml.call("nvmlDeviceGetName", 1)
    assert exc.value.name == "NotSupported"
    assert exc.value.code == 3


def test_a_recorded_error_is_raised_by_name() -> None:
    nvml = ReplayNvml(record({"fn": "nvmlDeviceGetSerial", "args": [5], "error": "GpuIsLost"}))
    with pytest.raises(NvmlError) as exc:
        nvml.call("nvmlDeviceGetSerial", 5)
    assert (exc.value.name, exc.value.code) == ("GpuIsLost", 15)


def test_repeated_entries_answer_in_order_and_the_last_repeats() -> None:
    nvml = ReplayNvml(
        record(
            {"fn": "nvmlDeviceGetUtilizationRates", "args": [0], "ret": {"gpu": 0}},
            {"fn": "nvmlDeviceGetUtilizationRates", "args": [0], "error": "Unknown"},
            {"fn": "nvmlDeviceGetUtilizationRates", "args": [0], "ret": {"gpu": 90}},
        )
    )
    assert nvml.call("nvmlDeviceGetUtilizationRates", 0) == {"gpu": 0}
    with pytest.raises(NvmlError, match="Unknown"):
        nvml.call("nvmlDeviceGetUtilizationRates", 0)
    assert nvml.call("nvmlDeviceGetUtilizationRates", 0) == {"gpu": 90}
    assert nvml.call("nvmlDeviceGetUtilizationRates", 0) == {"gpu": 90}


def test_handles_below_the_recorded_count_need_no_entry() -> None:
    nvml = ReplayNvml(
        record(
            {"fn": "nvmlDeviceGetCount", "args": [], "ret": 2},
            {"fn": "nvmlDeviceGetHandleByIndex", "args": [1], "error": "GpuIsLost"},
        )
    )
    assert nvml.call("nvmlDeviceGetHandleByIndex", 0) == 0
    with pytest.raises(NvmlError, match="GpuIsLost"):
        nvml.call("nvmlDeviceGetHandleByIndex", 1)
    with pytest.raises(NvmlError, match="InvalidArgument"):
        nvml.call("nvmlDeviceGetHandleByIndex", 2)


def test_mig_device_references_are_strings() -> None:
    nvml = ReplayNvml(record({"fn": "nvmlDeviceGetUUID", "args": ["0:1"], "ret": "MIG-abc"}))
    assert nvml.call("nvmlDeviceGetUUID", "0:1") == "MIG-abc"
    with pytest.raises(NvmlError, match="NotSupported"):
        nvml.call("nvmlDeviceGetUUID", "0:2")


def test_delay_is_slept_before_answering() -> None:
    nvml = ReplayNvml(record({"fn": "nvmlDeviceGetCount", "args": [], "ret": 1, "delay": 0.3}))
    started = time.monotonic()
    assert nvml.call("nvmlDeviceGetCount") == 1
    assert time.monotonic() - started >= 0.3


def test_init_error_makes_every_call_uninitialized() -> None:
    nvml = ReplayNvml({"format": 1, "init_error": "DriverNotLoaded", "calls": []})
    assert nvml.init_error == "DriverNotLoaded"
    with pytest.raises(NvmlError, match="Uninitialized"):
        nvml.call("nvmlDeviceGetCount")


def test_events_are_replayed_in_order_once() -> None:
    events = [
        {"device": 3, "type": "XidCriticalError", "data": 79, "time": "2026-11-29T20:58:01Z"},
        {"device": 1, "type": "XidCriticalError", "data": 48},
    ]
    nvml = ReplayNvml(record(events=events))
    assert nvml.wait_events(0.01) == [
        NvmlEvent(3, "XidCriticalError", 79, "2026-11-29T20:58:01Z"),
        NvmlEvent(1, "XidCriticalError", 48, None),
    ]
    assert nvml.wait_events(0.01) == []


def test_recording_writes_down_calls_errors_and_events() -> None:
    inner = ReplayNvml(
        record(
            {"fn": "nvmlDeviceGetCount", "args": [], "ret": 1},
            {"fn": "nvmlDeviceGetSerial", "args": [0], "error": "NotSupported"},
            events=[{"device": 0, "type": "XidCriticalError", "data": 13}],
        )
    )
    rec = RecordingNvml(inner)
    assert rec.call("nvmlDeviceGetCount") == 1
    with pytest.raises(NvmlError):
        rec.call("nvmlDeviceGetSerial", 0)
    rec.wait_events(0.01)
    written = rec.record()
    assert written == {
        "format": 1,
        "init_error": None,
        "calls": [
            {"fn": "nvmlDeviceGetCount", "args": [], "ret": 1},
            {"fn": "nvmlDeviceGetSerial", "args": [0], "error": "NotSupported"},
        ],
        "events": [{"device": 0, "type": "XidCriticalError", "data": 13}],
    }
    jsonschema.validate(written, schema("nvml.schema.json"))
    again = ReplayNvml(written)
    assert again.call("nvmlDeviceGetCount") == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[]", "not a JSON object"),
        ('{"format": 2, "calls": []}', "unsupported format 2"),
        ('{"format": 1}', "calls must be a list"),
        ('{"format": 1, "calls": [{"fn": "x", "args": []}]}', "fn must name an nvml function"),
        ('{"format": 1, "calls": [{"fn": "nvmlA", "args": 3, "ret": 1}]}', "args must be a list"),
        ('{"format": 1, "calls": [{"fn": "nvmlA", "args": []}]}', "exactly one of ret and error"),
        (
            '{"format": 1, "calls": [{"fn": "nvmlA", "args": [], "ret": 1, "error": "X"}]}',
            "exactly one of ret and error",
        ),
        ('{"format": 1, "calls": [], "events": [{"device": 0}]}', "events[0]"),
        ('{"format": 1, "calls": [{"fn": "nvmlA", "args": [], "ret": 1, "delay": -1}]}', "delay"),
        ('{"format": 1, "calls": [', "line 1 column 25: Expecting value"),
        ("\xff\xfe", "nvml.json"),
    ],
)
def test_corrupt_records_are_one_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "nvml.json"
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(SnapshotError) as exc:
        ReplayNvml(load_record(str(path)))
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_every_committed_record_matches_the_contract_schema() -> None:
    records = sorted(SNAPSHOTS.glob("*/nvml.json"))
    assert records
    for path in records:
        jsonschema.validate(json.loads(path.read_text()), schema("nvml.schema.json"))
