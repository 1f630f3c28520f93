"""The NVML facade: live (pynvml), replay (a snapshot's `nvml.json`) and recording.

Checks call NVML by pynvml function name with plain arguments: a device is its index
(`call("nvmlDeviceGetName", 0)`), a MIG device is `"<gpu>:<mig index>"`, a GPU instance is
`"gi:<gpu>:<gpu instance id>"` and a compute instance `"ci:<gpu>:<gi id>:<ci id>"` (the first
argument of `nvmlGpuInstance*` and `nvmlComputeInstance*` functions). Every answer is a
plain JSON value (a ctypes struct becomes a dict of its fields, a handle inside it null), and
every error is an `NvmlError` named as pynvml names it without its `NVMLError_` prefix. So a
check cannot tell a live GPU from a replayed one, and `capture` can write down exactly what
it saw.

pynvml is imported only when a live NVML is first used: replaying a snapshot never loads it.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpuprobe.errors import SnapshotError
from gpuprobe.host.jsonfile import read_json
from gpuprobe.host.nvml_library import find_nvml_library

# NVML return codes by name (nvml.h); used to name errors pynvml raises without a subclass.
ERROR_CODES = {
    "Uninitialized": 1,
    "InvalidArgument": 2,
    "NotSupported": 3,
    "NoPermission": 4,
    "AlreadyInitialized": 5,
    "NotFound": 6,
    "InsufficientSize": 7,
    "InsufficientPower": 8,
    "DriverNotLoaded": 9,
    "Timeout": 10,
    "IrqIssue": 11,
    "LibraryNotFound": 12,
    "FunctionNotFound": 13,
    "CorruptedInforom": 14,
    "GpuIsLost": 15,
    "ResetRequired": 16,
    "OperatingSystem": 17,
    "LibRmVersionMismatch": 18,
    "InUse": 19,
    "Memory": 20,
    "NoData": 21,
    "VgpuEccNotSupported": 22,
    "InsufficientResources": 23,
    "FreqNotSupported": 24,
    "ArgumentVersionMismatch": 25,
    "Deprecated": 26,
    "NotReady": 27,
    "GpuNotFound": 28,
    "InvalidState": 29,
    "Unknown": 999,
}
_NAMES_BY_CODE = {code: name for name, code in ERROR_CODES.items()}

# Event type bits (nvml.h, nvmlEventType*; MigConfigChange is nvmlEventMigConfigChange) and
# the names nvml.json uses for them. eventData is the XID for XidCriticalError, 0 for the others.
EVENT_TYPES = {
    "SingleBitEccError": 0x1,
    "DoubleBitEccError": 0x2,
    "PState": 0x4,
    "XidCriticalError": 0x8,
    "Clock": 0x10,
    "PowerSourceChange": 0x80,
    "MigConfigChange": 0x100,
    "SingleBitEccErrorStorm": 0x200,
    "DramRetirementEvent": 0x400,
    "DramRetirementFailure": 0x800,
    "NonFatalPoisonError": 0x1000,
    "FatalPoisonError": 0x2000,
    "GpuUnavailableError": 0x4000,
    "GpuRecoveryAction": 0x8000,
}
# What the event watcher registers for: the device plugin's three (XIDs, double- and single-bit
# ECC) and the newer critical types, each where the GPU and driver support it.
WATCHED_EVENTS = (
    "XidCriticalError",
    "DoubleBitEccError",
    "SingleBitEccError",
    "DramRetirementFailure",
    "FatalPoisonError",
    "GpuUnavailableError",
    "GpuRecoveryAction",
)
# How nvmlDeviceRegisterEvents refuses a mask that holds a type the GPU lacks or the driver
# does not know: for the whole mask, so the watcher then registers the types one by one.
_REFUSED_MASK = frozenset({"NotSupported", "InvalidArgument"})

# Functions whose first argument is not a device handle.
_NO_HANDLE = frozenset(
    {
        "nvmlDeviceGetCount",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetHandleByPciBusId",
    }
)
# Functions whose first argument is a GPU instance or compute instance handle.
_INSTANCE_PREFIXES = ("nvmlGpuInstance", "nvmlComputeInstance")
# pynvml functions that fill a struct the caller allocates (`fn(handle, byref(info))`): the
# facade allocates it and answers with its fields, so checks call them like any other.
OUT_STRUCTS = {
    "nvmlDeviceGetGpuFabricInfoV": "c_nvmlGpuFabricInfoV_t",
    "nvmlDeviceGetGpuFabricInfo": "c_nvmlGpuFabricInfo_t",
}


class NvmlError(Exception):
    """An NVML error, named as pynvml names it without the `NVMLError_` prefix."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    @property
    def code(self) -> int:
        """The NVML return code (999, Unknown, for names NVML does not define)."""
        return ERROR_CODES.get(self.name, 999)

    def __str__(self) -> str:
        return f"NVML error {self.name}"


