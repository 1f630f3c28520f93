"""What the XID check keeps (`KEEPS`: its memory, which survives a restart through the state
file in the runner's state directory), and what the live daemon writes there each run."""

from __future__ import annotations

from gpuprobe.checks.state import DEFAULT_STATE_DIR, Keeps, StateDir
from gpuprobe.checks.xid import state as xid_state
from gpuprobe.checks.xid.memory import XidMemory
from gpuprobe.checks.xid.model import Observation
from gpuprobe.checks.xid.settings import xid_settings
from gpuprobe.config import Config
from gpuprobe.host import Host, state_files

__all__ = ["DEFAULT_STATE_DIR", "KEEPS", "save_sticky"]


def _configured_dir(config: Config) -> str | None:
    """The state directory `xid.state_dir` names (None: unset)."""
    return xid_settings(config).state_dir


# The check's memory of this boot (`memory.XidMemory`); its sticky XIDs and clearings survive
# a restart in `xid-state.json`.
KEEPS: Keeps[XidMemory] = Keeps(
    XidMemory, survives_restart=True, configured_dir=_configured_dir, setting="xid.state_dir"
)


def save_sticky(host: Host, seen: Observation, directory: StateDir | None) -> str | None:
    """Keep the live daemon's sticky XIDs in the state file (never from a snapshot); returns
    why the file could not be written, if it could not."""
    if host.is_snapshot or directory is None or not directory.writable() or seen.state_error:
        return None
    sticky = {x.key: x.to_entry() for x in seen.xids if x.active and x.info.critical}
    # Faults that cleared themselves stay cleared after an agent restart, like an operator's.
    recovered = {k: m for k, m in seen.cleared.items() if "by" in m}
    state = seen.state or xid_state.XidState()
    if state.boot_id != seen.boot_id:
        state = xid_state.XidState(seen.boot_id)
    elif state.sticky == sticky and all(state.cleared.get(k) == m for k, m in recovered.items()):
        return None
    state.sticky = sticky
    state.cleared.update(recovered)
    path = str(xid_state.state_path(directory))
    try:
        xid_state.save(directory, state)
    except xid_state.StateError as exc:
        state_files.saved(path, str(exc))
        return str(exc)
    state_files.saved(path, None)
    return None
