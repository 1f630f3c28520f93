"""Files the agent reads from its own filesystem rather than the host's, kept in a snapshot.

The NVIDIA device plugin's configuration (`device_plugin.config_file`) is such a file: its
ConfigMap mounted into the agent's pod, not a host path. `gpuprobe capture` keeps what it read
in `device-plugin.json`, so a replay judges time-slicing, MPS, the MIG strategy and CDI device
names as on the node:

    {"config_file": "/etc/nvidia-device-plugin/config.yaml", "content": "version: v1\\n..."}
    {"config_file": "/etc/nvidia-device-plugin/config.yaml", "error": "No such file or directory"}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gpuprobe.errors import SnapshotError
from gpuprobe.host.jsonfile import read_json

DEVICE_PLUGIN_FILE = "device-plugin.json"
MAX_CONFIG_BYTES = 1024 * 1024


@dataclass(frozen=True)
class AgentFile:
    """A file as the agent read it: its path and content, or why it could not be read."""

    path: str
    content: bytes | None = None
    error: str | None = None


def read_agent_file(path: str) -> AgentFile:
    """Read a file of the agent's own filesystem (its first MiB)."""
    try:
        with open(path, "rb") as f:
            return AgentFile(path, f.read(MAX_CONFIG_BYTES))
    except OSError as exc:
        return AgentFile(path, error=exc.strerror or str(exc))


def agent_file_bytes(file: AgentFile) -> bytes:
    """`file` in a snapshot's JSON form (content as UTF-8 text, undecodable bytes replaced)."""
    entry: dict[str, str] = {"config_file": file.path}
    if file.content is not None:
        entry["content"] = file.content.decode("utf-8", errors="replace")
    else:
        entry["error"] = file.error or "cannot be read"
    return (json.dumps(entry, indent=1) + "\n").encode("utf-8")


def write_agent_file(path: Path, file: AgentFile) -> None:
    """Write `file` in a snapshot's JSON form to `path`."""
    path.write_bytes(agent_file_bytes(file))


def load_agent_file(path: Path) -> AgentFile | None:
    """A snapshot's kept file (None when the snapshot has none); SnapshotError when malformed."""
    try:
        entry = read_json(path)
    except FileNotFoundError:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("config_file"), str):
        raise SnapshotError(f'{path}: not an object with a string "config_file"')
    content, error = entry.get("content"), entry.get("error")
    if isinstance(content, str) and error is None:
        return AgentFile(entry["config_file"], content.encode("utf-8", errors="replace"))
    if isinstance(error, str) and content is None:
        return AgentFile(entry["config_file"], error=error)
    raise SnapshotError(f'{path}: needs either a string "content" or a string "error"')