@dataclass(frozen=True)
class NvmlEvent:
    """An NVML event: its GPU, its type (a name of EVENT_TYPES) and data (the XID number for
    XidCriticalError, 0 for the other types)."""

    device: int
    type: str
    data: int
    time: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The event as an `events` entry of nvml.json."""
        d: dict[str, Any] = {"device": self.device, "type": self.type, "data": self.data}
        if self.time is not None:
            d["time"] = self.time
        return d


class Nvml(Protocol):
    """What checks may ask of NVML."""

    @property
    def init_error(self) -> str | None:
        """None when NVML initialised, else the error name `nvmlInit` raised."""

    def call(self, fn: str, *args: Any) -> Any:
        """Call a pynvml function by name; raises NvmlError."""

    def wait_events(self, timeout_s: float) -> list[NvmlEvent]:
        """Events that arrived, waiting up to `timeout_s` for the first; raises NvmlError."""


# --- live -----------------------------------------------------------------------------


def error_name(exc: BaseException) -> str:
    """The name of a pynvml error: `NVMLError_GpuIsLost` → `GpuIsLost`."""
    name = type(exc).__name__
    if name.startswith("NVMLError_"):
        return name.removeprefix("NVMLError_")
    value = getattr(exc, "value", None)
    return _NAMES_BY_CODE.get(value, "Unknown") if isinstance(value, int) else "Unknown"


def to_plain(value: Any) -> Any:
    """A pynvml result as a JSON value: structs to dicts, bytes to text, tuples to lists."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, ctypes._Pointer):
        return None  # a handle inside a struct (GPU instance info's device): not a fact
    if isinstance(value, ctypes.Structure | ctypes.Union):
        return {name: to_plain(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, ctypes.Array):
        return [to_plain(v) for v in value]
    if isinstance(value, ctypes._SimpleCData):
        return to_plain(value.value)
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if hasattr(value, "__dict__"):
        return {k: to_plain(v) for k, v in vars(value).items() if not k.startswith("_")}
    return repr(value)


class LiveNvml:
    """NVML on this host, through pynvml; initialised on first use.

    With a `root` other than `/` (`--root /host`), the library is the host's own
    `libnvidia-ml.so.1`, found in the host's library directories under the root
    (gpuprobe.host.nvml_library): the agent runs without the NVIDIA container runtime, so
    nothing puts NVML into its container. Where no directory under the root holds it, the
    process's own loader path is tried last (a runtime that did inject it)."""

    def __init__(self, root: str = "/") -> None:
        self.root = root
        # The library file loaded from under the root, None when loaded by its soname.
        self.library: str | None = None
        self._lock = threading.Lock()
        self._initialised = False
        self._init_error: str | None = None
        self._handles: dict[Any, Any] = {}
        self._event_set: Any = None
        # The event types registered per GPU index (a bit mask of EVENT_TYPES).
        self.registered_events: dict[int, int] = {}
        self._pynvml: Any = None

    @property
    def init_error(self) -> str | None:
        """None when nvmlInit succeeded, else its error name."""
        self._init()
        return self._init_error

    def _init(self) -> None:
        with self._lock:
            if self._initialised:
                return
            self._initialised = True
            try:
                import pynvml

                self._pynvml = pynvml
                self._load_from_root(pynvml)
                pynvml.nvmlInit()
            except ImportError:
                self._init_error = "LibraryNotFound"
            except Exception as exc:  # pynvml raises NVMLError subclasses
                self._init_error = error_name(exc)

    def _load_from_root(self, pynvml: Any) -> None:
        """Give pynvml the host's library under the root before nvmlInit loads one by its
        soname (pynvml loads only while its `nvmlLib` is unset)."""
        if os.path.realpath(self.root) == "/":
            return
        path = find_nvml_library(self.root)
        if path is None:
            return
        with pynvml.libLoadLock:
            if pynvml.nvmlLib is None:
                try:
                    pynvml.nvmlLib = ctypes.CDLL(path)
                except OSError:
                    return  # not a loadable library: nvmlInit says LibraryNotFound
                self.library = path

    def call(self, fn: str, *args: Any) -> Any:
        """Call `pynvml.<fn>` with device references turned into handles."""
        if self.init_error is not None:
            raise NvmlError("Uninitialized")
        pynvml = self._pynvml
        func = getattr(pynvml, fn, None)
        if func is None:
            raise NvmlError("FunctionNotFound")
        try:
            ref = _handle_answer(fn, args)
            if ref is not None:  # a handle is answered by its reference
                self._handle(ref)
                return ref
            if fn in OUT_STRUCTS:
                return self._fill(fn, func, args)
            if (fn.startswith("nvmlDevice") and fn not in _NO_HANDLE) or fn.startswith(
                _INSTANCE_PREFIXES
            ):
                return to_plain(func(self._handle(args[0]), *args[1:]))
            return to_plain(func(*args))
        except pynvml.NVMLError as exc:
            raise NvmlError(error_name(exc)) from None

    def _fill(self, fn: str, func: Any, args: tuple[Any, ...]) -> Any:
        """Call a function that fills a caller-allocated struct, and answer with the struct."""
        cls = getattr(self._pynvml, OUT_STRUCTS[fn], None)
        if cls is None:
            raise NvmlError("FunctionNotFound")  # a pynvml too old to know the struct
        info = cls()
        func(self._handle(args[0]), ctypes.byref(info), *args[1:])
        return to_plain(info)

    def _handle(self, ref: Any) -> Any:
        """The pynvml handle of a device, MIG device, GPU instance or compute instance ref."""
        if ref not in self._handles:
            self._handles[ref] = self._open(ref)
        return self._handles[ref]

    def _open(self, ref: Any) -> Any:
        pynvml = self._pynvml
        if isinstance(ref, int):
            return pynvml.nvmlDeviceGetHandleByIndex(ref)
        kind, numbers = parse_ref(ref)
        if kind == "mig":
            return pynvml.nvmlDeviceGetMigDeviceHandleByIndex(self._handle(numbers[0]), numbers[1])
        if kind == "gi":
            return pynvml.nvmlDeviceGetGpuInstanceById(self._handle(numbers[0]), numbers[1])
        parent = self._handle(f"gi:{numbers[0]}:{numbers[1]}")
        return pynvml.nvmlGpuInstanceGetComputeInstanceById(parent, numbers[2])

    def wait_events(self, timeout_s: float) -> list[NvmlEvent]:
        """Wait on an NVML event set registered for the critical event types on every GPU."""
        if self.init_error is not None:
            raise NvmlError("Uninitialized")
        pynvml = self._pynvml
        try:
            if self._event_set is None:
                self._event_set = self._register_events()
            try:
                data = pynvml.nvmlEventSetWait_v2(self._event_set, int(timeout_s * 1000))
            except pynvml.NVMLError as exc:
                if error_name(exc) == "Timeout":
                    return []
                raise
            index = pynvml.nvmlDeviceGetIndex(data.device)
            kind = next((n for n, bit in EVENT_TYPES.items() if bit == data.eventType), "Unknown")
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            return [NvmlEvent(index, kind, int(data.eventData), stamp)]
        except pynvml.NVMLError as exc:
            raise NvmlError(error_name(exc)) from None

    def _register_events(self) -> Any:
        pynvml = self._pynvml
        event_set = pynvml.nvmlEventSetCreate()
        wanted = sum(EVENT_TYPES[n] for n in WATCHED_EVENTS)
        for index in range(pynvml.nvmlDeviceGetCount()):
            try:
                handle = self._handle(index)
                try:
                    supported: int | None = pynvml.nvmlDeviceGetSupportedEventTypes(handle)
                except pynvml.NVMLError:
                    supported = None  # unknown: each wanted type is tried

                def register(mask: int, handle: Any = handle) -> None:
                    try:
                        pynvml.nvmlDeviceRegisterEvents(handle, mask, event_set)
                    except pynvml.NVMLError as exc:
                        raise NvmlError(error_name(exc)) from None

                self.registered_events[index] = register_event_types(register, wanted, supported)
            except (pynvml.NVMLError, NvmlError):
                continue  # a lost GPU must not stop the others' events
        return event_set


def register_event_types(
    register: Callable[[int], None], wanted: int, supported: int | None
) -> int:
    """Register the `wanted` event types (those of them `supported`, when known) through
    `register`, which raises NvmlError; returns the mask registered.

    When NVML refuses the whole mask (NotSupported, or InvalidArgument from a driver that does
    not know a newer type), each type is registered alone, so one it lacks costs only itself.
    Any other error (GpuIsLost) is raised.
    """
    mask = wanted & supported if supported is not None else wanted
    if not mask:
        return 0
    try:
        register(mask)
        return mask
    except NvmlError as exc:
        if exc.name not in _REFUSED_MASK:
            raise
    registered = 0
    for bit in (1 << n for n in range(mask.bit_length())):
        if not mask & bit:
            continue
        try:
            register(bit)
        except NvmlError as exc:
            if exc.name not in _REFUSED_MASK:
                raise
            continue
        registered |= bit
    return registered


def _handle_answer(fn: str, args: tuple[Any, ...]) -> Any:
    """The reference a handle-returning function answers with (None for other functions)."""
    if fn == "nvmlDeviceGetHandleByIndex":
        return args[0]
    if fn == "nvmlDeviceGetMigDeviceHandleByIndex":
        return f"{args[0]}:{args[1]}"
    if fn == "nvmlDeviceGetGpuInstanceById":
        return f"gi:{args[0]}:{args[1]}"
    if fn == "nvmlGpuInstanceGetComputeInstanceById":
        return f"ci:{str(args[0]).removeprefix('gi:')}:{args[1]}"
    return None


def parse_ref(ref: Any) -> tuple[str, tuple[int, ...]]:
    """Split a handle reference: `"0:1"` → ("mig", (0, 1)), `"gi:0:1"` → ("gi", (0, 1)),
    `"ci:0:1:0"` → ("ci", (0, 1, 0)); raises NvmlError InvalidArgument for anything else."""
    parts = str(ref).split(":")
    kind = parts[0] if parts[0] in ("gi", "ci") else "mig"
    numbers = parts[1:] if kind != "mig" else parts
    want = {"mig": 2, "gi": 2, "ci": 3}[kind]
    if len(numbers) != want or not all(n.isdigit() for n in numbers):
        raise NvmlError("InvalidArgument")
    return kind, tuple(int(n) for n in numbers)


# --- replay ---------------------------------------------------------------------------


def _key(fn: str, args: Sequence[Any]) -> str:
    return fn + json.dumps(list(args), separators=(",", ":"))


class ReplayNvml:
    """NVML replayed from an nvml.json record, following the contract's replay rules.

    - a call that is not in the record raises NotSupported;
    - several entries for the same fn and args answer in order, the last repeating;
    - `nvmlDeviceGetHandleByIndex(i)` needs no entry for i below the recorded count;
    - an entry's `delay` (seconds) is slept before it answers, to test deadlines.
    """

    def __init__(self, record: dict[str, Any]) -> None:
        validate_record(record)
        self._init_error: str | None = record.get("init_error")
        self._entries: dict[str, list[dict[str, Any]]] = {}
        for entry in record["calls"]:
            self._entries.setdefault(_key(entry["fn"], entry["args"]), []).append(entry)
        self._served: dict[str, int] = {}
        self._events = [
            NvmlEvent(e["device"], e["type"], e["data"], e.get("time"))
            for e in record.get("events", [])
        ]
        self._lock = threading.Lock()

    @property
    def init_error(self) -> str | None:
        """The recorded nvmlInit error, or None."""
        return self._init_error

    def call(self, fn: str, *args: Any) -> Any:
        """Answer as the record says."""
        if self._init_error is not None:
            raise NvmlError("Uninitialized")
        key = _key(fn, args)
        with self._lock:
            entries = self._entries.get(key)
            if not entries:
                return self._unrecorded(fn, args)
            served = self._served.get(key, 0)
            self._served[key] = served + 1
            entry = entries[min(served, len(entries) - 1)]
        if entry.get("delay"):
            time.sleep(float(entry["delay"]))
        if "error" in entry:
            raise NvmlError(str(entry["error"]))
        return entry["ret"]

    def _unrecorded(self, fn: str, args: Sequence[Any]) -> Any:
        if fn == "nvmlDeviceGetHandleByIndex" and len(args) == 1:
            count = self._recorded_count()
            if isinstance(args[0], int) and 0 <= args[0] < count:
                return args[0]
            raise NvmlError("InvalidArgument")
        raise NvmlError("NotSupported")

    def _recorded_count(self) -> int:
        entries = self._entries.get(_key("nvmlDeviceGetCount", []), [])
        counts = [e["ret"] for e in entries if isinstance(e.get("ret"), int)]
        return counts[-1] if counts else 0

    def wait_events(self, timeout_s: float) -> list[NvmlEvent]:
        """The recorded events, all at once on the first call; then nothing after `timeout_s`."""
        if self._init_error is not None:
            raise NvmlError("Uninitialized")
        with self._lock:
            events, self._events = self._events, []
        if not events:
            time.sleep(timeout_s)
        return events


def load_record(path: str) -> dict[str, Any]:
    """Read and validate an nvml.json file; raises SnapshotError."""
    try:
        record = read_json(path)
    except FileNotFoundError:
        raise SnapshotError(f"{path}: no such file") from None
    try:
        validate_record(record)
    except SnapshotError as exc:
        raise SnapshotError(f"{path}: {exc}") from None
    return record  # type: ignore[no-any-return]


# Counts a snapshot may answer, bounded by what hardware has: the largest single systems
# hold 16 GPUs (8 is usual), a GPU at most 7 MIG devices. A count of 10^7 would have every
# check walk ten million devices (the daemon grew 13 MB/s).
MAX_DEVICES = 64
COUNTS = {
    "nvmlDeviceGetCount": MAX_DEVICES,
    "nvmlDeviceGetCount_v2": MAX_DEVICES,
    "nvmlUnitGetCount": MAX_DEVICES,
    "nvmlDeviceGetMaxMigDeviceCount": MAX_DEVICES,
}
# A recorded call's delay (testing deadlines) is at most an hour.
MAX_REPLAY_DELAY = 3600


def validate_record(record: Any) -> None:
    """Raise SnapshotError unless `record` has the nvml.json shape of snapshot format 1."""
    if not isinstance(record, dict):
        raise SnapshotError("not a JSON object")
    if record.get("format") != 1:
        raise SnapshotError(f"unsupported format {record.get('format')!r} (expected 1)")
    if not isinstance(record.get("init_error"), str | None):
        raise SnapshotError("init_error must be null or an error name")
    calls = record.get("calls")
    if not isinstance(calls, list):
        raise SnapshotError("calls must be a list")
    for i, entry in enumerate(calls):
        where = f"calls[{i}]"
        if not isinstance(entry, dict):
            raise SnapshotError(f"{where}: not an object")
        if not isinstance(entry.get("fn"), str) or not entry["fn"].startswith("nvml"):
            raise SnapshotError(f"{where}: fn must name an nvml function")
        if not isinstance(entry.get("args"), list):
            raise SnapshotError(f"{where}: args must be a list")
        if ("ret" in entry) == ("error" in entry):
            raise SnapshotError(f"{where}: needs exactly one of ret and error")
        if "error" in entry and not isinstance(entry["error"], str):
            raise SnapshotError(f"{where}: error must be an error name")
        delay = entry.get("delay", 0)
        if not isinstance(delay, int | float) or isinstance(delay, bool) or delay < 0:
            raise SnapshotError(f"{where}: delay must be a number of seconds")
        if delay > MAX_REPLAY_DELAY:  # past it time.sleep overflows, and no deadline is so long
            raise SnapshotError(f"{where}: delay {delay:g} is over {MAX_REPLAY_DELAY} s")
        if "ret" in entry and not _fits_nvml(entry["ret"]):
            raise SnapshotError(
                f"{where}: {entry['fn']} answers a number beyond NVML's 64-bit types"
            )
        if entry["fn"] in COUNTS and "ret" in entry:
            most = COUNTS[entry["fn"]]
            if not (_is_int(entry["ret"]) and 0 <= entry["ret"] <= most):
                raise SnapshotError(
                    f"{where}: {entry['fn']} must answer a count from 0 to {most}"
                    " (no node has more)"
                )
    events = record.get("events", [])
    if not isinstance(events, list):
        raise SnapshotError("events must be a list")
    for i, event in enumerate(events):
        if not (
            isinstance(event, dict)
            and _is_int(event.get("device"))
            and isinstance(event.get("type"), str)
            and _is_int(event.get("data"))
        ):
            raise SnapshotError(f"events[{i}]: needs device, type and data")


def _fits_nvml(ret: Any) -> bool:
    """Whether every integer in an answer fits NVML's widest C types (64 bits, signed or
    not): a 10^400 can only be a corrupt or forged record, and no renderer can show it."""
    stack = [ret]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif _is_int(value) and not -(2**63) <= value < 2**64:
            return False
    return True


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# --- recording ------------------------------------------------------------------------


class RecordingNvml:
    """Wraps another NVML and writes down every call, answer, error and event (for capture)."""

    def __init__(self, inner: Nvml) -> None:
        self._inner = inner
        self._calls: list[dict[str, Any]] = []
        self._events: list[NvmlEvent] = []
        self._lock = threading.Lock()

    @property
    def init_error(self) -> str | None:
        """The wrapped NVML's init error."""
        return self._inner.init_error

    def call(self, fn: str, *args: Any) -> Any:
        """Call through and record the outcome."""
        entry: dict[str, Any] = {"fn": fn, "args": list(args)}
        try:
            ret = self._inner.call(fn, *args)
        except NvmlError as exc:
            entry["error"] = exc.name
            self._append(entry)
            raise
        entry["ret"] = ret
        self._append(entry)
        return ret

    def _append(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._calls.append(entry)

    def wait_events(self, timeout_s: float) -> list[NvmlEvent]:
        """Wait through and record the events."""
        events = self._inner.wait_events(timeout_s)
        with self._lock:
            self._events.extend(events)
        return events

    def record(self) -> dict[str, Any]:
        """The nvml.json record of everything seen so far."""
        with self._lock:
            return {
                "format": 1,
                "init_error": self.init_error,
                "calls": list(self._calls),
                "events": [e.to_dict() for e in self._events],
            }
