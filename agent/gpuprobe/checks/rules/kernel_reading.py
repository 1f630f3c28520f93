"""How a check reads this boot's kernel log: as the xid section says (`xid.kmsg`,
`xid.journald`, `xid.kernel_logs`, `xid.kernel_log_max_bytes`), for every check that ties a
fault to an XID (the xid check, the pods check)."""

from __future__ import annotations

from datetime import datetime

from gpuprobe.checks.rules.xid_settings import xid_settings
from gpuprobe.config import Config
from gpuprobe.gpu.kernel_sources import KernelLogRead, read_kernel_log
from gpuprobe.host import Host


def read_sources(host: Host, config: Config, now: datetime) -> KernelLogRead:
    """This boot's kernel log as `xid.kmsg`, `xid.kernel_logs` and
    `xid.kernel_log_max_bytes` say to read it: how every check that ties a fault to an XID
    reads it (the xid check, the pods check), each once in its run."""
    settings = xid_settings(config)
    return read_kernel_log(
        host,
        kmsg=settings.kmsg,
        journald=settings.journald,
        paths=settings.kernel_logs,
        max_bytes=settings.kernel_log_max_bytes,
        now=now,
    )
