"""AMD's ROCm SMI library, where the node has it: a second opinion, never a requirement.

`librocm_smi64.so.1` (Debian's `librocm-smi64-1`, ROCm's `/opt/rocm/lib`) is looked for
under the host root and asked, in a child process, for its version and how many GPUs it
monitors. A child, because the library aborts its process on some calls after a failed
`rsmi_init` (an `assert` in rocm_smi.cc, seen with 5.2.3 on a node without /sys/class/drm):
the agent must outlive whatever the library does. The library's absence, its refusal to
start, a crash or a hang are facts for `data`, never findings.

`Host.rocm_smi` is the transport: `LiveRocmSmi` asks the library once per agent (a child
process each time would cost seconds a round); a snapshot does not replay the library, so on a
replayed node (`ReplayedRocmSmi`) it is "not asked".
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Protocol

from gpuprobe.host.child_python import python_command
from gpuprobe.host.fs import HostFS

LIBRARY = "librocm_smi64.so.1"
LIBRARY_DIRS = (
    "/opt/rocm/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
)
RSMI_STATUS_SUCCESS = 0
TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class SmiProbe:
    """What the library said: where it lies (None: absent), `status` (`absent`, `ok`,
    `init failed: <its status text>`, `not asked`, `crashed: ...`, `timed out`), its version
    and how many GPUs it monitors."""

    library: str | None
    status: str
    version: str | None = None
    devices: int | None = None

    def to_dict(self) -> dict[str, object]:
        """The probe as `data` shows it."""
        return {
            "library": self.library,
            "status": self.status,
            "version": self.version,
            "devices": self.devices,
        }


NOT_ASKED = SmiProbe(None, "not asked")


class RocmSmi(Protocol):
    """AMD's SMI library on the node, as a transport: what it says when asked."""

    def probe(self) -> SmiProbe:
        """The library's answer (its absence, refusal or crash included)."""
        ...


class LiveRocmSmi:
    """The library under the host root, asked on first use and its answer kept."""

    def __init__(self, fs: HostFS) -> None:
        self._fs = fs
        self._answer: SmiProbe | None = None
        self._lock = threading.Lock()

    def probe(self) -> SmiProbe:
        """The kept answer, asking the library the first time."""
        with self._lock:
            if self._answer is None:
                self._answer = probe(self._fs)
            return self._answer


class ReplayedRocmSmi:
    """A snapshot's node: the library is not replayed, so it is never asked."""

    def probe(self) -> SmiProbe:
        """Always "not asked"."""
        return NOT_ASKED


def find_library(fs: HostFS) -> str | None:
    """The library's path on this machine under the host root, or None."""
    for directory in LIBRARY_DIRS:
        path = f"{directory}/{LIBRARY}"
        if fs.exists(path):
            return str(fs.real_path(path))
    return None


def probe(fs: HostFS, timeout_s: float = TIMEOUT_SECONDS) -> SmiProbe:
    """Ask the library, in a child process bounded by `timeout_s`."""
    library = find_library(fs)
    if library is None:
        return SmiProbe(None, "absent")
    try:
        done = subprocess.run(
            python_command("gpuprobe.host.rocm_smi", library),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return SmiProbe(library, "timed out")
    except OSError as exc:
        return SmiProbe(library, f"crashed: {exc.strerror or exc}")
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        answer = None
    if done.returncode != 0 or not isinstance(answer, dict):
        return SmiProbe(library, f"crashed: exit status {done.returncode}")
    version = answer.get("version")
    devices = answer.get("devices")
    return SmiProbe(
        library,
        str(answer.get("status", "crashed: no status")),
        version if isinstance(version, str) else None,
        devices if isinstance(devices, int) else None,
    )


class _Version(ctypes.Structure):
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("patch", ctypes.c_uint32),
        ("build", ctypes.c_char_p),
    ]


def ask(library: str) -> dict[str, object]:
    """The child's side: load the library, init it, read its version and device count. After
    a failed init nothing else is called (the library may abort)."""
    lib = ctypes.CDLL(library)
    version = _Version()
    text = None
    if lib.rsmi_version_get(ctypes.byref(version)) == RSMI_STATUS_SUCCESS:
        text = f"{version.major}.{version.minor}.{version.patch}"
    status = lib.rsmi_init(ctypes.c_uint64(0))
    if status != RSMI_STATUS_SUCCESS:
        message = ctypes.c_char_p()
        lib.rsmi_status_string(status, ctypes.byref(message))
        reason = (message.value or b"").decode(errors="replace") or f"status {status}"
        return {"status": f"init failed: {reason}", "version": text}
    count = ctypes.c_uint32(0)
    devices = (
        count.value
        if lib.rsmi_num_monitor_devices(ctypes.byref(count)) == RSMI_STATUS_SUCCESS
        else None
    )
    lib.rsmi_shut_down()
    return {"status": "ok", "version": text, "devices": devices}


if __name__ == "__main__":  # the child of `probe`
    print(json.dumps(ask(sys.argv[1])), flush=True)
