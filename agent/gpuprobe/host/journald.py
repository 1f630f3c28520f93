"""The kernel's records in the host's systemd journal, read with journalctl.

On a node the DaemonSet mounts the host's journals read-only (`/var/log/journal`, persistent;
`/run/log/journal`, volatile); each directory is read with the real `journalctl` (systemd's
own reader of its file format), the kernel's records only (`_TRANSPORT=kernel`) of one boot
(`_BOOT_ID`), after a cursor when one is given, as JSON (`-o json`: one object a line, each
field a string, or a list of byte values where the text is not UTF-8). A directory is resolved
inside the host's root as a chroot would (`HostFS.tree`). What journalctl gives is bounded
(the newest `MAX_RECORDS` records, `MAX_BYTES` of them read) and so is its time
(`TIMEOUT_SECONDS`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field

from gpuprobe.host.fs import HostFS

JOURNAL_DIRS = ("/var/log/journal", "/run/log/journal")
TIMEOUT_SECONDS = 20.0
NO_RECORDS = "no kernel records of this boot"
# The most records asked for in one read (the newest: `-n`), as many as the kernel journal
# keeps, and the most of journalctl's output read.
MAX_RECORDS = 65_536
MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class JournaldRead:
    """One directory's kernel records as journalctl gave them (its JSON objects, oldest
    first), or why it could not be read (`absent`, `journalctl not found`, journalctl's own
    message)."""

    directory: str
    records: list[dict[str, object]] = field(default_factory=list)
    error: str | None = None


def read_kernel(
    fs: HostFS, directory: str, *, boot_id: str, after_cursor: str | None = None
) -> JournaldRead:
    """The kernel's records of boot `boot_id` in the journal directory (a host path), after
    `after_cursor` when given."""
    journalctl = shutil.which("journalctl")
    if journalctl is None:
        return JournaldRead(directory, error="journalctl not found")
    try:
        where = fs.resolved_path(directory)
    except (OSError, ValueError):
        return JournaldRead(directory, error="absent")
    if not where.is_dir():
        return JournaldRead(directory, error="absent")
    command = [journalctl, "--directory", str(where), "-o", "json", "--no-pager", "-q"]
    command += ["-n", str(MAX_RECORDS)]
    if after_cursor is not None:
        command += ["--after-cursor", after_cursor]
    # /proc gives the boot id with dashes (a UUID), the journal without
    command += ["_TRANSPORT=kernel", f"_BOOT_ID={boot_id.replace('-', '').lower()}"]
    try:
        done = subprocess.run(
            command, capture_output=True, timeout=TIMEOUT_SECONDS, check=False, env={}
        )
    except subprocess.TimeoutExpired:
        return JournaldRead(directory, error=f"journalctl timed out after {TIMEOUT_SECONDS:g} s")
    except OSError as exc:
        return JournaldRead(directory, error=f"journalctl: {exc.strerror or exc}")
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
        return JournaldRead(directory, error=said[-1][:200] if said else f"exit {done.returncode}")
    records: list[dict[str, object]] = []
    for raw in done.stdout[:MAX_BYTES].splitlines():
        try:
            value = json.loads(raw)
        except ValueError:
            continue  # a line cut at MAX_BYTES
        if isinstance(value, dict):
            records.append(value)
    if not records and after_cursor is None:
        # The kernel logs from its first moment: a journal holding none of this boot's
        # records has none of it (journalctl passes over a damaged file without a word).
        return JournaldRead(directory, error=NO_RECORDS)
    return JournaldRead(directory, records)
