"""The report between its Python model (`gpuprobe.report`) and the gRPC `gpuprobe.v1` messages.

The proto carries the same fields as the JSON report; enums are spelled `STATUS_OK`,
`SEVERITY_CRITICAL`, `ACTION_RESET_GPU` where the JSON says `OK`, `CRITICAL`, `RESET_GPU`.
A check's `data` travels as a `google.protobuf.Struct`: numbers become doubles, so integral
numbers are turned back into ints on the way in (exact up to 2^53). The summary view also
carries each check's facts as JSON text (`data_json`), which a reader of thousands of summaries
decodes in C instead of walking a Struct's values in Python; a reader prefers it when it is set.
"""

from __future__ import annotations

import json
import json.scanner
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from google.protobuf import struct_pb2, timestamp_pb2

from gpuprobe import __version__, report_view
from gpuprobe.report import Action, CheckResult, Finding, NodeReport, PodRef, Severity, Status
from gpuprobe.report_view import DataKeys
from gpuprobe.v1 import diagnostics_pb2 as pb

_EXACT_INT = 2**53
# A failed MeasureBandwidth call carries a MeasureBandwidthResponse, with `failed_side` set,
# in its trailing metadata under this key (serialized).
FAILURE_KEY = "gpuprobe-failure-bin"


def report_to_proto(
    report: NodeReport,
    check_times: Mapping[str, datetime] | None = None,
    agent_version: str = __version__,
) -> pb.NodeReport:
    """The report as a `gpuprobe.v1.NodeReport`; `check_times` says when each check ran."""
    times = check_times or {}
    message = pb.NodeReport(
        node=report.node,
        time=timestamp(report.time),
        status=status_to_proto(report.status),
        agent_version=agent_version,
    )
    for check in report.checks:
        message.checks.append(check_to_proto(check, times.get(check.name)))
    return message


def summary_to_proto(
    report: NodeReport,
    check_times: Mapping[str, datetime] | None = None,
    agent_version: str = __version__,
    *,
    keep: Mapping[str, DataKeys],
) -> pb.NodeReport:
    """The report's summary view (`report_view.summary`: of each check's data the facts `keep`
    names, the records' `summary_keys`) as a `gpuprobe.v1.NodeReport`: each check's facts in
    `data` and, the same, as JSON text in `data_json`."""
    view = report_view.summary(report, keep)
    message = report_to_proto(view, check_times, agent_version)
    for check, sent in zip(view.checks, message.checks, strict=True):
        sent.data_json = data_to_json(check.data)
    return message


def check_to_proto(check: CheckResult, ran_at: datetime | None = None) -> pb.CheckResult:
    """One check's result as a `gpuprobe.v1.CheckResult`."""
    message = pb.CheckResult(
        name=check.name,
        status=status_to_proto(check.status),
        summary=check.summary,
        duration_seconds=check.duration_seconds,
        findings=[finding_to_proto(f) for f in check.findings],
        data=data_to_struct(check.data),
    )
    if ran_at is not None:
        message.time.CopyFrom(timestamp(ran_at))
    return message


def finding_to_proto(finding: Finding) -> pb.Finding:
    """A finding as a `gpuprobe.v1.Finding`."""
    return pb.Finding(
        code=finding.code,
        severity=pb.Severity.Value(f"SEVERITY_{finding.severity.value}"),
        message=finding.message,
        action=pb.Action.Value(f"ACTION_{finding.action.value}"),
        resource=finding.resource,
        pods=[
            pb.PodRef(namespace=p.namespace, pod=p.pod, container=p.container) for p in finding.pods
        ],
    )


def status_to_proto(status: Status) -> pb.Status:
    """A status as the proto enum value."""
    return pb.Status.Value(f"STATUS_{status.value}")  # type: ignore[no-any-return]


def data_to_json(data: Mapping[str, Any]) -> str:
    """A check's data as the JSON text the JSON report writes of it (tuples as lists, keys
    as text, values JSON cannot hold as their text), without spaces."""
    return json.dumps(data, default=str, separators=(",", ":"))


def data_to_struct(data: Mapping[str, Any]) -> struct_pb2.Struct:
    """A check's data as a Struct, exactly as the JSON report writes it (keys as text)."""
    struct = struct_pb2.Struct()
    # Through JSON, so tuples, non-text keys and odd values read as they do in the JSON report.
    # An integer beyond a double (10^400) would raise OverflowError and lose the whole
    # report: it goes as its text.
    struct.update(json.loads(data_to_json(data), parse_int=_struct_int))
    return struct


def _struct_int(text: str) -> float | str:
    try:
        return float(int(text))
    except OverflowError:
        return text


def timestamp(t: datetime) -> timestamp_pb2.Timestamp:
    """A datetime as a Timestamp (naive times are taken as UTC)."""
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(t if t.tzinfo else t.replace(tzinfo=UTC))
    return stamp


# --- from the proto ------------------------------------------------------------------------


def report_from_proto(message: pb.NodeReport, data: DataKeys | None = None) -> NodeReport:
    """A `gpuprobe.v1.NodeReport` as the Python report (the statuses kept as sent).

    `data` selects what to convert of the checks' data: check name → its keys (None: all of
    it); a check it does not name gets empty data. Without it every check's data is converted.
    A tool that reads a few facts of many reports converts only those: an 8-GPU report's whole
    `gpus` data costs milliseconds to convert, the few keys an audit reads a fraction of that.
    """
    if data is None:
        checks = [check_from_proto(c) for c in message.checks]
    else:
        checks = [check_from_proto(c, data.get(c.name, _NONE)) for c in message.checks]
    return NodeReport(node=message.node, time=message.time.ToDatetime(tzinfo=UTC), checks=checks)


