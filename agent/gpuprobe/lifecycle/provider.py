"""Which cloud this node runs in, from the firmware's DMI strings (read through the host's
files, so a snapshot's rootfs replays them).

The providers set them in their hypervisors' SMBIOS tables: `Amazon EC2` (Nitro) as the
system vendor on AWS, `Google` / `Google Compute Engine` on GCE, `Microsoft Corporation` /
`Virtual Machine` on Azure, whose chassis asset tag `7783-7084-3265-9085-8269-3286-77` tells
an Azure VM from a Hyper-V VM elsewhere. AWS's older Xen instances say `Xen` and carry
`amazon` in the BIOS version.
"""

from __future__ import annotations

from gpuprobe.host import Host

DMI = "/sys/class/dmi/id"
AWS, GCP, AZURE = "aws", "gcp", "azure"
PROVIDERS = (AWS, GCP, AZURE)
AZURE_ASSET_TAG = "7783-7084-3265-9085-8269-3286-77"


def dmi(host: Host, name: str) -> str:
    """One DMI string (`sys_vendor`, `product_name`, ...), stripped; "" when unreadable."""
    return (host.fs.try_read_text(f"{DMI}/{name}") or "").strip()


def detect(host: Host) -> str | None:
    """The cloud provider the DMI strings name (`aws`, `gcp`, `azure`), None for none known."""
    vendor = dmi(host, "sys_vendor")
    if vendor == "Amazon EC2":
        return AWS
    if vendor == "Google" or dmi(host, "product_name") == "Google Compute Engine":
        return GCP
    if vendor == "Microsoft Corporation" and dmi(host, "product_name") == "Virtual Machine":
        return AZURE if dmi(host, "chassis_asset_tag") == AZURE_ASSET_TAG else None
    if vendor == "Xen" and "amazon" in dmi(host, "bios_version").lower():
        return AWS
    return None
