import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATUS_UNSPECIFIED: _ClassVar[Status]
    STATUS_OK: _ClassVar[Status]
    STATUS_WARNING: _ClassVar[Status]
    STATUS_CRITICAL: _ClassVar[Status]
    STATUS_UNKNOWN: _ClassVar[Status]

class Severity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEVERITY_UNSPECIFIED: _ClassVar[Severity]
    SEVERITY_WARNING: _ClassVar[Severity]
    SEVERITY_CRITICAL: _ClassVar[Severity]
    SEVERITY_UNKNOWN: _ClassVar[Severity]

class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTION_UNSPECIFIED: _ClassVar[Action]
    ACTION_NONE: _ClassVar[Action]
    ACTION_RESTART_APP: _ClassVar[Action]
    ACTION_RESET_GPU: _ClassVar[Action]
    ACTION_REBOOT_NODE: _ClassVar[Action]
    ACTION_DRAIN_NODE: _ClassVar[Action]
    ACTION_FIX_CONFIG: _ClassVar[Action]
    ACTION_HARDWARE_INSPECTION: _ClassVar[Action]
    ACTION_CHECK_NETWORK: _ClassVar[Action]
    ACTION_CHECK_STORAGE: _ClassVar[Action]

class ReportView(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPORT_VIEW_UNSPECIFIED: _ClassVar[ReportView]
    REPORT_VIEW_FULL: _ClassVar[ReportView]
    REPORT_VIEW_SUMMARY: _ClassVar[ReportView]

class TestSide(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TEST_SIDE_UNSPECIFIED: _ClassVar[TestSide]
    TEST_SIDE_SOURCE: _ClassVar[TestSide]
    TEST_SIDE_PEER: _ClassVar[TestSide]
STATUS_UNSPECIFIED: Status
STATUS_OK: Status
STATUS_WARNING: Status
STATUS_CRITICAL: Status
STATUS_UNKNOWN: Status
SEVERITY_UNSPECIFIED: Severity
SEVERITY_WARNING: Severity
SEVERITY_CRITICAL: Severity
SEVERITY_UNKNOWN: Severity
ACTION_UNSPECIFIED: Action
ACTION_NONE: Action
ACTION_RESTART_APP: Action
ACTION_RESET_GPU: Action
ACTION_REBOOT_NODE: Action
ACTION_DRAIN_NODE: Action
ACTION_FIX_CONFIG: Action
ACTION_HARDWARE_INSPECTION: Action
ACTION_CHECK_NETWORK: Action
ACTION_CHECK_STORAGE: Action
REPORT_VIEW_UNSPECIFIED: ReportView
REPORT_VIEW_FULL: ReportView
REPORT_VIEW_SUMMARY: ReportView
TEST_SIDE_UNSPECIFIED: TestSide
TEST_SIDE_SOURCE: TestSide
TEST_SIDE_PEER: TestSide

class NodeReport(_message.Message):
    __slots__ = ("node", "time", "status", "checks", "agent_version")
    NODE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    node: str
    time: _timestamp_pb2.Timestamp
    status: Status
    checks: _containers.RepeatedCompositeFieldContainer[CheckResult]
    agent_version: str
    def __init__(self, node: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., status: _Optional[_Union[Status, str]] = ..., checks: _Optional[_Iterable[_Union[CheckResult, _Mapping]]] = ..., agent_version: _Optional[str] = ...) -> None: ...

class CheckResult(_message.Message):
    __slots__ = ("name", "status", "summary", "duration_seconds", "findings", "data", "time", "data_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FINDINGS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    DATA_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    status: Status
    summary: str
    duration_seconds: float
    findings: _containers.RepeatedCompositeFieldContainer[Finding]
    data: _struct_pb2.Struct
    time: _timestamp_pb2.Timestamp
    data_json: str
    def __init__(self, name: _Optional[str] = ..., status: _Optional[_Union[Status, str]] = ..., summary: _Optional[str] = ..., duration_seconds: _Optional[float] = ..., findings: _Optional[_Iterable[_Union[Finding, _Mapping]]] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., data_json: _Optional[str] = ...) -> None: ...

class Finding(_message.Message):
    __slots__ = ("code", "severity", "message", "action", "resource", "pods")
    CODE_FIELD_NUMBER: _ClassVar[int]
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    code: str
    severity: Severity
    message: str
    action: Action
    resource: str
    pods: _containers.RepeatedCompositeFieldContainer[PodRef]
    def __init__(self, code: _Optional[str] = ..., severity: _Optional[_Union[Severity, str]] = ..., message: _Optional[str] = ..., action: _Optional[_Union[Action, str]] = ..., resource: _Optional[str] = ..., pods: _Optional[_Iterable[_Union[PodRef, _Mapping]]] = ...) -> None: ...

class PodRef(_message.Message):
    __slots__ = ("namespace", "pod", "container")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    POD_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    pod: str
    container: str
    def __init__(self, namespace: _Optional[str] = ..., pod: _Optional[str] = ..., container: _Optional[str] = ...) -> None: ...

class GetReportRequest(_message.Message):
    __slots__ = ("view",)
    VIEW_FIELD_NUMBER: _ClassVar[int]
    view: ReportView
    def __init__(self, view: _Optional[_Union[ReportView, str]] = ...) -> None: ...

class GetReportResponse(_message.Message):
    __slots__ = ("report",)
    REPORT_FIELD_NUMBER: _ClassVar[int]
    report: NodeReport
    def __init__(self, report: _Optional[_Union[NodeReport, _Mapping]] = ...) -> None: ...

class RunChecksRequest(_message.Message):
    __slots__ = ("checks",)
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    checks: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, checks: _Optional[_Iterable[str]] = ...) -> None: ...

class RunChecksResponse(_message.Message):
    __slots__ = ("report",)
    REPORT_FIELD_NUMBER: _ClassVar[int]
    report: NodeReport
    def __init__(self, report: _Optional[_Union[NodeReport, _Mapping]] = ...) -> None: ...

class WatchReportsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WatchReportsResponse(_message.Message):
    __slots__ = ("report",)
    REPORT_FIELD_NUMBER: _ClassVar[int]
    report: NodeReport
    def __init__(self, report: _Optional[_Union[NodeReport, _Mapping]] = ...) -> None: ...

class ClearFindingsRequest(_message.Message):
    __slots__ = ("gpu",)
    GPU_FIELD_NUMBER: _ClassVar[int]
    gpu: int
    def __init__(self, gpu: _Optional[int] = ...) -> None: ...

class ClearFindingsResponse(_message.Message):
    __slots__ = ("cleared", "report")
    CLEARED_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    cleared: int
    report: NodeReport
    def __init__(self, cleared: _Optional[int] = ..., report: _Optional[_Union[NodeReport, _Mapping]] = ...) -> None: ...

class MeasureBandwidthRequest(_message.Message):
    __slots__ = ("peer", "transport", "duration", "max_bytes", "streams", "warmup", "rdma_device", "peer_rdma_device", "force", "sink")
    PEER_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    WARMUP_FIELD_NUMBER: _ClassVar[int]
    RDMA_DEVICE_FIELD_NUMBER: _ClassVar[int]
    PEER_RDMA_DEVICE_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    SINK_FIELD_NUMBER: _ClassVar[int]
    peer: str
    transport: str
    duration: _duration_pb2.Duration
    max_bytes: int
    streams: int
    warmup: _duration_pb2.Duration
    rdma_device: str
    peer_rdma_device: str
    force: bool
    sink: OpenBandwidthSinkResponse
    def __init__(self, peer: _Optional[str] = ..., transport: _Optional[str] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_bytes: _Optional[int] = ..., streams: _Optional[int] = ..., warmup: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., rdma_device: _Optional[str] = ..., peer_rdma_device: _Optional[str] = ..., force: _Optional[bool] = ..., sink: _Optional[_Union[OpenBandwidthSinkResponse, _Mapping]] = ...) -> None: ...

class MeasureBandwidthResponse(_message.Message):
    __slots__ = ("peer", "transport", "bytes_per_second", "bytes", "elapsed", "stream_bytes_per_second", "source", "failed_side", "sender_cpu", "sink_cpu", "cpu_limited_side", "cpu_seconds_per_gbit")
    PEER_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_FIELD_NUMBER: _ClassVar[int]
    STREAM_BYTES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    FAILED_SIDE_FIELD_NUMBER: _ClassVar[int]
    SENDER_CPU_FIELD_NUMBER: _ClassVar[int]
    SINK_CPU_FIELD_NUMBER: _ClassVar[int]
    CPU_LIMITED_SIDE_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_PER_GBIT_FIELD_NUMBER: _ClassVar[int]
    peer: str
    transport: str
    bytes_per_second: float
    bytes: int
    elapsed: _duration_pb2.Duration
    stream_bytes_per_second: _containers.RepeatedScalarFieldContainer[float]
    source: str
    failed_side: TestSide
    sender_cpu: TestCpu
    sink_cpu: TestCpu
    cpu_limited_side: str
    cpu_seconds_per_gbit: float
    def __init__(self, peer: _Optional[str] = ..., transport: _Optional[str] = ..., bytes_per_second: _Optional[float] = ..., bytes: _Optional[int] = ..., elapsed: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., stream_bytes_per_second: _Optional[_Iterable[float]] = ..., source: _Optional[str] = ..., failed_side: _Optional[_Union[TestSide, str]] = ..., sender_cpu: _Optional[_Union[TestCpu, _Mapping]] = ..., sink_cpu: _Optional[_Union[TestCpu, _Mapping]] = ..., cpu_limited_side: _Optional[str] = ..., cpu_seconds_per_gbit: _Optional[float] = ...) -> None: ...

class TestCpu(_message.Message):
    __slots__ = ("cpu_seconds", "wall_seconds", "threads", "busiest_thread_cpu_share", "cpu_limited")
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    THREADS_FIELD_NUMBER: _ClassVar[int]
    BUSIEST_THREAD_CPU_SHARE_FIELD_NUMBER: _ClassVar[int]
    CPU_LIMITED_FIELD_NUMBER: _ClassVar[int]
    cpu_seconds: float
    wall_seconds: float
    threads: int
    busiest_thread_cpu_share: float
    cpu_limited: bool
    def __init__(self, cpu_seconds: _Optional[float] = ..., wall_seconds: _Optional[float] = ..., threads: _Optional[int] = ..., busiest_thread_cpu_share: _Optional[float] = ..., cpu_limited: _Optional[bool] = ...) -> None: ...

class OpenBandwidthSinkRequest(_message.Message):
    __slots__ = ("transport", "duration", "max_bytes", "streams", "rdma_device", "message_bytes", "queue_pairs", "test_seconds", "force", "sender")
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    RDMA_DEVICE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_PAIRS_FIELD_NUMBER: _ClassVar[int]
    TEST_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    transport: str
    duration: _duration_pb2.Duration
    max_bytes: int
    streams: int
    rdma_device: str
    message_bytes: int
    queue_pairs: int
    test_seconds: int
    force: bool
    sender: str
    def __init__(self, transport: _Optional[str] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_bytes: _Optional[int] = ..., streams: _Optional[int] = ..., rdma_device: _Optional[str] = ..., message_bytes: _Optional[int] = ..., queue_pairs: _Optional[int] = ..., test_seconds: _Optional[int] = ..., force: _Optional[bool] = ..., sender: _Optional[str] = ...) -> None: ...

class OpenBandwidthSinkResponse(_message.Message):
    __slots__ = ("port", "ticket", "expires", "node", "address", "message_bytes", "queue_pairs", "test_seconds", "sender")
    PORT_FIELD_NUMBER: _ClassVar[int]
    TICKET_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUEUE_PAIRS_FIELD_NUMBER: _ClassVar[int]
    TEST_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    port: int
    ticket: str
    expires: _timestamp_pb2.Timestamp
    node: str
    address: str
    message_bytes: int
    queue_pairs: int
    test_seconds: int
    sender: str
    def __init__(self, port: _Optional[int] = ..., ticket: _Optional[str] = ..., expires: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., node: _Optional[str] = ..., address: _Optional[str] = ..., message_bytes: _Optional[int] = ..., queue_pairs: _Optional[int] = ..., test_seconds: _Optional[int] = ..., sender: _Optional[str] = ...) -> None: ...