_NONE: DataKeys = {}  # no key of a check's data


def check_from_proto(message: pb.CheckResult, keys: DataKeys | None = None) -> CheckResult:
    """A `gpuprobe.v1.CheckResult` as the Python result (of its data only `keys`, if given)."""
    if keys is not None and not keys:
        data: dict[str, Any] = {}  # none wanted: neither the JSON nor the Struct is opened
    elif message.data_json:
        try:
            data = json_to_data(message.data_json, keys)
        except ValueError as exc:
            raise ValueError(f"the {message.name} check's {exc}") from None
    else:
        data = struct_to_data(message.data, keys)
    findings = message.findings
    return CheckResult(
        message.name,
        message.summary,
        [finding_from_proto(f) for f in findings] if findings else [],
        data,
        message.duration_seconds,
        _STATUSES.get(message.status, Status.UNKNOWN),
    )


def finding_from_proto(message: pb.Finding) -> Finding:
    """A `gpuprobe.v1.Finding` as the Python finding (unset enums read as UNKNOWN and NONE)."""
    return Finding(
        code=message.code,
        severity=_SEVERITIES.get(message.severity, Severity.UNKNOWN),
        message=message.message,
        action=_ACTIONS.get(message.action, Action.NONE),
        resource=message.resource,
        pods=tuple(PodRef(p.namespace, p.pod, p.container) for p in message.pods),
    )


def status_from_proto(value: int) -> Status:
    """A proto status as the Python status (unset or unknown values read as UNKNOWN)."""
    return _STATUSES.get(value, Status.UNKNOWN)


def _by_number(enum: Any, python: Any, prefix: str) -> dict[int, Any]:
    """A proto enum's numbers → the Python enum's members of the same names (a number of a
    name the Python enum lacks is left out: it reads as the caller's default). A lookup per
    value, where the enum's own Name() costs a call and a string every time."""
    members = python.__members__
    return {
        number: members[name.removeprefix(prefix)]
        for name, number in enum.items()
        if name.removeprefix(prefix) in members
    }


_STATUSES: dict[int, Status] = _by_number(pb.Status, Status, "STATUS_")
_SEVERITIES: dict[int, Severity] = _by_number(pb.Severity, Severity, "SEVERITY_")
_ACTIONS: dict[int, Action] = _by_number(pb.Action, Action, "ACTION_")


# The json module's C scanner, called directly: one value from the start of a text, and where it
# ended. json.loads wraps it in two Python calls and a regular expression for the space around
# the value, which cost as much as the parse of a check's few hundred bytes of facts.
_SCAN = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def json_to_data(text: str, keys: DataKeys | None = None) -> dict[str, Any]:
    """A check's `data_json` as its data dict; raises ValueError when the text is not a JSON
    object. The parser reads the text whole, so `keys` only leaves out the check's other
    top-level keys (picking through every level would cost more than the parse), and a check
    `keys` does not want is not parsed at all."""
    if keys is not None and not keys:
        return {}
    try:
        data, end = _SCAN(text, 0)
    except (StopIteration, json.JSONDecodeError):
        end = -1
    except RecursionError:
        raise ValueError("data_json is nested deeper than Python's parser goes") from None
    if end != len(text):  # not JSON, or JSON with space around it: the whole parser says which
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"data_json is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"data_json is not a JSON object: {text[:40]!r}")
    return data if keys is None else {k: data[k] for k in keys if k in data}


def struct_to_data(struct: struct_pb2.Struct, keys: DataKeys | None = None) -> dict[str, Any]:
    """A Struct as the check's data dict (only `keys`, if given), integral doubles turned
    back into ints."""
    return _fields(struct, keys)


def _fields(struct: struct_pb2.Struct, keys: DataKeys | None) -> dict[str, Any]:
    if keys is not None and not keys:
        return {}  # none wanted: the Struct is not even opened
    fields = struct.fields
    if keys is None:
        return {k: _value(v, None) for k, v in fields.items()}
    return {k: _value(fields[k], sub) for k, sub in keys.items() if k in fields}


def _value(value: struct_pb2.Value, keys: DataKeys | None) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        number = float(value.number_value)
        return int(number) if number.is_integer() and abs(number) < _EXACT_INT else number
    if kind == "string_value":
        return str(value.string_value)
    if kind == "bool_value":
        return bool(value.bool_value)
    if kind == "struct_value":
        return _fields(value.struct_value, keys)
    if kind == "list_value":
        return [_value(v, keys) for v in value.list_value.values]
    return None  # null_value


# --- bandwidth failures ----------------------------------------------------------------------


def failure_metadata(side: pb.TestSide) -> tuple[tuple[str, bytes], ...]:
    """The trailing metadata of a failed MeasureBandwidth call that names the failed side."""
    return ((FAILURE_KEY, pb.MeasureBandwidthResponse(failed_side=side).SerializeToString()),)


def failed_side(error: Any) -> int:
    """The side a failed MeasureBandwidth call names (TEST_SIDE_UNSPECIFIED when none, e.g.
    from an agent of an earlier version)."""
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == FAILURE_KEY and isinstance(value, bytes):
            try:
                return int(pb.MeasureBandwidthResponse.FromString(value).failed_side)
            except Exception:  # a garbled detail names no side
                return int(pb.TEST_SIDE_UNSPECIFIED)
    return int(pb.TEST_SIDE_UNSPECIFIED)
