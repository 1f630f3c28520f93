"""Where the XID check keeps its state, and what the live daemon writes there each run."""

from __future__ import annotations

from gpuprobe.checks.xid import state as xid_state
from gpuprobe.checks.xid.model import Observation
from gpuprobe.checks.xid.settings import xid_settings
from gpuprobe.config import Config
from gpuprobe.host import Host, state_files

# The live node's state directory when `xid.state_dir` is not configured.
DEFAULT_STATE_DIR = "/var/lib/gpuprobe"


def state_dir(host: Host, config: Config) -> str | None:
    """The state directory this host uses: the configured one, else the live default; None
    for a snapshot without one (its replay must not read this machine's state)."""
    if xid_settings(config).state_dir is not None:
        return xid_settings(config).state_dir
    return None if host.is_snapshot else DEFAULT_STATE_DIR


def save_sticky(host: Host, seen: Observation, directory: str | None) -> str | None:
    """Keep the live daemon's sticky XIDs in the state file (never from a snapshot); returns
    why the file could not be written, if it could not."""
    if (
        host.is_snapshot
        or directory is None
        or not xid_state.writable(directory)
        or seen.state_error
    ):
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
