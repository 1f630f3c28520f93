"""The `xid` section of the configuration: defined in `gpuprobe.checks.rules.xid_settings`,
where the pods check reads its kernel-log sources too (a check imports no other check)."""

from gpuprobe.checks.rules.xid_settings import (
    SECTION,
    XidConfig,
    XidPolicyRule,
    xid_settings,
)

__all__ = ["SECTION", "XidConfig", "XidPolicyRule", "xid_settings"]
